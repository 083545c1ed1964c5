"""Remediation through the Slurm controller: `scontrol update NodeName=... State=DRAIN|RESUME`, `scontrol requeue`,
`scontrol reboot`. Slurm has no separate cordon: a DRAIN state takes no new jobs and lets running ones finish, which
is a cordon; our drain also requeues the jobs running there, excluding the node.

Whose drain a node's DRAIN is shows in its reason: gpufleet writes `gpufleet[inc-1,inc-2]: what happened`, the
incidents holding the node out (gpufleet.remediate.backends.cordons). A node an operator drained with a reason of
their own is never resumed by an incident, and its reason is never overwritten; an incident's uncordon resumes the node
only when it was the last one holding it.

Actions that need the node itself (GPU reset, power limits, port isolation) are not something the controller can
do, so the backend lacks those capabilities: the runbook stops with the node drained and the audit log says why.

write_topology_conf replaces topology.conf the way slurmctld can never read half of it (a file beside it, flushed,
renamed over it) and runs `scontrol reconfigure`, which has slurmctld read its configuration files again.
"""

from __future__ import annotations

import os
import re
import shlex
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from gpufleet.errors import BackendError, NotFoundError
from gpufleet.integrations.slurm.client import SlurmJob, SlurmNode, SlurmRunner
from gpufleet.remediate.backends.base import (
    Cordons,
    DiagResult,
    Drains,
    NodeLocation,
    RebootsNodes,
    RemediationBackend,
    RequeuesJobs,
    RunsDiagnostics,
    UnsupportedActionError,
    WritesTopologyConf,
)
from gpufleet.remediate.backends.cordons import CordonChange, on_cordon, on_uncordon

_OURS = re.compile(r"^gpufleet\[([^\]]*)\]:?\s*(.*)$")


def _reason(text: str) -> str:
    # scontrol takes the reason as one argv word; keep it printable and short.
    return " ".join(text.split())[:200] or "gpufleet remediation"


def _owned(reason: str) -> tuple[tuple[str, ...], str] | None:
    """(holders, what happened) from a drain reason gpufleet wrote; None for anyone else's."""
    m = _OURS.match(reason.strip())
    if m is None:
        return None
    return tuple(h for h in m.group(1).split(",") if h), m.group(2)


def _owned_reason(holders: tuple[str, ...], text: str) -> str:
    return _reason(f"gpufleet[{','.join(holders)}]: {text}")


class SlurmBackend(
    RemediationBackend, Cordons, Drains, RebootsNodes, RunsDiagnostics, RequeuesJobs, WritesTopologyConf
):
    name = "slurm"

    def __init__(self, runner: SlurmRunner | None = None, diag_command: str | None = None) -> None:
        """`diag_command` is run to test a node, with {node} and {level} filled in, e.g.
        "ssh {node} dcgmi diag -r {level}"; it passes when it exits 0. Without it, diag steps are unsupported."""
        self.runner = runner or SlurmRunner()
        self.diag_command = diag_command

    def now(self) -> float:
        return time.time()

    def _nodes(self) -> list[SlurmNode]:
        return self.runner.nodes()

    def nodes(self) -> list[str]:
        return [n.name for n in self._nodes()]

    def placement(self) -> dict[str, NodeLocation]:
        """From node features written rack:<name> and leaf:<name> (Feature= in slurm.conf)."""
        return {n.name: NodeLocation(rack=n.feature("rack"), leaf=n.feature("leaf")) for n in self._nodes()}

    def unavailable(self) -> set[str]:
        return {n.name for n in self._nodes() if not n.state.available}

    def node_ready(self, node: str) -> bool:
        st = self.runner.node(node).state
        return st.base not in ("DOWN", "UNKNOWN") and not (
            st.flags & {"REBOOT_REQUESTED", "REBOOT_ISSUED", "NOT_RESPONDING", "POWERING_UP"}
        )

    def _update_node(self, node: str, *fields: str) -> None:
        self.runner.run(["scontrol", "update", f"NodeName={node}", *fields])

    def _change(
        self, node: str, incident: str | None, reason: str, decide: Callable[..., CordonChange]
    ) -> CordonChange:
        """Decide on the node as slurmctld has it and write the result: DRAIN with gpufleet's reason naming the
        holders, or RESUME. A person's DRAIN (incident None) keeps the reason they gave."""
        current = self.runner.node(node)
        owned = _owned(current.reason) if current.state.drained else None
        holders, said = owned if owned is not None else ((), "")
        foreign = f"drained by someone else (reason: {current.reason or 'none given'})"
        change = decide(node, current.state.drained, holders, incident, foreign=foreign)
        if not change.write:
            return change
        if not change.unschedulable:
            self._update_node(node, "State=RESUME")
        elif incident is None and not change.holders:
            self._update_node(node, "State=DRAIN", f"Reason={_reason(reason)}")
        else:
            text = reason.removeprefix(f"{incident}:").strip() if incident and reason else said
            self._update_node(node, "State=DRAIN", f"Reason={_owned_reason(change.holders, text or said)}")
        return change

    def cordon(self, node: str, reason: str, incident: str | None) -> str:
        return self._change(node, incident, reason, on_cordon).detail

    def uncordon(self, node: str, incident: str | None) -> str:
        return self._change(node, incident, "", on_uncordon).detail

    def _jobs_on(self, node: str) -> list[SlurmJob]:
        return [j for j in self.runner.jobs() if node in j.nodes and j.state in ("RUNNING", "SUSPENDED", "CONFIGURING")]

    def drain(self, node: str, reason: str, incident: str | None) -> str:
        drained = self._change(node, incident, reason, on_cordon)
        moved = [self._requeue(job, [node]) for job in self._jobs_on(node)]
        return f"{drained.detail}; requeued jobs: {', '.join(moved) or 'none'}"

    def reboot_node(self, node: str, reason: str) -> str:
        # ASAP: no new jobs, reboot once idle. No nextstate (Slurm only offers RESUME or DOWN): the DRAIN flag the
        # runbook set before survives the reboot, so the node stays out until its diag passes and uncordons it. The
        # reboot's reason becomes the node's: a drain gpufleet holds keeps its holders in it
        current = self.runner.node(node).reason
        said = current if _owned(current) is not None else _reason(reason)
        self.runner.run(["scontrol", "reboot", "ASAP", f"reason={said}", node])
        return f"node {node} reboot requested (ASAP; stays drained afterwards)"

    def run_diag(self, node: str, level: int) -> DiagResult:
        if not self.diag_command:
            raise UnsupportedActionError(
                f"no diag command configured to test {node}",
                fix='configure one, e.g. "ssh {node} dcgmi diag -r {level}"',
            )
        argv = [a.format(node=node, level=level) for a in shlex.split(self.diag_command)]
        try:
            out = self.runner.run(argv)
        except Exception as exc:  # a failing diag exits non-zero: that is a result, not an error
            return DiagResult(False, f"{' '.join(argv)}: {exc}")
        return DiagResult(True, (out.strip().splitlines() or ["exit 0"])[-1][:200])

    def _requeue(self, job: SlurmJob, exclude: list[str]) -> str:
        self.runner.run(["scontrol", "requeue", job.job_id])
        excluded = sorted(set(job.excluded) | set(exclude))
        if excluded:
            self.runner.run(["scontrol", "update", f"JobId={job.job_id}", f"ExcNodeList={','.join(excluded)}"])
        return job.job_id

    def requeue_job(self, job: str, exclude: list[str]) -> str:
        """`job` is a Slurm job id or a job name (every active job of that name is requeued)."""
        jobs = [
            j for j in self.runner.jobs() if job in (j.job_id, j.name) and j.state not in ("COMPLETED", "CANCELLED")
        ]
        if not jobs:
            raise NotFoundError(f"Slurm has no active job {job!r}")
        moved = [self._requeue(j, exclude) for j in jobs]
        return f"requeued job {', '.join(moved)} excluding {', '.join(exclude) or 'no nodes'}"

    def gpu_count(self, node: str) -> int:
        return self.runner.node(node).gpus

    def gpu_model(self, node: str) -> str:
        types = {g.type for g in self.runner.node(node).gres if g.name == "gpu" and g.type}
        return types.pop() if len(types) == 1 else ""

    def write_topology_conf(self, path: Path, text: str, *, retry: bool = False) -> str:
        try:
            if path.read_text() == text:
                if not retry:
                    return ""
                self.runner.run(["scontrol", "reconfigure"])
                return f"{path} held the topology already; reconfigured slurmctld"
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise BackendError(f"cannot read {path}: {exc.strerror or exc}") from None
        try:
            fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        except OSError as exc:
            raise BackendError(f"cannot write beside {path}: {exc.strerror or exc}") from None
        try:
            with os.fdopen(fd, "w") as out:
                out.write(text)
                out.flush()
                os.fsync(out.fileno())
            os.chmod(temp, 0o644)  # slurmctld and every slurmd read it (mkstemp makes it 0600)
            os.replace(temp, path)
        except OSError as exc:
            Path(temp).unlink(missing_ok=True)
            raise BackendError(f"cannot write {path}: {exc.strerror or exc}") from None
        self.runner.run(["scontrol", "reconfigure"])
        lines = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
        return f"wrote {path} ({lines} lines) and reconfigured slurmctld"


__all__ = ["SlurmBackend"]
