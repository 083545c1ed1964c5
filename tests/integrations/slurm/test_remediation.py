"""The Slurm remediation backend against a live slurmctld: drain/resume read back with sinfo, requeue of a running
job away from a bad node, and a whole runbook run."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.integrations.slurm.client import SinfoRow
from gpufleet.integrations.slurm.remediation import SlurmBackend
from gpufleet.model.incident import RootCause
from gpufleet.remediate import FileTicketSink, RemediationStore, Remediator, UnsupportedActionError
from gpufleet.remediate.backends.base import CapsPower, IsolatesPorts, ResetsGpus
from tests.remediate.helpers import incident, policy
from tests.slurm_cluster import SlurmCluster, slurm_cluster  # noqa: F401

pytestmark = pytest.mark.real


def _sinfo_state(cluster: SlurmCluster, node: str) -> SinfoRow:
    return next(r for r in cluster.runner.sinfo() if r.node == node)


def _submit(cluster: SlurmCluster, name: str, node: str | None = None) -> str:
    args = ["sbatch", "--parsable", f"--job-name={name}", "--gres=gpu:h100:1", "--requeue"]
    args += [f"--output={cluster.jobs_dir}/%j.out", f"--chdir={cluster.jobs_dir}"]
    if node:
        args.append(f"--nodelist={node}")
    return cluster.runner.run([*args, "--wrap", "sleep 300"]).strip()


def test_cordon_and_uncordon_read_back_with_sinfo(slurm_cluster: SlurmCluster) -> None:  # noqa: F811
    backend = SlurmBackend(slurm_cluster.runner)
    backend.cordon("gpu-03", "inc-7: GPU XID 79 (fell off the bus)", "inc-7")
    row = _sinfo_state(slurm_cluster, "gpu-03")
    assert row.state.drained and row.reason == "gpufleet[inc-7]: GPU XID 79 (fell off the bus)"
    assert backend.unavailable() == {"gpu-03"}
    backend.uncordon("gpu-03", "inc-7")
    assert not _sinfo_state(slurm_cluster, "gpu-03").state.drained
    slurm_cluster.wait_for(lambda: backend.unavailable() == set(), "gpu-03 to answer pings again")
    assert backend.placement()["gpu-03"].rack == "r1"


def test_drain_requeues_running_job_excluding_the_node(slurm_cluster: SlurmCluster) -> None:  # noqa: F811
    backend = SlurmBackend(slurm_cluster.runner)
    job_id = _submit(slurm_cluster, "train-a", node="gpu-01")
    slurm_cluster.wait_for(lambda: slurm_cluster.runner.jobs(job_id)[0].state == "RUNNING", "job to run")
    detail = backend.drain("gpu-01", "inc-8: Xid 48 double-bit ECC", "inc-8")
    assert job_id in detail
    slurm_cluster.wait_for(lambda: slurm_cluster.runner.jobs(job_id)[0].state == "PENDING", "job back in the queue")
    job = slurm_cluster.runner.jobs(job_id)[0]
    assert job.restarts == 1 and job.excluded == ["gpu-01"]
    assert _sinfo_state(slurm_cluster, "gpu-01").state.drained
    slurm_cluster.reset_nodes()


def test_an_operators_drain_is_never_resumed_by_an_incident(slurm_cluster: SlurmCluster) -> None:  # noqa: F811
    backend = SlurmBackend(slurm_cluster.runner)
    slurm_cluster.runner.run(["scontrol", "update", "NodeName=gpu-02", "State=DRAIN", "Reason=PSU swap in rack r1"])
    said = backend.cordon("gpu-02", "inc-1: uncorrectable ECC error", "inc-1")
    assert "drained by someone else (reason: PSU swap in rack r1)" in said
    kept = backend.uncordon("gpu-02", "inc-1")
    assert kept == "node gpu-02 kept cordoned: drained by someone else (reason: PSU swap in rack r1)"
    row = _sinfo_state(slurm_cluster, "gpu-02")
    assert row.state.drained and row.reason == "PSU swap in rack r1"  # their reason, untouched
    slurm_cluster.reset_nodes()


def test_two_incidents_on_one_node_resume_it_only_after_both(slurm_cluster: SlurmCluster) -> None:  # noqa: F811
    backend = SlurmBackend(slurm_cluster.runner)
    backend.cordon("gpu-04", "inc-1: Xid 48", "inc-1")
    backend.cordon("gpu-04", "inc-2: Xid 94", "inc-2")
    assert _sinfo_state(slurm_cluster, "gpu-04").reason == "gpufleet[inc-1,inc-2]: Xid 94"
    assert backend.uncordon("gpu-04", "inc-1") == "node gpu-04 kept cordoned: still held by inc-2"
    row = _sinfo_state(slurm_cluster, "gpu-04")
    assert row.state.drained and row.reason == "gpufleet[inc-2]: Xid 94"
    assert "inc-2's cordon was the last" in backend.uncordon("gpu-04", "inc-2")
    assert not _sinfo_state(slurm_cluster, "gpu-04").state.drained
    slurm_cluster.reset_nodes()


def test_requeue_job_by_name(slurm_cluster: SlurmCluster) -> None:  # noqa: F811
    backend = SlurmBackend(slurm_cluster.runner)
    job_id = _submit(slurm_cluster, "train-b", node="gpu-02")
    slurm_cluster.wait_for(lambda: slurm_cluster.runner.jobs(job_id)[0].state == "RUNNING", "job to run")
    backend.requeue_job("train-b", ["gpu-02"])
    slurm_cluster.wait_for(lambda: slurm_cluster.runner.jobs(job_id)[0].state == "PENDING", "job back in the queue")
    job = slurm_cluster.runner.jobs(job_id)[0]
    assert job.restarts == 1 and job.excluded == ["gpu-02"]
    slurm_cluster.reset_nodes()


def test_node_local_actions_are_unsupported_and_say_so(slurm_cluster: SlurmCluster) -> None:  # noqa: F811
    backend = SlurmBackend(slurm_cluster.runner)
    # the controller cannot reach a GPU, its power or a port: the backend lacks those capabilities
    assert not isinstance(backend, ResetsGpus | CapsPower | IsolatesPorts)
    assert "cannot reset GPU 0 on gpu-01" in backend.cannot("reset GPU 0", "gpu-01", "reset it on the node").message
    with pytest.raises(UnsupportedActionError, match="diag"):
        backend.run_diag("gpu-01", 2)
    assert SlurmBackend(slurm_cluster.runner, diag_command="true {node} {level}").run_diag("gpu-01", 2).passed
    assert not SlurmBackend(slurm_cluster.runner, diag_command="false {node}").run_diag("gpu-01", 2).passed


def test_rma_runbook_on_real_slurm(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:  # noqa: F811
    rem = Remediator(
        SlurmBackend(slurm_cluster.runner),
        RemediationStore(tmp_path / "r.db"),
        policy(budget={"cluster": "50%"}, rateLimits={}),
        tickets=FileTicketSink(tmp_path / "tickets"),
    )
    inc = incident(RootCause.row_remap_failure, "gpu-04", gpu=6, xid=64, serial="1652922001234")
    report = rem.apply(inc)
    assert [s.decision for s in report.steps] == ["done", "done", "done"]
    assert _sinfo_state(slurm_cluster, "gpu-04").state.drained
    [ticket] = FileTicketSink(tmp_path / "tickets").tickets()
    assert ticket.serial == "1652922001234" and ticket.node == "gpu-04"
    # A reset the controller cannot do stops the runbook with the node still drained.
    reset = rem.apply(incident(RootCause.gpu_xid, "gpu-04", gpu=6, action="RESET_GPU", ident="reset-1"))
    assert [s.decision for s in reset.steps] == ["done", "unsupported"]
    assert _sinfo_state(slurm_cluster, "gpu-04").state.drained
    slurm_cluster.reset_nodes()


def test_gpu_lost_runbook_reboots_through_slurm_and_waits(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:  # noqa: F811
    """The node cannot really reboot here (all slurmd share one host), so the runbook must wait at the diag step."""
    rem = Remediator(
        SlurmBackend(slurm_cluster.runner, diag_command="true {node}"),
        RemediationStore(tmp_path / "r.db"),
        policy(budget={"cluster": "50%"}, rateLimits={}),
        tickets=FileTicketSink(tmp_path / "tickets"),
    )
    report = rem.apply(incident(RootCause.gpu_lost, "gpu-02", gpu=3, xid=79))
    assert [s.decision for s in report.steps] == ["done", "done", "waiting"]
    state = slurm_cluster.runner.node("gpu-02").state
    assert state.drained and state.flags & {"REBOOT_REQUESTED", "REBOOT_ISSUED"}
    assert [s.decision for s in rem.resume()[0].steps][-1] == "waiting"
    slurm_cluster.reset_nodes()  # RESUME clears the pending reboot
