"""Faults and their consequences: dead GPUs hang jobs, NCCL's watchdog fails them, log lines look real."""

from __future__ import annotations

import re

import numpy as np
import pytest

from gpufleet.model import JobState
from gpufleet.sim.faults import InjectedFault, expand_campaign
from gpufleet.sim.workloads import IB_RETRY_BUDGET_S
from gpufleet.spec.scenario_spec import INFRASTRUCTURE_FAULTS, CampaignSpec, FaultType, fault_fits_vendor
from tests.twins import TwinFactory

XID_LINE = re.compile(
    r"^\[\s*\d+\.\d{6}\] NVRM: Xid \(PCI:[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\): (\d+), "
    r"(pid=\d+, name=\S+|pid='<unknown>', name=<unknown>), .+"
)


def fault(ftype: FaultType, at: float = 60.0, **kw: object) -> InjectedFault:
    return InjectedFault(id=0, type=ftype, time=at, **kw)  # type: ignore[arg-type]


def test_training_steps_at_compute_plus_allreduce(make_twin: TwinFactory) -> None:
    twin = make_twin()
    twin.run(600)
    job = twin.cluster.job("job")
    assert job.state is JobState.running
    assert job.step_time_s == pytest.approx(twin.training.compute_s[0] + twin.training.allreduce_s[0], rel=0.02)
    assert job.step == pytest.approx(600 / job.step_time_s, abs=1)
    assert twin.time - job.last_step_time < job.step_time_s


def test_a_dead_gpu_hangs_its_job_then_the_watchdog_fails_it(make_twin: TwinFactory) -> None:
    twin = make_twin(faults=[fault(FaultType.gpu_off_bus, node="n-001", gpu=6)], timeout=600)
    twin.run(120)
    job = twin.cluster.job("job")
    assert job.state is JobState.hung
    last = job.last_step_time
    assert twin.training.hang["job"].kind == "gpu_lost"
    # Healthy ranks spin in NCCL at 100%; the lost GPU reads nothing.
    ranks = twin.training.ranks_of(0)
    lost = twin.gpu("n-001", 6)
    assert not twin.gpus.alive[lost]
    assert (twin.gpus.util[ranks[ranks != lost]] == 100.0).all()
    twin.run(600)
    assert job.state is JobState.failed
    assert job.last_step_time == last
    failure = [e for e in twin.events if e.kind == "job_state" and e.attrs.get("state") == "Failed"]
    assert "Watchdog caught collective operation timeout" in failure[0].message
    assert failure[0].time == pytest.approx(last + 600, abs=1.5)
    lines = twin.kmsg["n-001"]
    xid = [ln for ln in lines if "Xid" in ln]
    assert len(xid) == 1 and XID_LINE.match(xid[0]) and xid[0].rstrip().endswith("GPU has fallen off the bus.")
    assert any("GPU Board Serial Number" in ln for ln in lines)


def test_app_xid_kills_the_job_with_a_driver_format_line(make_twin: TwinFactory) -> None:
    twin = make_twin(faults=[fault(FaultType.xid, node="n-000", gpu=2, code=13)])
    twin.run(70)
    assert twin.cluster.job("job").state is JobState.failed
    (line,) = twin.kmsg["n-000"]
    match = XID_LINE.match(line)
    assert match and match.group(1) == "13" and "name=python" in line


def test_ecc_dbe_writes_48_then_63_and_wedges_the_gpu(make_twin: TwinFactory) -> None:
    twin = make_twin(faults=[fault(FaultType.ecc_dbe, node="n-000", gpu=1)])
    twin.run(70)
    codes = [int(XID_LINE.match(ln).group(1)) for ln in twin.kmsg["n-000"]]  # type: ignore[union-attr]
    assert codes == [48, 63]
    i = twin.gpu("n-000", 1)
    assert twin.gpus.ecc_dbe_vol[i] == 1 and twin.gpus.remap_pending[i] and twin.gpus.wedged[i]
    assert twin.cluster.job("job").state is JobState.hung


def test_link_down_hangs_only_after_ibs_retry_budget(make_twin: TwinFactory) -> None:
    twin = make_twin(faults=[fault(FaultType.link_down, node="n-001", rail=3)])
    twin.run(60 + IB_RETRY_BUDGET_S - 2)
    assert twin.cluster.job("job").state is JobState.running
    twin.run(5)
    assert twin.cluster.job("job").state is JobState.hung
    assert twin.training.hang["job"].kind == "link_down"
    assert any(e.kind == "syslog" and "ib3: lost carrier" in e.message for e in twin.events)


def test_short_flaps_survive_and_count(make_twin: TwinFactory) -> None:
    twin = make_twin(faults=[fault(FaultType.link_flap, node="n-000", rail=1, duration=400.0)])
    twin.run(500)
    assert twin.cluster.job("job").state is JobState.running
    p = twin.port_of("n-000", 1)
    assert twin.ports.up[p]
    assert twin.ports.counters["link_downed"][p] >= 4
    downs = [e for e in twin.events if e.kind == "link_state" and not e.attrs["up"]]
    assert len(downs) == twin.ports.counters["link_downed"][p]


def test_stuck_rank_hangs_the_job_and_goes_quiet(make_twin: TwinFactory) -> None:
    twin = make_twin(faults=[fault(FaultType.nccl_hang, job="job", rank=11)])
    twin.run(90)
    assert twin.cluster.job("job").state is JobState.hung
    stuck = int(twin.training.ranks_of(0)[11])
    assert twin.gpus.util[stuck] == 0.0
    assert twin.training.hang["job"].detail == "rank 11"


def test_straggler_slows_every_step_then_recovers(make_twin: TwinFactory) -> None:
    twin = make_twin(faults=[fault(FaultType.straggler, job="job", rank=3, factor=2.0, duration=600.0)])
    twin.run(30)
    healthy = twin.cluster.job("job").step_time_s
    twin.run(300)
    assert twin.cluster.job("job").step_time_s > 1.6 * healthy
    rank = int(twin.training.ranks_of(0)[3])
    others = np.delete(twin.training.rank_compute_s[twin.training.ranks_of(0)], 3)
    assert twin.training.rank_compute_s[rank] == pytest.approx(2.0 * others.mean(), rel=0.05)
    twin.run(600)
    assert twin.cluster.job("job").step_time_s == pytest.approx(healthy, rel=0.05)


def test_pcie_degrade_and_nvlink_errors(make_twin: TwinFactory) -> None:
    twin = make_twin(
        faults=[
            fault(FaultType.pcie_degrade, node="n-002", gpu=0),
            fault(FaultType.nvlink_errors, at=61, node="n-002", gpu=1),
        ]
    )
    twin.run(300)
    a, b = twin.gpu("n-002", 0), twin.gpu("n-002", 1)
    assert twin.gpus.pcie_width[a] == 8 and twin.gpus.pcie_gen[a] == 3 and twin.gpus.pcie_replay[a] > 100
    assert twin.gpus.nvlink_crc_flit[b] > 100 and twin.gpus.nvlink_active[b] == 18  # the link retrains, stays up
    link = int(twin.gpus.nvlink_failing[b])
    assert 0 <= link < 18  # one link's errors climb, the GPU's totals are the sum over its links
    assert twin.gpus.link_crc_flit[b, link] == twin.gpus.nvlink_crc_flit[b] == twin.gpus.link_crc_flit[b].sum()
    assert twin.gpus.link_recovery[b].sum() == twin.gpus.nvlink_recovery[b]
    assert any("): 74, " in ln for ln in twin.kmsg["n-002"])


def test_driver_mismatch_prints_the_api_mismatch(make_twin: TwinFactory) -> None:
    twin = make_twin(faults=[fault(FaultType.driver_mismatch, node="n-002")])
    twin.run(70)
    assert twin.cluster.node("n-002").software.driver_version == "535.104.05"
    assert "NVRM: API mismatch: the client has the version 550.90.07" in twin.kmsg["n-002"][0]


def test_thermal_runaway_on_a_job_gpu_makes_the_job_slower(make_twin: TwinFactory) -> None:
    twin = make_twin(faults=[fault(FaultType.thermal_runaway, node="n-000", gpu=5)])
    twin.run(50)
    healthy = twin.cluster.job("job").step_time_s
    twin.run(1200)
    assert twin.cluster.job("job").step_time_s > 1.2 * healthy


def test_restart_policy_moves_the_job_off_a_lost_gpu(make_twin: TwinFactory) -> None:
    twin = make_twin(nodes=3, faults=[fault(FaultType.gpu_off_bus, node="n-001", gpu=0)], restart=60, timeout=300)
    twin.run(60 + 300 + 90)
    job = twin.cluster.job("job")
    assert job.state is JobState.running and job.restarts == 1
    assert job.nodes == ["n-000", "n-002"]


def test_actions_reset_reboot_isolate_requeue(make_twin: TwinFactory) -> None:
    twin = make_twin(nodes=3, faults=[fault(FaultType.gpu_off_bus, node="n-001", gpu=0)])
    twin.run(70)
    assert not twin.reset_gpu("n-001", 0)  # off the bus: a reset cannot reach it
    assert twin.requeue_job("job", exclude=["n-001"])
    assert twin.cluster.job("job").nodes == ["n-000", "n-002"]
    twin.reboot_node("n-001")
    twin.run(10)
    assert not twin.sync_model().node("n-001").ready
    twin.run(300)
    assert twin.gpus.alive[twin.gpu("n-001", 0)] and twin.sync_model().node("n-001").ready
    twin.isolate_port("n-000", 2)
    assert not twin.ports.up[twin.port_of("n-000", 2)]


def test_campaign_is_reproducible_and_one_fault_per_target(make_twin: TwinFactory) -> None:
    twin = make_twin(nodes=48, job_nodes=0)
    from gpufleet.model import TrainingJob

    jobs = [
        TrainingJob(name=f"j{k}", nodes=[f"n-{i:03d}" for i in range(k * 2, k * 2 + 2)], gpus_per_node=8)
        for k in range(8)
    ]
    spec = CampaignSpec(seed=3, per_type=2)
    a = expand_campaign(spec, twin.cluster, jobs, 86400, first_id=0)
    b = expand_campaign(spec, twin.cluster, jobs, 86400, first_id=0)
    assert [(f.type, f.time, f.target) for f in a] == [(f.type, f.time, f.target) for f in b]
    # `all`: the infrastructure faults an NVIDIA cluster can have (application faults are listed by name)
    assert len(a) == 2 * len([t for t in INFRASTRUCTURE_FAULTS if fault_fits_vendor(t, "nvidia")])
    hw_nodes = [f.node for f in a if f.node]
    assert len(hw_nodes) == len(set(hw_nodes))
    job_targets = [f.job for f in a if f.job]
    assert len(job_targets) == len(set(job_targets))
    reserved = {n for j in jobs if j.name in job_targets for n in j.nodes}
    assert not reserved & set(hw_nodes)
    assert all(600 <= f.time <= 86400 - 1800 for f in a)
