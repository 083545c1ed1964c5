"""The node-local detectors as an agent runs them, on hand-built frames and kernel events: no twin."""

from __future__ import annotations

import numpy as np

from gpufleet.health.node_health import NodeHealth
from gpufleet.model import EntityKind, RootCause, Severity
from gpufleet.model.kernel import KernelEvent
from gpufleet.model.observe import GpuInfo, NodeInventory
from gpufleet.telemetry.frame import GpuEntity, IbPort, MetricFrame

T0 = 1_800_000_000.0


def frame() -> MetricFrame:
    gpus = [
        GpuEntity(i, f"GPU-{i}", "NVIDIA H100 80GB HBM3", "node-a", f"00000000:{0x3B + i:02X}:00.0") for i in range(2)
    ]
    ports = [IbPort("mlx5_0", 1, "0", "node-a"), IbPort("mlx5_1", 1, "1", "node-a")]
    return MetricFrame(tuple(gpus), tuple(ports))


def fill(f: MetricFrame, t: float, up: tuple[float, float] = (1.0, 1.0), dbe: float = 0.0) -> None:
    f.clear_values()
    f.timestamp = t
    for name, value in (
        ("DCGM_FI_DEV_GPU_UTIL", 90.0), ("DCGM_FI_DEV_GPU_TEMP", 60.0), ("DCGM_FI_DEV_SM_CLOCK", 1980.0),
        ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", 0.0), ("DCGM_FI_DEV_PCIE_LINK_GEN", 5.0),
        ("DCGM_FI_DEV_PCIE_MAX_LINK_GEN", 5.0), ("DCGM_FI_DEV_PCIE_LINK_WIDTH", 16.0),
        ("DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH", 16.0), ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 0.0),
    ):  # fmt: skip
        f.gpu(name)[:] = value
    f.gpu("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")[1] = dbe
    f.ib_up[:] = up


def test_a_port_going_down_is_a_link_event_and_a_finding_and_a_lasting_one_is_confirmed_every_30_s() -> None:
    f = frame()
    health = NodeHealth(f)
    fill(f, T0)
    assert health.observe(T0, f).findings == []
    seen = []
    for k in range(1, 70):
        fill(f, T0 + k, up=(1.0, 0.0) if k < 60 else (1.0, 1.0))
        seen.append((k, health.observe(T0 + k, f)))
    links = [(k, ev.up, ev.hca) for k, out in seen for ev in out.links]
    assert links == [(1, False, "mlx5_1"), (60, True, "mlx5_1")]
    downs = [(k, fi.cause) for k, out in seen for fi in out.findings]
    assert downs == [(1, RootCause.ib_link_down), (31, RootCause.ib_link_down)]  # started, then confirmed
    first = seen[0][1].findings[0]
    assert (first.entity.kind, first.entity.node, first.entity.index, first.entity.name) == (
        EntityKind.port, "node-a", 1, "mlx5_1",
    )  # fmt: skip


def test_a_new_double_bit_error_is_reported_once() -> None:
    f = frame()
    health = NodeHealth(f)
    fill(f, T0)
    health.observe(T0, f)
    fill(f, T0 + 1, dbe=1.0)
    (finding,) = health.observe(T0 + 1, f).findings
    assert finding.cause is RootCause.ecc_dbe and finding.entity.index == 1 and finding.severity is Severity.critical
    fill(f, T0 + 2, dbe=1.0)
    assert health.observe(T0 + 2, f).findings == []


def test_kernel_events_become_reports_and_findings_tied_to_the_gpu_by_pci_address() -> None:
    f = frame()
    health = NodeHealth(f)
    fill(f, T0)
    lost = KernelEvent(
        "xid", 1, "NVRM: Xid (PCI:0000:3c:00): 79, pid=1, name=python, GPU has fallen off the bus.",
        "GPU has fallen off the bus.", xid=79, pci="0000:3c:00",
    )  # fmt: skip
    unknown_gpu = KernelEvent("reset_required", 2, "NVRM: ... NV_ERR_RESET_REQUIRED", "reset", pci="0000:99:00")
    out = health.observe(T0, f, {"node-a": [lost, unknown_gpu]})
    assert [(r.kind, r.gpu, r.xid) for r in out.kernel] == [("xid", 1, 79), ("reset_required", None, None)]
    causes = [(fi.cause, str(fi.entity)) for fi in out.findings]
    assert causes == [(RootCause.gpu_lost, "gpu/node-a/1"), (RootCause.gpu_xid, "gpu/node-a/0000:99:00")]
    # the same report again is a new report: kernel lines are never held back
    assert len(health.observe(T0 + 1, f, {"node-a": [lost]}).findings) == 1


def test_node_software_checks_run_on_the_inventory() -> None:
    f = frame()
    health = NodeHealth(f)
    fill(f, T0)
    old = NodeInventory(hostname="node-a", driver="535.104.05", cuda="12.4", gpus=[GpuInfo(0, "GPU-0", "H100")])
    (finding,) = health.observe(T0, f, inventories=[old]).findings
    assert finding.cause is RootCause.driver_mismatch and "CUDA 12.4 needs driver >= 550.54.14" in finding.evidence
    good = NodeInventory(hostname="node-a", driver="550.90.07", cuda="12.4", fabric_manager="550.90.07")
    assert health.observe(T0 + 60, f, inventories=[good]).findings == []


def test_the_same_answer_for_one_node_or_many() -> None:
    """The twin's agents run one frame for many nodes; the hot-idle check compares a GPU with its own node's."""
    gpus = [GpuEntity(i % 4, f"GPU-{i}", "H100", f"n{i // 4}") for i in range(8)]
    both = MetricFrame(tuple(gpus))
    single = MetricFrame(tuple(gpus[4:]))
    health_both, health_single = NodeHealth(both), NodeHealth(single)
    temps = np.array([40, 41, 40, 40, 40, 41, 40, 62], dtype=float)  # n1's GPU 3 hot while idle
    hold = health_both.thresholds.thermal.idle_hold_s
    for f, h, t in ((both, health_both, temps), (single, health_single, temps[4:])):
        found = []
        for k in range(int(hold) + 2):
            f.clear_values()
            f.gpu("DCGM_FI_DEV_GPU_UTIL")[:] = 0.0
            f.gpu("DCGM_FI_DEV_GPU_TEMP")[:] = t
            found += [str(fi.entity) for fi in h.observe(T0 + k, f).findings if fi.cause is RootCause.thermal]
        assert found == ["gpu/n1/3"]
