"""The host agent's DCGM source: found through DCGM's bindings on their install path (here the double of the
bindings, tests/sources/gpu/fake_dcgm.py, answering from the recorded captures), added after the attribution so its
job statistics follow the Slurm job map, stopped with the agent; asked for and not there, `source_up` 0 with the
reason, and `auto` silent."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import pytest

from gpufleet.agent.host import AttributionOptions, host_agent
from gpufleet.sources.gpu import dcgm
from gpufleet.sources.gpu.dcgm import DcgmSource, DcgmTarget
from gpufleet.telemetry.frame import label_items
from tests.sources.gpu.fake_dcgm import bindings, load
from tests.sources.gpu.fake_nvml import FakeGpu, FakeNvml


def install_dcgm(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capture: str, reachable: bool = True) -> Any:
    """DCGM's bindings installed in a directory of their own, as DCGM installs them, that directory being the one
    the source looks in; the modules answer from `capture`. The host engine behind them is returned."""
    node = load(capture)
    b, engine = bindings(node, reachable=reachable)
    where = tmp_path / "bindings" / "python3"
    where.mkdir(parents=True)
    for module in ("dcgm_agent", "dcgm_structs", "dcgm_fields", "dcgm_errors"):
        (where / f"{module}.py").write_text("")
    monkeypatch.setattr(sys, "path", list(sys.path))
    for name, module in (("dcgm_agent", b.agent), ("dcgm_structs", b.structs), ("dcgm_fields", b.fields),
                         ("dcgm_errors", b.errors)):  # fmt: skip
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(dcgm, "BINDING_PATHS", (tmp_path / "nowhere", where))
    gpus = [FakeGpu(uuid=g["uuid"], name=g.get("name", "NVIDIA H100 80GB HBM3"), bus=f"00000000:{0x18 + k:02X}:00.0",
                    minor=k, temperature_c=40.0, util_pct=50.0, power_w=300.0)
            for k, g in enumerate(node["gpus"])]  # fmt: skip
    fake = FakeNvml(gpus)
    monkeypatch.setattr("gpufleet.sources.gpu.nvml.load_pynvml", lambda: fake)
    return engine


def agent(tmp_path: Path, **kw: Any) -> Any:
    return host_agent(
        host="127.0.0.1", port=0, interval=1.0, data_dir=tmp_path, control_plane=None, token=lambda: None,
        node="n", kmsg_file=None, ib_sysfs=tmp_path / "no-ib", bmc=None, **kw,
    )  # fmt: skip


def source_up(built: Any) -> dict[str, float]:
    return {dict(labels)["source"]: v for (name, labels), v in built.collector.frame.gauges.items()
            if name == "gpufleet_source_up"}  # fmt: skip


def test_auto_reads_the_local_host_engine_after_the_gpu_library(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    engine = install_dcgm(monkeypatch, tmp_path, "prof_h100_dcgm33")
    built = agent(tmp_path, attribution=None)
    names = [getattr(s, "name", "") for s in built.collector.sources]
    assert names.index("dcgm") > names.index("nvml")
    assert ("dcgmConnect", ("127.0.0.1:5555",)) in engine.calls
    built.collector.collect_once()
    frame = built.collector.frame
    assert frame.gpu("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE").tolist() == [0.2793637431083633, 0.2830590854513563]
    assert frame.gpu("DCGM_FI_PROF_PCIE_RX_BYTES").tolist() == [873509672.0, 304185631.0]
    assert source_up(built)["dcgm"] == 1.0
    built.stop()
    assert [c for c, _ in engine.calls][-2:] == ["dcgmDisconnect", "dcgmShutdown"]


def test_job_statistics_follow_the_job_map_the_attribution_read(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    engine = install_dcgm(monkeypatch, tmp_path, "job_stats_dcgm4")
    jobs = tmp_path / "job-map"
    jobs.mkdir()
    (jobs / "0").write_text("4242\n")
    built = agent(tmp_path, job_map_dir=jobs, attribution=AttributionOptions(pod_resources=None, pod_list=None),
                  dcgm=DcgmTarget(""))  # fmt: skip
    names = [getattr(s, "name", type(s).__name__) for s in built.collector.sources]
    assert names.index("dcgm") > names.index("attribution")
    built.collector.collect_once()
    labels = {"gpu": "0", "UUID": "GPU-00000000-0000-0000-0000-000000000000", "hpc_job": "4242"}
    assert built.collector.frame.gauges[("gpufleet_dcgm_job_energy_joules", label_items(labels))] == 10747.0
    assert engine.jobs_started == {"4242": 101}
    built.stop()
    assert ("dcgmStopEmbedded", ()) in engine.calls


def test_an_explicit_target_that_does_not_answer_is_source_up_zero(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    install_dcgm(monkeypatch, tmp_path, "health_healthy_dcgm4", reachable=False)
    with caplog.at_level(logging.ERROR, logger="gpufleet.agent"):
        built = agent(tmp_path, attribution=None, dcgm=DcgmTarget("10.0.0.5:5555"))
    assert not any(isinstance(s, DcgmSource) for s in built.collector.sources)
    assert source_up(built)["dcgm"] == 0.0
    (line,) = [r.getMessage() for r in caplog.records if "source dcgm is down" in r.getMessage()]
    assert "nv-hostengine at 10.0.0.5:5555 did not answer" in line


def test_auto_without_a_host_engine_or_its_bindings_says_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    install_dcgm(monkeypatch, tmp_path, "health_healthy_dcgm4", reachable=False)
    built = agent(tmp_path, attribution=None)
    assert "dcgm" not in source_up(built)
    monkeypatch.setattr(dcgm, "BINDING_PATHS", (tmp_path / "nowhere",))
    assert "dcgm" not in source_up(agent(tmp_path, attribution=None))
    assert "dcgm" not in source_up(agent(tmp_path, attribution=None, dcgm=None))


def test_dcgm_asked_for_on_a_node_without_nvidia_gpus_says_why(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from tests.agent.test_host_vendors import _missing, _no_nvml

    monkeypatch.setattr("gpufleet.sources.gpu.nvml.load_pynvml", _no_nvml)
    monkeypatch.setattr("gpufleet.sources.gpu.amdsmi.load_amdsmi", _missing("libamd_smi.so"))
    monkeypatch.setattr("gpufleet.sources.gpu.hlml.load_pyhlml", _missing("libhlml.so"))
    assert source_up(agent(tmp_path, attribution=None, dcgm=DcgmTarget("")))["dcgm"] == 0.0
    assert "dcgm" not in source_up(agent(tmp_path, attribution=None))


def test_the_inventory_carries_the_affinity_of_the_sysfs_it_reads(tmp_path: Path) -> None:
    """The GPUs NVML names, by their PCI addresses, in the sysfs tree of a real machine's PCIe hierarchy
    (tests/sources/node/test_pci_affinity.py); an InfiniBand directory outside a sysfs tree reads no affinity."""
    from gpufleet.agent.host import gpu_inventory_for
    from tests.sources.node.test_pci_affinity import CX5, V100_A, device, rdma

    sys_root = tmp_path / "sys"
    rdma(sys_root, "mlx5_0", device(sys_root, CX5, numa=0, cpus="0-19", vendor="0x15b3", cls="0x020700"), "ib0")
    device(sys_root, V100_A, numa=0, cpus="0-19", vendor="0x10de", cls="0x030200")
    fake = FakeNvml([FakeGpu(uuid="GPU-a", name="Tesla V100-PCIE-32GB", bus="00000000:5C:00.0", minor=0)])
    from gpufleet.sources.gpu.nvml import NvmlSource

    inventory = gpu_inventory_for("n", NvmlSource("n", fake), sys_root / "class/infiniband", None)
    assert inventory.affinity is not None
    assert [(g.index, g.pci_bus_id, g.nic_links) for g in inventory.affinity.gpus] == [
        (0, "0000:5c:00.0", {"mlx5_0": "PIX"})
    ]
    assert gpu_inventory_for("n", None, tmp_path / "no-ib", None).affinity is None
