"""DCGM's profiling fields through NVML's GPM (sources/gpu/nvml_gpm.py), read by the real NvmlSource on nvidia-ml-py
with the driver replaced by recorded answers (tests/sources/gpu/fake_nvml.py, its GPM section):

- dcgm_prof_h100_slurm_job_exporter30.txt: DCGM 3.3.x's readings of two H100s (which DCGM takes from GPM on
  Hopper): the agent, reading GPM itself, must write what DCGM wrote;
- gpud_sm_occupancy_pr40.yaml: GPM's own SM-occupancy answers on eight Hopper GPUs;
- dcgm_exporter_h100_mig_gr_engine_512.txt: an H100's 1g.10gb GPU instances' GR_ENGINE_ACTIVE, read per instance.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import pynvml
import pytest

from gpufleet.agent.fields import named
from gpufleet.sources.gpu.nvml import FIELDS, NvmlSource
from gpufleet.telemetry.field_sources import field_fills
from gpufleet.telemetry.fields import load_field_catalog
from gpufleet.telemetry.frame import MetricFrame
from gpufleet.telemetry.gpm_fields import load_gpm_fields
from tests.conftest import CAPTURES
from tests.sources.gpu.fake_nvml import (
    FakeGpu,
    FakeMig,
    FakeNvml,
    GpmFakeNvml,
    GpmRecording,
    gpm_from_dcgm_session,
    gpm_from_gpud_scan,
    gpm_mig_from_exporter,
)

GPM = CAPTURES / "nvml_gpm"
PROF = [f.field for f in load_gpm_fields()]
# the DCGM fields the captured session watched, by its own names for them
SESSION_FIELDS = {
    "sm_active": "DCGM_FI_PROF_SM_ACTIVE",
    "sm_occupancy": "DCGM_FI_PROF_SM_OCCUPANCY",
    "tensor_active": "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "dram_active": "DCGM_FI_PROF_DRAM_ACTIVE",
    "fp64_active": "DCGM_FI_PROF_PIPE_FP64_ACTIVE",
    "fp32_active": "DCGM_FI_PROF_PIPE_FP32_ACTIVE",
    "fp16_active": "DCGM_FI_PROF_PIPE_FP16_ACTIVE",
    "pcie_tx_bytes": "DCGM_FI_PROF_PCIE_TX_BYTES",
    "pcie_rx_bytes": "DCGM_FI_PROF_PCIE_RX_BYTES",
    "nvlink_tx_bytes": "DCGM_FI_PROF_NVLINK_TX_BYTES",
    "nvlink_rx_bytes": "DCGM_FI_PROF_NVLINK_RX_BYTES",
}


def every_prof_frame(source: NvmlSource) -> MetricFrame:
    """A frame with every GPM field switched on (the catalog ships some of them off, as dcgm-exporter does)."""
    return MetricFrame(tuple(source.entities()), catalog=load_field_catalog().with_enabled(PROF).enabled())


def collect_twice(source: NvmlSource, frame: MetricFrame) -> None:
    """The first collection takes GPM's baseline sample: no profiling value yet."""
    source.collect(frame)
    assert all(np.isnan(frame.gpu(name)).all() for name in PROF)
    source.collect(frame)


def test_an_h100_reads_what_dcgm_read_from_gpm() -> None:
    recorded = gpm_from_dcgm_session((GPM / "dcgm_prof_h100_slurm_job_exporter30.txt").read_text())
    fake = GpmFakeNvml([gpu for gpu, _, _ in recorded], {i: rec for i, (_, rec, _) in enumerate(recorded)})
    source = NvmlSource("h100-node", fake)  # type: ignore[arg-type]
    frame = every_prof_frame(source)
    collect_twice(source, frame)
    for e, (_, _, dcgm) in enumerate(recorded):
        for name, field in SESSION_FIELDS.items():
            assert frame.gpu(field)[e] == pytest.approx(dcgm[name], rel=1e-12, abs=1e-15), (e, field)
    assert frame.gpu("DCGM_FI_PROF_PCIE_RX_BYTES")[0] == pytest.approx(873_509_672)  # bytes/s, as DCGM gives it
    assert frame.gpu("DCGM_FI_PROF_SM_ACTIVE")[1] == pytest.approx(0.9322035653753363)  # a ratio, not a percentage
    # metrics the session did not watch were not recorded: the driver's NOT_SUPPORTED leaves them empty
    assert np.isnan(frame.gpu("DCGM_FI_PROF_GR_ENGINE_ACTIVE")).all()
    assert [key for fn, key in fake.calls if fn == "nvmlGpmMetricsGet"] == [0, 1]  # one call per GPU, every metric


def test_gpms_own_answers_convert_from_percent() -> None:
    scan = gpm_from_gpud_scan((GPM / "gpud_sm_occupancy_pr40.yaml").read_text())
    gpus = [FakeGpu(uuid=uuid, name="NVIDIA H100 80GB HBM3", minor=i) for i, (uuid, _) in enumerate(scan)]
    fake = GpmFakeNvml(gpus, {i: rec for i, (_, rec) in enumerate(scan)})
    source = NvmlSource("hopper-node", fake)  # type: ignore[arg-type]
    frame = every_prof_frame(source)
    collect_twice(source, frame)
    occupancy = frame.gpu("DCGM_FI_PROF_SM_OCCUPANCY")
    assert list(occupancy) == pytest.approx([0, 0, 0, 0, 0.07739499086738595, 0.12030642535682517, 0, 0])
    assert [e.uuid for e in frame.entities] == [uuid for uuid, _ in scan]


def test_each_collection_covers_the_interval_since_the_last() -> None:
    """Samples alternate between two buffers: the third collection's values are the second interval's."""
    scan = gpm_from_gpud_scan((GPM / "gpud_sm_occupancy_pr40.yaml").read_text())
    intervals = [rec.intervals[0] for _, rec in scan[3:6]]  # three GPUs' answers as one GPU's three intervals
    fake = GpmFakeNvml([FakeGpu(uuid="GPU-0", name="NVIDIA H100 80GB HBM3")], {0: GpmRecording(intervals)})
    source = NvmlSource("n", fake)  # type: ignore[arg-type]
    frame = every_prof_frame(source)
    seen = []
    for _ in range(4):
        source.collect(frame)
        seen.append(frame.gpu("DCGM_FI_PROF_SM_OCCUPANCY")[0])
    assert math.isnan(seen[0])
    assert seen[1:] == pytest.approx([0.0, 0.07739499086738595, 0.12030642535682517])
    assert len(fake._buffers) == 2  # two sample buffers, reused


def h100_in_mig_mode(fake_cls: type[FakeNvml] = GpmFakeNvml) -> tuple[GpmFakeNvml, dict[int, GpmRecording]]:
    instances = gpm_mig_from_exporter((GPM / "dcgm_exporter_h100_mig_gr_engine_512.txt").read_text())
    name = "NVIDIA H100 80GB HBM3"
    migs = [
        FakeMig(slot, gi, 0, f"MIG-{gi:08x}-0000-0000-0000-000000000000", "1g.10gb", f"{name} MIG 1g.10gb", 0.0, 9856.0)
        for slot, gi in enumerate(sorted(instances))
    ]
    gpu = FakeGpu(uuid="GPU-58e8f5ea-13cc-013a-d88f-2bcf5ae8bc77", name=name, mig_mode=(1, 1), migs=migs)
    return GpmFakeNvml([gpu], {(0, gi): rec for gi, rec in instances.items()}), instances


def test_mig_instances_read_their_own_gpm() -> None:
    fake, instances = h100_in_mig_mode()
    assert sorted(instances) == [7, 8, 9]
    source = NvmlSource("mig-node", fake)  # type: ignore[arg-type]
    frame = every_prof_frame(source)
    collect_twice(source, frame)
    assert [e.gpu_instance_id for e in frame.entities] == [7, 8, 9]
    assert list(frame.gpu("DCGM_FI_PROF_GR_ENGINE_ACTIVE")) == [0.0, 0.0, 0.0]  # a value: 0 %, not empty
    assert np.isnan(frame.gpu("DCGM_FI_PROF_PCIE_TX_BYTES")).all()  # the whole GPU's: none per instance (as DCGM)
    assert np.isnan(frame.gpu("DCGM_FI_PROF_SM_ACTIVE")).all()  # not in the capture: NOT_SUPPORTED
    sampled = [key for fn, key in fake.calls if fn == "nvmlGpmMetricsGet"]
    assert sampled == [(0, 7), (0, 8), (0, 9)]
    assert not any(fn == "nvmlGpmSampleGet" for fn, _ in fake.calls)  # a MIG GPU is sampled per GPU instance
    fields = source.fields
    assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in fields.fills
    assert "whole GPUs only" in fields.only_for("DCGM_FI_PROF_PCIE_TX_BYTES")


def test_a_gpu_without_gpm_has_no_profiling_fields_and_says_why() -> None:
    recorded = gpm_from_dcgm_session((GPM / "dcgm_prof_h100_slurm_job_exporter30.txt").read_text())
    a100 = FakeGpu(uuid="GPU-a100", name="NVIDIA A100-SXM4-80GB", minor=0)
    fake = GpmFakeNvml([a100], {})  # the driver has GPM; the GPU does not
    source = NvmlSource("a100-node", fake)  # type: ignore[arg-type]
    frame = every_prof_frame(source)
    collect_twice(source, frame)
    assert not any(fn.startswith("nvmlGpmSample") for fn, _ in fake.calls)
    fills = {f.field.name: f for f in field_fills(load_field_catalog(), [source.fields])}
    why = fills["DCGM_FI_PROF_GR_ENGINE_ACTIVE"].why_empty
    assert "GPU 0 (NVIDIA A100-SXM4-80GB)" in why and "no GPM" in why and "DCGM" in why
    assert not fills["DCGM_FI_PROF_DRAM_ACTIVE"].exported
    # a node with an H100 beside it: the fields are filled, for that GPU only
    mixed = GpmFakeNvml([a100, recorded[0][0]], {1: recorded[0][1]})
    both = NvmlSource("mixed", mixed)  # type: ignore[arg-type]
    assert both.fields.only_for("DCGM_FI_PROF_DRAM_ACTIVE").startswith("GPU 1 (NVML GPM")
    frame = every_prof_frame(both)
    collect_twice(both, frame)
    dram = frame.gpu("DCGM_FI_PROF_DRAM_ACTIVE")
    assert math.isnan(dram[0]) and dram[1] == pytest.approx(0.21368455905985453)


def test_a_driver_without_gpm_calls() -> None:
    """nvidia-ml-py finds no nvmlGpmQueryDeviceSupport in the driver (FUNCTION_NOT_FOUND): no GPM, said once."""
    fake = FakeNvml([FakeGpu(uuid="GPU-0", name="NVIDIA H100 80GB HBM3", temperature_c=40.0, util_pct=10.0)])
    source = NvmlSource("old-driver", fake)  # type: ignore[arg-type]
    assert source.gpm.why_not == ["the driver's NVML has no GPM calls (nvmlGpmQueryDeviceSupport not found)"]
    frame = every_prof_frame(source)
    collect_twice(source, frame)
    assert frame.gpu("DCGM_FI_DEV_GPU_TEMP")[0] == 40.0  # the rest of the source reads on
    assert "the driver's NVML has no GPM calls" in source.fields.why_not("DCGM_FI_PROF_SM_ACTIVE")


def test_a_failing_sample_leaves_the_fields_empty_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    recorded = gpm_from_dcgm_session((GPM / "dcgm_prof_h100_slurm_job_exporter30.txt").read_text())
    gpus = [gpu for gpu, _, _ in recorded]
    gpus[1].failing["nvmlGpmSampleGet"] = pynvml.NVML_ERROR_GPU_IS_LOST
    fake = GpmFakeNvml(gpus, {i: rec for i, (_, rec, _) in enumerate(recorded)})
    source = NvmlSource("n", fake)  # type: ignore[arg-type]
    frame = every_prof_frame(source)
    with caplog.at_level(logging.WARNING, logger="gpufleet.nvml"):
        for _ in range(3):
            source.collect(frame)
    tensor = frame.gpu("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")
    assert tensor[0] == pytest.approx(0.2793637431083633) and math.isnan(tensor[1])
    lost = [r.getMessage() for r in caplog.records if "GPM" in r.getMessage()]
    assert lost == ["GPU 1: GPM profiling metrics unavailable: GPU is lost"]


def test_the_static_declaration_says_which_gpus_fill_the_profiling_fields() -> None:
    fills = {f.field.name: f for f in field_fills(load_field_catalog(), named(["nvml"]))}
    for name in ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE"):
        assert "NVML GPM (Hopper and later)" in fills[name].partly
    assert "whole GPUs only" in fills["DCGM_FI_PROF_PCIE_TX_BYTES"].partly
    assert not any(name.startswith("DCGM_FI_PROF_") for name in FIELDS.fills)  # not counted for every NVIDIA node
    assert "needs DCGM" in FIELDS.why_not("DCGM_FI_PROF_NVLINK_L0_TX_BYTES")  # no GPM total for it here


def test_fields_dcgm_fills_are_not_sampled_and_are_declared_dcgms() -> None:
    """Where DCGM's host engine fills a profiling field on a whole GPU, GPM is not sampled for it: the fields DCGM
    fills on both H100s of the recorded session are left to it, the rest still read from GPM."""
    recorded = gpm_from_dcgm_session((GPM / "dcgm_prof_h100_slurm_job_exporter30.txt").read_text())
    fake = GpmFakeNvml([gpu for gpu, _, _ in recorded], {i: rec for i, (_, rec, _) in enumerate(recorded)})
    source = NvmlSource("h100-node", fake)  # type: ignore[arg-type]
    dcgm = frozenset({"DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_PCIE_RX_BYTES"})
    source.gpm.hand_over({0: dcgm, 1: dcgm | {"DCGM_FI_PROF_DRAM_ACTIVE"}}, "dcgm")
    frame = every_prof_frame(source)
    collect_twice(source, frame)
    assert np.isnan(frame.gpu("DCGM_FI_PROF_SM_ACTIVE")).all()  # DCGM's to write
    assert frame.gpu("DCGM_FI_PROF_DRAM_ACTIVE")[0] == pytest.approx(recorded[0][2]["dram_active"])
    assert np.isnan(frame.gpu("DCGM_FI_PROF_DRAM_ACTIVE")[1])
    assert frame.gpu("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")[1] == pytest.approx(recorded[1][2]["tensor_active"])
    fields = source.fields
    assert "DCGM_FI_PROF_SM_ACTIVE" not in fields.fills and not fields.only_for("DCGM_FI_PROF_SM_ACTIVE")
    assert fields.why_not("DCGM_FI_PROF_SM_ACTIVE") == "dcgm fills it here: NVML's GPM is not sampled for it"
    assert fields.only_for("DCGM_FI_PROF_DRAM_ACTIVE") == "GPU 0 (NVML GPM; dcgm fills it on the other GPUs)"
    assert "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE" in fields.fills


def test_a_gpu_whose_fields_dcgm_fills_all_is_not_sampled_at_all() -> None:
    recorded = gpm_from_dcgm_session((GPM / "dcgm_prof_h100_slurm_job_exporter30.txt").read_text())
    fake = GpmFakeNvml([gpu for gpu, _, _ in recorded], {i: rec for i, (_, rec, _) in enumerate(recorded)})
    source = NvmlSource("h100-node", fake)  # type: ignore[arg-type]
    source.gpm.hand_over({0: frozenset(PROF)}, "dcgm")
    collect_twice(source, every_prof_frame(source))
    assert [key for fn, key in fake.calls if fn == "nvmlGpmMetricsGet"] == [1]
