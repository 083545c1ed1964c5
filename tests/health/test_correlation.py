"""Cross-node correlation on hand-built inputs: a hung job's root-cause rank, a hang joined to the lost GPU of one of
its ranks on another node, stragglers, driver drift across the fleet. No twin."""

from __future__ import annotations

import numpy as np

from gpufleet.health.correlation import Correlator
from gpufleet.health.detectors.seen import JobView
from gpufleet.model import Entity, EntityKind, RootCause, Severity
from gpufleet.model.observe import Finding, GpuInfo, NodeInventory

T0 = 1_800_000_000.0
RANKS = tuple((f"n{k // 4}", k % 4) for k in range(8))  # 8 ranks on two nodes


def job(last_step: float, compute: tuple[float, ...] = ()) -> JobView:
    return JobView("train", RANKS, last_step, 2.0, compute)


def no_inventory() -> list[NodeInventory]:
    return []


def test_a_hang_names_the_rank_that_never_arrived() -> None:
    c = Correlator()
    util = np.array([100.0] * 8)
    util[5] = 0.0  # rank 5 (n1, GPU 1) sits idle while the others spin in NCCL
    found = []
    for k in range(60):
        found += c.tick(T0 + k, [job(T0)], lambda j: util, no_inventory)
    (inc,) = {i.id: i for i in found}.values()
    assert inc.cause is RootCause.nccl_hang and str(inc.entity) == "gpu/n1/1"
    assert inc.effects == ["job train"]
    first = c.thresholds.training.hang_min_s + c.thresholds.training.hang_signature_s
    assert inc.first_seen - T0 <= first + 1


def test_a_hang_joins_the_lost_gpu_of_one_of_its_ranks_on_another_node() -> None:
    c = Correlator()
    lost = Finding(T0, RootCause.gpu_lost, Entity(EntityKind.gpu, "n1", 2), Severity.critical, "Xid 79", "line",
                   "kmsg", action="RESTART_BM", xid=79)  # fmt: skip
    owner = {node_gpu: "train" for node_gpu in RANKS}
    c.book.job_resources = lambda name: sorted({f"gpu/{n}/{g}" for n, g in RANKS} | {f"node/{n}" for n, _ in RANKS})
    (cause,) = c.add([lost], lambda n, g: owner.get((n, g)) if g is not None else None)
    util = np.array([100.0] * 8)
    util[6] = np.nan  # the lost GPU reads nothing
    for k in range(60):
        c.tick(T0 + k, [job(T0)], lambda j: util, no_inventory)
    assert list(c.book.incidents) == [cause.id]  # no second incident for the hang
    assert any("unreachable" in e for e in c.book.incidents[cause.id].effects)


def test_a_straggler_is_the_rank_slower_than_the_median_for_a_minute() -> None:
    c = Correlator()
    compute = tuple(1.0 if k != 2 else 1.6 for k in range(8))
    found = []
    for k in range(0, 90, 5):
        found += c.tick(T0 + k, [job(T0 + k, compute)], lambda j: np.full(8, 100.0), no_inventory)
    (inc,) = {i.id: i for i in found}.values()
    assert inc.cause is RootCause.straggler and str(inc.entity) == "gpu/n0/2"


def test_a_driver_that_differs_from_the_fleet_is_found_across_nodes() -> None:
    c = Correlator()
    fleet = [
        NodeInventory(hostname=f"n{k}", driver="550.90.07" if k != 3 else "535.104.05", cuda="12.2",
                      gpus=[GpuInfo(0, f"GPU-{k}", "H100")])
        for k in range(5)
    ]  # fmt: skip
    (inc,) = c.tick(T0, [], lambda j: np.empty(0), lambda: fleet)
    assert inc.cause is RootCause.driver_mismatch and inc.node == "n3" and "fleet's 550.90.07" in inc.evidence[0].text


def test_a_measured_condition_clears_and_resolves() -> None:
    c = Correlator()
    brake = Finding(T0, RootCause.power_brake, Entity(EntityKind.gpu, "n0", 1), Severity.warning, "brake", "3 s",
                    "telemetry")  # fmt: skip
    (inc,) = c.add([brake])
    hold = c.holds[RootCause.power_brake]
    assert c.tick(T0 + hold - 1, [], lambda j: np.empty(0), no_inventory) == []
    (done,) = c.tick(T0 + hold + 1, [], lambda j: np.empty(0), no_inventory)
    assert done.id == inc.id and done.state.value == "resolved" and "cleared" in done.evidence[-1].text


def test_a_job_that_stopped_and_came_back_is_not_a_straggler_from_before() -> None:
    c = Correlator()
    slow = tuple(1.0 if k != 2 else 1.6 for k in range(8))
    for k in range(0, 40, 5):  # slow for 40 s: not yet a straggler
        assert c.tick(T0 + k, [job(T0 + k, slow)], lambda j: np.full(8, 100.0), no_inventory) == []
    c.tick(T0 + 600, [], lambda j: np.empty(0), no_inventory)  # the job failed and is gone for a while
    found = []
    for k in range(605, 660, 5):  # back, slow again: the 60 s hold starts over
        found += c.tick(T0 + k, [job(T0 + k, slow)], lambda j: np.full(8, 100.0), no_inventory)
    assert found == []
