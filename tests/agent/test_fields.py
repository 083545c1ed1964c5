"""What an agent's sources say they fill is what they fill, and only what they fill is exported: an NVIDIA node's
agent (NVML through nvidia-ml-py with the driver replaced by data, the kernel log, the idle cost) serves no DCGM
profiling series, every family it serves is one its sources declare, and `gpufleet deploy size` counts no more; the
twin's agent likewise."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from gpufleet.agent.collector import Collector
from gpufleet.agent.fields import ATTRIBUTION, IDLE_COST, KMSG, NVIDIA_AGENT, named
from gpufleet.agent.host import host_agent
from gpufleet.catalog.gpu_prices import load_gpu_prices
from gpufleet.sim.source import FIELDS as TWIN_FIELDS
from gpufleet.sim.source import TwinSource
from gpufleet.sources.gpu import nvml
from gpufleet.telemetry.field_sources import POD_INFO, exported, field_fills
from gpufleet.telemetry.fields import IDLE_COST_FIELD, load_field_catalog
from gpufleet.telemetry.monitoring.sizing import series_counts
from gpufleet.telemetry.vendor_metrics import load_vendor_metrics
from tests.sources.gpu.fake_nvml import FakeGpu, FakeNvml
from tests.twins import small_twin

H100 = "NVIDIA H100 80GB HBM3"


def _families(body: str) -> tuple[set[str], Counter[str]]:
    """The families a /metrics body shows, and how many series each GPU (by UUID) has."""
    lines = [ln for ln in body.splitlines() if ln and not ln.startswith("#")]
    families = {ln.split("{", 1)[0].removesuffix("_bucket").removesuffix("_sum").removesuffix("_count") for ln in lines}
    per_gpu = Counter(ln.split('UUID="', 1)[1].split('"', 1)[0] for ln in lines if 'UUID="' in ln)
    return families, per_gpu


@pytest.fixture
def nvidia_node(monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    """Two H100s NVML describes in full (readings, PCIe, NVLink, remapped rows), one busy and one idle."""
    gpus = [
        FakeGpu(uuid=f"GPU-{i}", name=H100, bus=f"00000000:{0x18 + i:02X}:00.0", minor=i, used_mib=1000.0,
                total_mib=81_559.0, temperature_c=40.0, util_pct=util, power_w=300.0)
        for i, util in enumerate((80.0, 0.0))
    ]  # fmt: skip
    fake = FakeNvml(gpus)
    monkeypatch.setattr("gpufleet.sources.gpu.nvml.load_pynvml", lambda: fake)
    return fake


def test_nvml_fills_what_it_declares(nvidia_node: FakeNvml) -> None:
    source = nvml.NvmlSource("n", nvidia_node)  # type: ignore[arg-type]
    frame = source.new_frame()
    source.collect(frame)
    filled = {f.name for k, f in enumerate(frame.gpu_fields) if not np.isnan(frame.values[k]).all()}
    declared = {f.name for f in frame.gpu_fields} & nvml.FIELDS.fills
    assert filled == declared
    assert not any(name.startswith("DCGM_FI_PROF_") for name in nvml.FIELDS.fills)
    assert list(frame.gpu("DCGM_FI_DEV_PCIE_LINK_WIDTH")) == [16, 16]  # DCGM's own NVML call for the field
    assert list(frame.gpu("DCGM_FI_DEV_SLOWDOWN_TEMP")) == [87, 87]


def test_an_nvidia_agent_exports_only_what_its_sources_fill(nvidia_node: FakeNvml, tmp_path: Path) -> None:
    kmsg = tmp_path / "kern.log"
    kmsg.write_text("")
    agent = host_agent(
        host="127.0.0.1", port=0, interval=1.0, data_dir=tmp_path, control_plane=None, token=lambda: None,
        node="n", kmsg_file=kmsg, ib_sysfs=tmp_path / "no-ib", attribution=None,
    )  # fmt: skip
    agent.collector.collect_once()
    families, per_gpu = _families(agent.collector.body.decode())
    assert not any(f.startswith("DCGM_FI_PROF_") for f in families)  # advertised by dcgm-exporter, not filled here
    sources = named(["nvml", "kmsg", "idle-cost"])
    assert families <= exported(load_field_catalog().enabled(), sources)
    assert {"DCGM_FI_DEV_PCIE_LINK_GEN", "DCGM_FI_DEV_ENC_UTIL", IDLE_COST_FIELD} <= families
    gpu, _, _ = series_counts(sources=named(list(NVIDIA_AGENT)))
    assert len(per_gpu) == 2 and max(per_gpu.values()) <= gpu


def test_the_idle_cost_series_is_priced_as_the_report_prices_the_model(nvidia_node: FakeNvml, tmp_path: Path) -> None:
    agent = host_agent(
        host="127.0.0.1", port=0, interval=1.0, data_dir=tmp_path, control_plane=None, token=lambda: None,
        node="n", kmsg_file=None, ib_sysfs=tmp_path / "no-ib", attribution=None,
    )  # fmt: skip
    agent.collector.collect_once()
    aws_h100 = next(p.usd_per_gpu_hour for p in load_gpu_prices() if p.model == "h100-sxm" and p.provider == "aws")
    cost = agent.collector.frame.gpu(IDLE_COST_FIELD)
    assert list(cost) == pytest.approx([aws_h100 * 0.2, aws_h100])  # 80 % busy, and idle


def test_a_model_without_a_price_has_no_idle_cost_series(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = FakeNvml([FakeGpu(uuid="GPU-0", name="NVIDIA Unknown GPU", temperature_c=40.0, util_pct=0.0)])
    monkeypatch.setattr("gpufleet.sources.gpu.nvml.load_pynvml", lambda: fake)
    agent = host_agent(
        host="127.0.0.1", port=0, interval=1.0, data_dir=tmp_path, control_plane=None, token=lambda: None,
        node="n", kmsg_file=None, ib_sysfs=tmp_path / "no-ib", attribution=None,
    )  # fmt: skip
    agent.collector.collect_once()
    assert IDLE_COST_FIELD not in agent.collector.body.decode()  # no price: no series, rather than $0


def test_the_twin_fills_what_it_declares() -> None:
    """An NVIDIA twin node: the GPU fields with values are the twin's declared ones, its MIG-only, AMD-only and
    Gaudi-only fields aside; its /metrics shows only exported families (and its jobs' own series)."""
    twin = small_twin()
    twin.run(30)
    source = TwinSource(twin, node="n-000")
    collector = Collector(source.new_frame(), [source])
    collector.collect_once()
    frame = collector.frame
    filled = {f.name for k, f in enumerate(frame.gpu_fields) if not np.isnan(frame.values[k]).all()}
    partly = {name for name, _ in TWIN_FIELDS.partly}
    assert filled == ({f.name for f in frame.gpu_fields} & TWIN_FIELDS.fills) - partly
    families, _ = _families(collector.body.decode())
    sources = [TWIN_FIELDS, ATTRIBUTION]
    shown = exported(load_field_catalog().enabled(), sources)
    assert {f for f in families if not f.startswith(("training_", "gpufleet_inference_"))} <= shown | {POD_INFO}
    assert not any(f.startswith("DCGM_FI_PROF_") for f in families)


def test_why_a_field_is_empty_names_what_would_fill_it() -> None:
    catalog = load_field_catalog()
    known = [*named(["nvml", "amdsmi", "hlml", "kmsg", "ib-sysfs", "attribution", "idle-cost", "app"]), TWIN_FIELDS]
    fills = {f.field.name: f for f in field_fills(catalog, named(list(NVIDIA_AGENT)), known)}
    # NVML's GPM fills DCGM's profiling fields on Hopper and later GPUs only: partly, not counted for every node
    for name in ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_PCIE_TX_BYTES"):
        assert not fills[name].exported and "NVML GPM (Hopper and later)" in fills[name].partly
    assert fills["DCGM_EXP_XID_ERRORS_COUNT"].sources == ("kmsg",)
    assert fills[IDLE_COST_FIELD].sources == ("idle-cost",)
    assert "app" in fills["training_step_duration_seconds"].why_empty
    assert fills["gpufleet_source_up"].sources == tuple(NVIDIA_AGENT)
    assert fills["gpufleet_accelerator_pod_info"].sources == ("attribution",)
    sm_active = fills["DCGM_FI_PROF_SM_ACTIVE"]  # off in dcgm-exporter's default counters
    assert not sm_active.field.enabled and "switched off" in sm_active.why_empty
    nvml_only = {f.field.name: f for f in field_fills(catalog, named(["nvml"]))}
    assert "kmsg" in nvml_only["DCGM_EXP_XID_ERRORS_COUNT"].why_empty


def test_sizing_counts_what_the_sources_fill() -> None:
    everything = series_counts()
    agent = series_counts(sources=named(list(NVIDIA_AGENT)))
    twin = series_counts(sources=[TWIN_FIELDS, ATTRIBUTION])
    assert agent[0] < everything[0] and twin[0] < everything[0]
    # the 17 port counters and the port's state and rate; the twin simulates 12 of the counters
    assert agent[1] == 19 and twin[1] == 14
    assert series_counts(sources=[*named(["nvml"]), KMSG, IDLE_COST])[2] == 3  # a source-up series each


def test_every_vendor_series_is_filled_by_its_real_source_or_says_why_not() -> None:
    """An AMD or Gaudi node's agent serves its exporter's series from the fields its GPU library fills. Each series of
    the vendor's exporter is either filled by that library's source on a real node, or the source says why it stays
    empty (AMD's gpu_health and gpu_afid_errors: the AMD Device Metrics Exporter's own verdicts, which amdsmi does not
    give); only the twin fills gpu_health, for its AMD devices."""
    sources = named(["amdsmi", "hlml"])
    by_name = {s.source: s for s in sources}
    vendors = load_vendor_metrics().vendors
    left: dict[str, set[str]] = {}
    for vendor, source in (("amd", "amdsmi"), ("intel", "hlml")):
        spec, fills = vendors[vendor], by_name[source]
        fields = {f for m in spec.metrics for f in m.sources}
        if spec.nic_ports is not None:
            fields |= {spec.nic_ports.present, spec.nic_ports.external, spec.nic_ports.up}
        left[source] = fields - fills.fills
        assert all(fills.why_not(f) for f in left[source]), (source, left[source])
    assert left == {
        "amdsmi": {
            "gpufleet_gpu_health",
            "gpufleet_gpu_afid_fatal",
            "gpufleet_gpu_afid_non_fatal_uncorrected",
            "gpufleet_gpu_afid_non_fatal_corrected",
        },
        "hlml": set(),
    }
    amd = {f.field.name: f for f in field_fills(load_field_catalog(), [by_name["amdsmi"]])}
    assert not amd["gpufleet_gpu_health"].exported and "Device Metrics Exporter" in amd["gpufleet_gpu_health"].why_empty
    assert "CPER" in amd["gpufleet_gpu_afid_fatal"].why_empty
    assert TWIN_FIELDS.only_for("gpufleet_gpu_health") and "gpufleet_gpu_afid_fatal" not in TWIN_FIELDS.fills


def test_this_node_names_dcgm_as_the_source_of_the_profiling_fields(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A node running nv-hostengine (DCGM's bindings' double on their install path, the recorded H100 session):
    `gpufleet telemetry fields` takes DCGM's own declaration, and DCGM fills the profiling fields, not NVML."""
    from gpufleet.agent.fields import this_node
    from tests.agent.test_host import install_dcgm

    install_dcgm(monkeypatch, tmp_path, "prof_h100_dcgm33")
    sources, missing = this_node(ib_sysfs=tmp_path / "no-ib", kmsg=tmp_path / "no-kmsg")
    assert not any(m.startswith("dcgm:") for m in missing)
    fills = {f.field.name: f for f in field_fills(load_field_catalog(), sources)}
    # the recorded GPUs' metric groups hold fields 1001-1012 (GR_ENGINE_ACTIVE .. NVLINK_RX_BYTES)
    for name in ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_PCIE_RX_BYTES"):
        assert fills[name].sources == ("dcgm",) and fills[name].exported
    assert fills["DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE"].sources == ()  # not in them
    assert "dcgm" in fills["gpufleet_source_up"].sources


def test_this_node_without_dcgm_says_why(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from gpufleet.agent.fields import this_node
    from tests.agent.test_host import install_dcgm

    install_dcgm(monkeypatch, tmp_path, "prof_h100_dcgm33", reachable=False)
    sources, missing = this_node(ib_sysfs=tmp_path / "no-ib", kmsg=tmp_path / "no-kmsg")
    assert "dcgm" not in [s.source for s in sources]
    (line,) = [m for m in missing if m.startswith("dcgm:")]
    assert "nv-hostengine at 127.0.0.1:5555 did not answer" in line
