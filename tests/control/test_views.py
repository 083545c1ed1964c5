"""What the views name: a stalled job's cause is the incident whose effect is that job, not an earlier one that only
mentions it."""

from __future__ import annotations

from gpufleet.control import views
from gpufleet.control.fabric import summary as fabric_summary
from gpufleet.model.observe import JobFact, RankFact, ServiceFact
from gpufleet.sim.faults import InjectedFault
from gpufleet.sim.runner import run_headless
from gpufleet.spec.scenario_spec import FaultType
from gpufleet.state import Database
from tests.control.helpers import T0, Clock, batch, plane_at
from tests.twins import door, small_twin


def test_a_stalled_jobs_cause_is_the_incident_that_hung_it() -> None:
    twin = small_twin(
        faults=[
            InjectedFault(0, FaultType.thermal_runaway, 60.0, node="n-000", gpu=2),
            InjectedFault(1, FaultType.gpu_off_bus, 420.0, node="n-001", gpu=5),
        ]
    )
    plane, fleet = door(twin)
    run_headless(twin, fleet, plane.ingest, plane.tick, 900)
    (job,) = views.job_rows(plane)  # type: ignore[arg-type]
    assert job["state"] == "Stalled"
    assert "gpu-lost on gpu/n-001/5" in job["cause"]


def test_services_join_their_replicas_and_judge_against_the_objective(state_db: Database) -> None:
    clock = Clock()
    plane = plane_at(state_db, clock)
    fast = ServiceFact("chat", [0], requests=900, requests_per_s=15.0, p50_s=0.08, p99_s=0.3, slo_p99_s=0.5)
    slow = ServiceFact("chat", [1, 2], requests=100, errors=2, requests_per_s=5.0, p50_s=0.2, p99_s=0.9)
    quiet = ServiceFact("embed", [3], requests=4, requests_per_s=0.1)
    plane.ingest(batch("n-0", [], services=[fast]))
    plane.ingest(batch("n-1", [], services=[slow, quiet]))
    chat, embed = views.service_rows(plane)  # type: ignore[arg-type]
    assert chat["replicas"] == 2 and chat["gpus"] == ["n-0/0", "n-1/1", "n-1/2"]
    assert chat["requests_per_s"] == 20.0 and chat["error_ratio"] == 0.002
    assert chat["p99_s"] == 0.9 and chat["slo_p99_s"] == 0.5  # the worst replica, against the objective
    assert chat["state"] == "SLO breached"
    assert embed["state"] == "Too little traffic" and embed["p99_s"] is None


def test_a_jobs_stragglers_are_the_ranks_clearly_slower_than_its_median(state_db: Database) -> None:
    plane = plane_at(state_db, Clock())
    ranks = [RankFact(r, r, 1.0) for r in range(7)] + [RankFact(7, 7, 1.6)]
    fact = JobFact("train", ranks, world_size=8, last_step_time=T0, step_seconds=1.1, step=10)
    plane.ingest(batch("n-0", [], jobs=[fact]))
    (row,) = views.job_rows(plane)  # type: ignore[arg-type]
    assert row["rank_compute_median_s"] == 1.0
    assert row["stragglers"] == [{"rank": 7, "node": "n-0", "gpu": 7, "compute_s": 1.6, "ratio": 1.6}]


def test_the_summary_says_when_its_clock_is_the_twins(state_db: Database) -> None:
    plane = plane_at(state_db, Clock())
    assert views.summary(plane, with_history=False)["simulated_time"] is False  # type: ignore[arg-type]
    twin_plane, _ = door(small_twin(nodes=1, job_nodes=0))
    assert views.summary(twin_plane, with_history=False)["simulated_time"] is True  # type: ignore[arg-type]


def test_a_lost_gpu_has_no_current_values_and_its_last_xid() -> None:
    """GPU 5 of n-001 falls off the bus (Xid 79): its row says its readings are lost, has no values (not its last
    ones), and names Xid 79 although the metric no longer carries it; its neighbours read as current."""
    twin = small_twin(faults=[InjectedFault(0, FaultType.gpu_off_bus, 300.0, node="n-001", gpu=5)])
    plane, fleet = door(twin)
    run_headless(twin, fleet, plane.ingest, plane.tick, 600)
    rows = {r["gpu"]: r for r in views.gpu_rows(plane, "n-001")}  # type: ignore[arg-type]
    lost = rows[5]
    assert (lost["health"], lost["readings"]) == ("lost", "lost")
    assert [lost[k] for k in ("temp_c", "power_w", "util_pct", "sm_clock_mhz")] == [None] * 4
    assert lost["xid_last"] == 79
    assert rows[4]["readings"] == "current" and rows[4]["temp_c"] is not None and not rows[4]["xid_last"]
    detail = views.describe_node(plane, "n-001")  # type: ignore[arg-type]
    assert next(g for g in detail["gpus"] if g["gpu"] == 5)["xid_last"] == 79


def test_a_gpu_known_only_by_its_pci_address_is_named_by_it(state_db: Database) -> None:
    """Xids for two GPUs NVML does not list (the kernel log names them by PCI address): two incidents, each named
    gpu/NODE/PCI in the API (never gpu/NODE/null), and the API's row reads back as an incident file."""
    from gpufleet.model import RootCause, Severity
    from gpufleet.model.observation import Entity, EntityKind
    from gpufleet.model.observe import Finding, Record
    from gpufleet.remediate import incident_from_dict

    plane = plane_at(state_db, Clock())

    def xid79(pci: str) -> Finding:
        line = f"NVRM: Xid (PCI:{pci}): 79, GPU has fallen off the bus."
        gpu = Entity(EntityKind.gpu, "n-0", name=pci)
        return Finding(T0, RootCause.gpu_lost, gpu, Severity.critical, f"Xid 79 on {pci}", line, "kmsg", xid=79)

    records = [Record(seq, xid79(pci)) for seq, pci in ((1, "0000:3b:00.0"), (2, "0000:c1:00.0"))]
    plane.ingest(batch("n-0", records))
    rows = sorted(plane.incidents(), key=lambda r: r["entity"]["text"])
    assert [r["entity"]["text"] for r in rows] == ["gpu/n-0/0000:3b:00.0", "gpu/n-0/0000:c1:00.0"]
    assert all(r["entity"]["index"] is None and r["summary"] for r in rows)
    assert incident_from_dict(rows[0]).entity == Entity(EntityKind.gpu, "n-0", name="0000:3b:00.0")
    summary = views.summary(plane, with_history=False)  # type: ignore[arg-type]
    assert {i["entity"]["text"] for i in summary["incidents"]} == {r["entity"]["text"] for r in rows}


def test_a_node_whose_gpu_source_is_down_is_degraded_with_why(state_db: Database) -> None:
    """n-0's agent cannot load NVML (gpufleet_source_up{source="nvml"} 0): the node is Degraded, its GpuSourceDown
    condition says why, its GPUs are unknown (not lost, not healthy) and the summary names it. n-1's BMC is down
    only: it is Ready, the source listed."""
    import numpy as np

    from gpufleet.model.observe import MetricSnapshot
    from tests.control.helpers import inventory

    plane = plane_at(state_db, Clock())
    why = "NVML Shared Library Not Found: libnvidia-ml.so.1"
    blind = MetricSnapshot.of(T0, [0, 1], ["DCGM_FI_DEV_GPU_UTIL"], np.full((1, 2), np.nan), sources_down={"nvml": why})
    plane.ingest(batch("n-0", [], inventory=inventory("n-0"), metrics=blind))
    seen = MetricSnapshot.of(T0, [0], ["DCGM_FI_DEV_GPU_UTIL"], np.array([[40.0]]), sources_down={"bmc": "no ipmitool"})
    plane.ingest(batch("n-1", [], inventory=inventory("n-1"), metrics=seen))
    node = views.describe_node(plane, "n-0")  # type: ignore[arg-type]
    assert node["status"] == "Degraded" and node["sources_down"] == {"nvml": why}
    (cond,) = [c for c in node["conditions"] if c["type"] == "GpuSourceDown"]
    assert cond["status"] == "True" and cond["reason"] == f"nvml: {why}"
    assert {g["health"] for g in node["gpus"]} == {"unknown"} and {g["readings"] for g in node["gpus"]} == {"none"}
    other = views.describe_node(plane, "n-1")  # type: ignore[arg-type]
    assert other["status"] == "Ready" and other["sources_down"] == {"bmc": "no ipmitool"}
    assert [c["status"] for c in other["conditions"] if c["type"] == "GpuSourceDown"] == ["False"]
    summary = views.summary(plane, with_history=False)  # type: ignore[arg-type]
    assert summary["nodes_degraded"] == [{"node": "n-0", "sources_down": {"nvml": why}}]
    assert {r["name"]: r["status"] for r in views.node_rows(plane)} == {"n-0": "Degraded", "n-1": "Ready"}  # type: ignore[arg-type]


def test_without_a_fabric_watcher_the_fabric_is_counted_from_the_agents_ports(state_db: Database) -> None:
    """No watcher reported: the one count is the agents' (the switches their HCA ports face, a link per port), and
    says so; with the twin's watcher it is the watcher's, spines and their cables included."""
    from gpufleet.model.observe import NodeInventory, PortInfo

    plane = plane_at(state_db, Clock())
    for node in ("n-0", "n-1"):
        ports = [PortInfo(f"mlx5_{r}", 1, rail=str(r), peer=f"leaf-r{r}") for r in range(4)]
        plane.ingest(batch(node, [], inventory=NodeInventory(hostname=node, ports=ports)))
    counts = views.fabric(plane)["counts"]  # type: ignore[arg-type]
    assert counts == {"source": "node agents", "switches": 4, "links": 8, "links_down": 0, "hca_ports": 8}
    twin = small_twin()
    twin_plane, fleet = door(twin)
    run_headless(twin, fleet, twin_plane.ingest, twin_plane.tick, 100)
    watched = views.fabric(twin_plane)["counts"]  # type: ignore[arg-type]
    (subnet,) = fabric_summary(twin_plane.fabric)["subnets"]  # type: ignore[attr-defined]
    assert watched["source"] == "fabric watcher" and watched["hca_ports"] == 24
    assert (watched["switches"], watched["links"]) == (subnet["switches"], subnet["links"]) == (12, 88)
