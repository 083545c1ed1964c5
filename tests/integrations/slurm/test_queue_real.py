"""The Slurm scheduler view against a live slurmctld with four 8-GPU `slurmd -N` nodes: every GPU taken, one more
8-GPU job waits for Resources, and a job pinned to a drained node waits with ReqNodeNotAvail. Read directly, then
by an agent watching Slurm that reports through the control plane's door."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpufleet.agent.workload import WorkloadWatch
from gpufleet.control.service import ControlPlane
from gpufleet.integrations.slurm.queue import SlurmQueueReader
from gpufleet.model.observe import SchedulerReport
from gpufleet.remediate.backends.observe import ObserveOnlyBackend
from gpufleet.state import Database
from tests import apiclient
from tests.slurm_cluster import SlurmCluster, slurm_cluster  # noqa: F401

pytestmark = pytest.mark.real

TOKEN = "slurm-watch-token"


def _sbatch(cluster: SlurmCluster, *args: str) -> str:
    out = cluster.runner.run(["sbatch", "--parsable", "-o", str(cluster.jobs_dir / "q-%j.out"), *args])
    return out.strip().split(";")[0]


@pytest.fixture(scope="module")
def full(slurm_cluster: SlurmCluster) -> Iterator[tuple[SlurmCluster, dict[str, str]]]:  # noqa: F811
    """All 32 GPUs taken by four 8-GPU jobs, then one more 8-GPU job, and a 1-GPU job that needs drained gpu-04."""
    cluster = slurm_cluster
    reader = SlurmQueueReader(cluster.runner)
    ids: dict[str, str] = {}
    try:
        for k in range(4):
            ids[f"fill-{k}"] = _sbatch(cluster, "-J", f"fill-{k}", "--gres=gpu:h100:8", "--wrap", "sleep 600")
        cluster.wait_for(lambda: sum(j.state == "RUNNING" for j in reader.jobs()) == 4, "four 8-GPU jobs to run")
        ids["big"] = _sbatch(cluster, "-J", "one-more", "--gres=gpu:h100:8", "--wrap", "sleep 600")
        cluster.scontrol("update", "NodeName=gpu-04", "State=DRAIN", "Reason=queue test")
        ids["pinned"] = _sbatch(cluster, "-J", "pinned", "-w", "gpu-04", "--gres=gpu:1", "--wrap", "sleep 60")

        def reasons_set() -> bool:
            why = {j.job_id: j.reason for j in reader.jobs()}
            return why.get(ids["big"]) == "Resources" and why.get(ids["pinned"], "").startswith("ReqNodeNotAvail")

        cluster.wait_for(reasons_set, "the scheduler to give both pending jobs their reason")
        yield cluster, ids
    finally:
        cluster.runner.run(["scancel", *ids.values()])
        cluster.scontrol("update", "NodeName=gpu-04", "State=RESUME")
        cluster.wait_for(lambda: not reader.jobs(), "the test's jobs to go")


def test_the_pending_job_its_reason_and_the_partitions_use(full: tuple[SlurmCluster, dict[str, str]]) -> None:
    cluster, ids = full
    before = time.time()
    report = SlurmQueueReader(cluster.runner).read()
    assert report.manager == "slurm" and report.time >= before
    by_id = {p.name.split(" ")[0]: p for p in report.pending}
    assert set(by_id) == {ids["big"], ids["pinned"]}
    big = by_id[ids["big"]]
    assert big.name == f"{ids['big']} one-more" and big.queue == "gpu" and big.gpus == 8
    assert big.reason == "Resources" and "partition gpu: 32 of 32 GPUs allocated" in big.message
    assert big.since is not None and before - 600 < big.since <= report.time
    pinned = by_id[ids["pinned"]]
    assert pinned.reason == "ReqNodeNotAvail" and pinned.gpus == 1
    assert "unavailable nodes: gpu-04" in pinned.message
    (gpu,) = report.queues
    assert (gpu.name, gpu.gpus_used, gpu.quota, gpu.gpus_pending) == ("gpu", 32, 32, 9)
    assert (gpu.running, gpu.pending) == (4, 2)


def test_an_agent_watching_slurm_reports_through_the_door(
    full: tuple[SlurmCluster, dict[str, str]], tmp_path: Path
) -> None:
    from gpufleet.agent.host import host_agent

    cluster, ids = full
    plane = ControlPlane(Database(tmp_path / "cp.db"), ObserveOnlyBackend(lambda: []))
    watch = WorkloadWatch(SlurmQueueReader(cluster.runner).read, "slurm", every_s=1.0)
    kern = tmp_path / "kern.log"
    kern.write_text("")
    with apiclient.serving(apiclient.app(plane, secret=TOKEN)) as url:
        agent = host_agent(
            host="127.0.0.1", port=0, interval=0.2, data_dir=tmp_path / "agent", control_plane=url,
            token=lambda: TOKEN, node="login-1", kmsg_file=kern, ib_sysfs=tmp_path / "no-ib", scheduler=watch,
        )  # fmt: skip
        agent.stoppers.insert(0, watch)
        agent.start()
        try:
            deadline = time.monotonic() + 30
            view: dict[str, Any] = {}
            while time.monotonic() < deadline:
                view = httpx.get(f"{url}/api/v1/scheduler", trust_env=False).json()
                if view["managers"]:
                    break
                time.sleep(0.2)
        finally:
            agent.stop()
    assert not watch.alive and watch.failing is None and watch.reads >= 1
    (slurm,) = view["managers"]
    assert slurm["manager"] == "slurm" and slurm["node"] == "login-1" and not slurm["stale"]
    assert {p["name"].split(" ")[0] for p in slurm["pending"]} == {ids["big"], ids["pinned"]}
    assert {p["reason"] for p in slurm["pending"]} == {"Resources", "ReqNodeNotAvail"}
    assert all(p["waiting_s"] is not None and p["waiting_s"] >= 0 for p in slurm["pending"])
    (gpu,) = slurm["queues"]
    assert (gpu["name"], gpu["gpus_used"], gpu["quota"], gpu["use_pct"]) == ("gpu", 32, 32, 100.0)
    assert isinstance(plane.fleet.scheduler["slurm"][1], SchedulerReport)
