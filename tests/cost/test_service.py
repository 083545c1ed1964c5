"""The cost report of a control plane fed through the one door: agents' pushes (utilization, who holds each GPU, the
jobs' ranks and the services' replicas) become the series the report reads back from the embedded store, and the
report shows each workload's GPU-hours and money; the twin's workloads come out in their namespaces. Also the
period's parsing and grid."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

from gpufleet.control.service import ControlPlane
from gpufleet.cost.config import CostConfig
from gpufleet.cost.service import CostService, parse_since, step_for
from gpufleet.errors import UserError
from gpufleet.model.observe import (
    SCHEMA_VERSION,
    Batch,
    GpuInfo,
    JobFact,
    MetricSnapshot,
    NodeInventory,
    RankFact,
    ServiceFact,
)
from gpufleet.remediate.backends.observe import ObserveOnlyBackend
from gpufleet.sim.faults import InjectedFault
from gpufleet.sim.runner import run_headless
from gpufleet.spec.scenario_spec import FaultType
from gpufleet.state import Database
from gpufleet.telemetry.store import EmbeddedStore
from tests.control.helpers import T0, Clock
from tests.twins import door, small_twin

H100 = "NVIDIA H100 80GB HBM3"
PUSH_S = 15.0


def _inventory(node: str) -> NodeInventory:
    gpus = [GpuInfo(i, f"GPU-{node}-{i}", H100, f"00000000:{0x18 + i:02X}:00.0") for i in range(4)]
    return NodeInventory(hostname=node, gpus=gpus, labels={"pool": "h100-pool"})


def _batch(node: str, when: float, util: list[float], held: list[str], **facts: Any) -> Batch:
    snapshot = MetricSnapshot.of(when, [0, 1, 2, 3], ["DCGM_FI_DEV_GPU_UTIL"], np.array([util]), held=held)
    return Batch(v=SCHEMA_VERSION, agent=node, incarnation="inc-1", node=node, sent=when, interval=PUSH_S,
                 inventory=_inventory(node), metrics=snapshot, **facts)  # fmt: skip


@pytest.fixture(scope="module")
def plane() -> ControlPlane:
    """Two hours of pushes: n-a's four GPUs run a training job at 85 %; n-b's GPU 0 serves `chat` at 40 % and
    GPU 1 is held by a reserved pod doing nothing, its other two by nobody."""
    clock = Clock()
    holder: dict[str, ControlPlane] = {}
    backend = ObserveOnlyBackend(lambda: sorted(holder["p"].fleet.nodes))
    p = holder["p"] = ControlPlane(Database(":memory:"), backend, clock=clock, metrics=EmbeddedStore(None))
    ranks = [RankFact(r, r) for r in range(4)]
    for k in range(int(2 * 3600 / PUSH_S) + 1):
        clock.now = T0 + k * PUSH_S
        job = JobFact(job="train-x", ranks=ranks, world_size=4, last_step_time=clock.now, step_seconds=1.0)
        p.ingest(_batch("n-a", clock.now, [85.0] * 4, ["training/train-x-n-a"] * 4, jobs=[job]))
        p.ingest(_batch("n-b", clock.now, [40.0, 0.0, 0.0, 0.0], ["inference/chat-0", "default/reserved-1", "", ""],
                        services=[ServiceFact(service="chat", gpus=[0])]))  # fmt: skip
        p.tick()
    return p


def test_the_report_prices_each_workload_from_what_agents_pushed(plane: ControlPlane) -> None:
    report = CostService(plane, CostConfig(teams={"training": "research"})).report("1h")
    assert report.hours == 1.0 and report.step_s == 60.0
    rows = {(w.namespace, w.workload): w for w in report.by_workload}
    assert set(rows) == {("training", "train-x"), ("inference", "chat"), ("default", "reserved-1")}
    job, chat, reserved = rows[("training", "train-x")], rows[("inference", "chat")], rows[("default", "reserved-1")]
    assert (job.kind, job.team, job.peak_gpus, job.gpu_hours, job.util_avg_pct) == ("job", "research", 4.0, 4.0, 85.0)
    assert (chat.kind, chat.gpu_hours, chat.idle_gpu_hours, chat.util_avg_pct) == ("service", 1.0, 0.0, 40.0)
    assert (reserved.kind, reserved.gpu_hours, reserved.idle_gpu_hours) == ("pod", 1.0, 1.0)
    price = 98.32 / 8  # the catalog's AWS on-demand H100
    assert job.cost_usd == pytest.approx(4 * price, abs=0.01)
    assert reserved.idle_cost_usd == pytest.approx(price, abs=0.01)
    t = report.totals
    assert (t.gpus, t.held_gpu_hours, t.idle_gpu_hours, t.unallocated_gpu_hours) == (8.0, 6.0, 1.0, 2.0)
    assert report.waste.unallocated_cost_usd == pytest.approx(2 * price, abs=0.01)
    assert {n.pool for n in report.usage.nodes} == {"h100-pool"}  # from the nodes' inventory labels


def test_the_store_holds_the_series_a_prometheus_would(plane: ControlPlane) -> None:
    assert plane.metrics is not None
    store = plane.metrics.store
    util = store.instant('DCGM_FI_DEV_GPU_UTIL{hostname="n-a",gpu="2"}')
    assert [s.value for s in util] == [85.0] and util[0].labels["UUID"] == "GPU-n-a-2"
    assert util[0].labels["modelName"] == H100
    info = {s.labels["pod"]: s.labels for s in store.instant('gpufleet_gpu_pod_info{hostname="n-b"}')}
    assert set(info) == {"chat-0", "reserved-1"}
    assert info["chat-0"]["workload"] == "chat" and "workload" not in info["reserved-1"]


def test_the_operators_cost_config_is_read_on_every_report(
    plane: ControlPlane, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = CostService(plane, config_path=tmp_path / "cost.yaml")
    assert {t.name for t in service.report("1h").by_team} == {"unassigned"}  # no cost.yaml: the defaults
    (tmp_path / "cost.yaml").write_text("teams: {training: research, inference: serving}\nprovider: lambda\n")
    report = service.report("1h")
    assert {t.name for t in report.by_team} == {"research", "serving", "unassigned"}
    assert {p.provider for p in report.prices} == {"lambda"}
    (tmp_path / "cost.yaml").write_text("teams: [training]\n")
    with pytest.raises(UserError, match=r"cost\.yaml: teams"):
        service.report("1h")


def test_a_longer_period_than_the_history_covers_only_what_was_reported(plane: ControlPlane) -> None:
    """A week asked of two hours of history: the report is of the two hours (its start where the history begins,
    on the grid two hours take), and says so."""
    report = CostService(plane, CostConfig()).report("7d")
    assert report.hours == pytest.approx(2.0, abs=0.02) and report.asked_hours == 7 * 24  # within one step
    assert report.step_s == 60.0  # two hours' grid, not a week's (300 s)
    assert report.start < T0 <= report.start + report.step_s and report.end == pytest.approx(T0 + 2 * 3600, abs=60)
    assert report.totals.held_gpu_hours == pytest.approx(6 * 2, abs=0.2)  # two hours of six held GPUs
    assert max(n.covered_hours for n in report.usage.nodes) == pytest.approx(2.0, abs=0.05)
    assert any("covers 2" in note and "168 h asked" in note for note in report.notes)
    within = CostService(plane, CostConfig()).report("1h")  # the history covers all of it: as asked
    assert (within.hours, within.asked_hours) == (1.0, None) and not within.notes


def test_the_idle_threshold_can_be_raised_for_one_report(plane: ControlPlane) -> None:
    report = CostService(plane, CostConfig()).report("1h", idle_below=50)
    rows = {w.workload: w for w in report.by_workload}
    assert rows["chat"].idle_gpu_hours == 1.0 and rows["train-x"].idle_gpu_hours == 0.0
    with pytest.raises(UserError, match="not a utilization"):
        CostService(plane, CostConfig()).report("1h", idle_below=150)


def test_a_control_plane_without_history_says_so() -> None:
    holder: dict[str, ControlPlane] = {}
    backend = ObserveOnlyBackend(lambda: [])
    p = holder["p"] = ControlPlane(Database(":memory:"), backend, clock=Clock())
    with pytest.raises(UserError, match="no metric history"):
        CostService(p, CostConfig()).report("1h")


@pytest.mark.parametrize(("since", "seconds", "step"), [("90m", 5400, 60), ("24h", 86400, 60), ("7d", 604800, 300),
                                                        ("30d", 2592000, 1800)])  # fmt: skip
def test_periods_and_their_grid(since: str, seconds: float, step: float) -> None:
    assert parse_since(since) == seconds
    assert step_for(seconds) == step and seconds / step <= 2016


@pytest.mark.parametrize("bad", ["7x", "", "30s", "2y", "-1h"])
def test_a_bad_period_says_how_to_write_one(bad: str) -> None:
    with pytest.raises(UserError) as err:
        parse_since(bad)
    assert bad in err.value.message or "year" in err.value.message
    assert err.value.fix


def test_the_twins_workloads_show_in_their_namespaces() -> None:
    """The twin through the door: its training job's pods in `training`, its service's in `inference`, and an
    idle GPU a reserved pod holds in `default`."""
    twin = small_twin(nodes=3, job_nodes=2, service_node="n-002",
                      faults=[InjectedFault(0, FaultType.idle_gpu, 0.0, node="n-002", gpu=7)])  # fmt: skip
    plane, fleet = door(twin, lock=threading.RLock())
    run_headless(twin, fleet, plane.ingest, plane.tick, 1200)  # type: ignore[attr-defined]
    report = CostService(plane, CostConfig()).report("30m")  # type: ignore[arg-type]
    rows = {(w.namespace, w.kind): w for w in report.by_workload}
    job, service = rows[("training", "job")], rows[("inference", "service")]
    assert (job.workload, job.peak_gpus, service.workload, service.peak_gpus) == ("job", 16.0, "chat", 2.0)
    covered = max(n.covered_hours for n in report.usage.nodes)  # the twin ran 20 of the report's 30 minutes
    assert covered == pytest.approx(1200 / 3600, abs=0.02)
    assert job.gpu_hours == pytest.approx(16 * covered, abs=0.1) and job.util_avg_pct > 50
    reserved = rows[("default", "pod")]
    assert reserved.workload.startswith("reserved-") and reserved.idle_gpu_hours == pytest.approx(covered, abs=0.02)
    assert report.totals.unallocated_gpu_hours == pytest.approx(5 * covered, abs=0.1)  # n-002's five free GPUs
    assert report.totals.cost_usd > 0 and report.waste.idle_allocated_cost_usd > 0


def test_a_faulty_node_of_the_twin_is_not_proposed_for_scale_down() -> None:
    """n-002 sits empty from the start; its GPU 3 falls off the bus after five minutes. The control plane names it
    out of service (its critical gpu-lost incident), so the scale-to-zero advice leaves it out and says why, and the
    waste report does not count it as an idle node; n-001, empty and healthy, is proposed."""
    twin = small_twin(nodes=3, job_nodes=1,
                      faults=[InjectedFault(0, FaultType.gpu_off_bus, 300.0, node="n-002", gpu=3)])  # fmt: skip
    plane, fleet = door(twin, lock=threading.RLock())
    run_headless(twin, fleet, plane.ingest, plane.tick, 5400)  # type: ignore[attr-defined]
    out = plane.out_of_service()  # type: ignore[attr-defined]
    (incident,) = [i for i in plane.incidents() if i["cause"] == "gpu-lost"]  # type: ignore[attr-defined]
    assert out == {"n-002": f"faulty: {incident['id']} gpu-lost"}
    report = CostService(plane, CostConfig()).report("90m")  # type: ignore[arg-type]
    assert report.usage.out_of_service == out
    (rec,) = report.recommendations
    assert rec.removable_nodes == ["n-001"]
    assert "n-002 (faulty:" in rec.why
    assert "n-002" not in [n.node for n in report.waste.idle_nodes]
