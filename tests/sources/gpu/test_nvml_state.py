"""The GPU's recovery action and NVLink fabric registration, read through nvidia-ml-py's own module with recorded
answers (tests/captures/nvml_state/*.source.txt say where each came from)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gpufleet.sources.gpu.nvml import NvmlSource
from gpufleet.sources.gpu.nvml_state import fabric_info, recovery_action
from gpufleet.telemetry.exposition.dcgm import render
from tests.sources.gpu.fake_nvml import (
    FakeGpu,
    FakeNvml,
    fabric_from_capture,
    memory_temps_from_capture,
    recovery_from_csv,
)

CAPTURES = Path(__file__).parents[2] / "captures" / "nvml_state"


def _gpu(index: int, **kw: object) -> FakeGpu:
    return FakeGpu(f"GPU-{index}", "NVIDIA GB200", minor=index, temperature_c=40.0, **kw)  # type: ignore[arg-type]


def test_recovery_action_of_each_gpu_from_a_recorded_node() -> None:
    actions = recovery_from_csv((CAPTURES / "recovery_action_reset_dcgm263.txt").read_text())
    fake = FakeNvml([_gpu(i, recovery=actions[i]) for i in range(8)])
    assert [recovery_action(fake, i) for i in range(8)] == [0, 1, 0, 0, 0, 0, 0, 0]
    source = NvmlSource("node-a", fake)
    frame = source.new_frame()
    source.collect(frame)
    assert frame.gpu("DCGM_FI_DEV_GPU_RECOVERY_ACTION").tolist() == [0, 1, 0, 0, 0, 0, 0, 0]


def test_a_driver_without_the_recovery_field_leaves_it_empty() -> None:
    source = NvmlSource("node-a", FakeNvml([_gpu(0)]))
    frame = source.new_frame()
    source.collect(frame)
    assert np.isnan(frame.gpu("DCGM_FI_DEV_GPU_RECOVERY_ACTION")[0])


def test_a_gpu_in_its_nvlink_domain() -> None:
    fabric = fabric_from_capture((CAPTURES / "fabric_gb200_unhealthy_dra626.txt").read_text())
    fake = FakeNvml([_gpu(0, fabric=fabric)])
    info = fabric_info(fake, 0)
    assert info is not None and info.joined
    assert (info.clique_id, info.cluster_uuid) == (2, "dc6e40c4-d722-4357-9ba6-5291dd461278")
    source = NvmlSource("node-a", fake)
    frame = source.new_frame()
    source.collect(frame)
    assert frame.gpu("DCGM_FI_DEV_FABRIC_MANAGER_STATUS")[0] == 3  # DcgmFMStatusSuccess
    assert frame.gpu("DCGM_FI_DEV_FABRIC_CLIQUE_ID")[0] == 2


def test_a_failed_registration_is_dcgm_failure_with_no_clique() -> None:
    fabric = fabric_from_capture((CAPTURES / "fabric_insufficient_resources_azhpc506.txt").read_text())
    for v2 in (True, False):  # nvmlDeviceGetGpuFabricInfoV, or the older call where the driver lacks it
        fabric.v2 = v2
        fake = FakeNvml([_gpu(0, fabric=fabric)])
        info = fabric_info(fake, 0)
        assert info is not None and not info.joined and info.cluster_uuid == ""
        source = NvmlSource("node-a", fake)
        frame = source.new_frame()
        source.collect(frame)
        assert frame.gpu("DCGM_FI_DEV_FABRIC_MANAGER_STATUS")[0] == 4  # DcgmFMStatusFailure
        assert np.isnan(frame.gpu("DCGM_FI_DEV_FABRIC_CLIQUE_ID")[0])


def test_a_gpu_without_fabric_reads_nothing() -> None:
    assert fabric_info(FakeNvml([_gpu(0)]), 0) is None


def test_memory_temperature_of_each_gpu_from_a_recorded_node() -> None:
    temps = memory_temps_from_capture((CAPTURES / "memory_temp_a100_m4logs.txt").read_text())
    assert temps == [45, 43]
    source = NvmlSource("node-a", FakeNvml([_gpu(i, memory_temp_c=t) for i, t in enumerate(temps)]))
    frame = source.new_frame()
    source.collect(frame)
    assert frame.gpu("DCGM_FI_DEV_MEMORY_TEMP").tolist() == [45.0, 43.0]
    assert 'DCGM_FI_DEV_MEMORY_TEMP{gpu="1",' in render(frame)


def test_a_gpu_without_a_memory_sensor_has_no_memory_temperature_series() -> None:
    # dcgm-exporter prints DCGM's blank for it (tests/corpus/dcgm_exporter_metrics_06_readme_k8s.txt); NVML answers
    # NOT_SUPPORTED for the field, and the series is left out
    source = NvmlSource("node-a", FakeNvml([_gpu(0)]))
    frame = source.new_frame()
    source.collect(frame)
    assert np.isnan(frame.gpu("DCGM_FI_DEV_MEMORY_TEMP")[0])
    assert "DCGM_FI_DEV_MEMORY_TEMP{" not in render(frame)
