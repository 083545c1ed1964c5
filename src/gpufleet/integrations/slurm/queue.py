"""Slurm's queue as the scheduler's view: pending jobs with Slurm's own pending Reason and a readable message, and
per partition the GPUs allocated out of its total, with running and pending job counts.

Jobs come from `squeue -O` (:data:`SQUEUE_QUEUE_ARGS`), GPUs from `scontrol -o -d show node` (`Gres`, `GresUsed`).
A job's GPUs are what it asked for: per node (`--gres=gpu:h100:8`, `--gpus-per-node`) times its nodes, per job
(`--gpus`), or per task (`--gpus-per-task`) times its tasks; a pending array counts each of its waiting tasks. A
partition's quota is its nodes' GPUs, drained and down ones included (what it has, not what is usable now).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from gpufleet.errors import ParseError
from gpufleet.integrations.slurm.client import SlurmNode, SlurmRunner, expand_index_list, gpu_count, parse_gres
from gpufleet.model.observe import PendingWork, QueueUse, SchedulerReport

MANAGER = "slurm"
# `-O Field:|` prints each field unpadded with '|' after it; the name goes last, since only it may contain a '|'.
QUEUE_FIELDS = (
    "JobArrayID", "ArrayTaskID", "State", "Partition", "Account", "tres-per-node", "tres-per-job", "tres-per-task",
    "NumNodes", "NumTasks", "SubmitTime", "PriorityLong", "Reason", "Name",
)  # fmt: skip
SQUEUE_QUEUE_ARGS = (
    "squeue", "-h", "-a", "-t", "PENDING,RUNNING,CONFIGURING", "-O", ",".join(f"{f}:|" for f in QUEUE_FIELDS),
)  # fmt: skip
RUNNING_STATES = frozenset({"RUNNING", "CONFIGURING"})
_NONE = frozenset({"", "N/A", "(null)", "None", "Unknown"})
_GPU_TRES = re.compile(r"^(?:gres[:/])?gpu(?:[:=]|$)")
NAME_MAX = 256


@dataclass(frozen=True, slots=True)
class QueueJob:
    """One line of :data:`SQUEUE_QUEUE_ARGS`."""

    job_id: str  # 1234, or 1234_[1-8] for an array's waiting tasks
    name: str
    state: str  # PENDING, RUNNING, CONFIGURING
    partitions: tuple[str, ...]  # a pending job may name several
    account: str
    gpus: int  # in all, over its nodes, tasks and waiting array tasks
    submitted: float | None
    priority: int | None
    reason: str  # Slurm's, e.g. "Resources" or "ReqNodeNotAvail, UnavailableNodes:gpu-04"

    @property
    def pending(self) -> bool:
        return self.state == "PENDING"


def tres_gpus(text: str) -> int:
    """GPUs in a TRES request as squeue prints it: 'gres:gpu:h100:8' (Slurm 22.05), 'gres/gpu:h100=8',
    'gres/gpu=4', 'gpu:2'; other TRES ('cpu=4', 'gres:nvme:1') count nothing."""
    text = text.strip()
    if text in _NONE:
        return 0
    total = 0
    for part in (p.strip() for p in text.split(",")):
        if not _GPU_TRES.match(part):
            continue
        total += gpu_count(parse_gres(part.replace("=", ":")))
    return total


def _count(text: str, what: str, lineno: int) -> int:
    text = text.strip()
    if text in _NONE:
        return 1
    if not text.isdigit():
        raise ParseError(f"squeue line {lineno}: {what} {text!r} is not a count")
    return int(text)


def _array_tasks(text: str) -> int:
    """'1-3' -> 3, '0-99%4' -> 100 (the throttle limits how many run at once, not how many wait), 'N/A' -> 1."""
    text = text.strip().split("%", 1)[0]
    if text in _NONE:
        return 1
    try:
        return max(1, len(expand_index_list(text)))
    except ParseError:
        return 1  # an id list squeue abbreviated; one is the least it holds


def _submit_time(text: str) -> float | None:
    """squeue prints the client's local time, without a zone: read it as local time too."""
    if text.strip() in _NONE:
        return None
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        return None


def parse_queue(text: str) -> list[QueueJob]:
    """Output of :data:`SQUEUE_QUEUE_ARGS`: one job per line, each field followed by '|'."""
    jobs = []
    width = len(QUEUE_FIELDS)
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        cols = line.removesuffix("|").split("|", width - 1)
        if len(cols) < width:
            raise ParseError(
                f"squeue line {lineno}: expected {width} '|'-separated fields: {line[:80]!r}",
                fix="is this Slurm's squeue? `squeue -O` needs Slurm 20.11 or later",
            )
        job_id, tasks, state, partition, account, per_node, per_job, per_task = (c.strip() for c in cols[:8])
        nodes, ntasks, submitted, priority, reason, name = cols[8:]
        try:
            asked = max(
                tres_gpus(per_node) * _count(nodes, "NumNodes", lineno),
                tres_gpus(per_job),
                tres_gpus(per_task) * _count(ntasks, "NumTasks", lineno),
            )
        except ParseError as exc:
            raise ParseError(f"squeue line {lineno}: {exc.message}", fix=exc.fix) from None
        waiting = _array_tasks(tasks) if state == "PENDING" else 1
        jobs.append(
            QueueJob(
                job_id=job_id,
                name=name.strip(),
                state=state,
                partitions=tuple(p for p in partition.split(",") if p),
                account="" if account in _NONE else account,
                gpus=asked * waiting,
                submitted=_submit_time(submitted),
                priority=int(priority) if priority.strip().isdigit() else None,
                reason=reason.strip(),
            )
        )
    return jobs


# --- what a pending Reason means -----------------------------------------------------------------------------------

REASONS = {
    "Resources": "waiting for resources: not enough free nodes or GPUs for it now",
    "Priority": "waiting behind higher-priority jobs in its partition",
    "ReqNodeNotAvail": "a node it needs is not available (in use, reserved, down, drained or not responding)",
    "NodeDown": "a node it needs is down",
    "Dependency": "waiting for the jobs it depends on",
    "DependencyNeverSatisfied": "its dependency can never be met: cancel it or change the dependency",
    "JobHeldUser": "held by its owner: `scontrol release JOBID` lets it run",
    "JobHeldAdmin": "held by an administrator",
    "BeginTime": "its earliest start time has not come yet",
    "PartitionDown": "its partition is down",
    "PartitionInactive": "its partition is inactive and starts no jobs",
    "PartitionNodeLimit": "it asks for more or fewer nodes than the partition allows now (or its nodes are down)",
    "PartitionTimeLimit": "its time limit is longer than the partition allows",
    "Reservation": "waiting for its advance reservation to start",
    "Licenses": "waiting for a license",
    "BadConstraints": "no node can satisfy its constraints",
    "InvalidAccount": "its account is not valid",
    "InvalidQOS": "its QOS is not valid",
    "Cleaning": "being requeued: still cleaning up after its last run",
    "Prolog": "the controller's prolog is still running for it",
    "None": "not looked at by the scheduler yet",
    "WaitingForScheduling": "not looked at by the scheduler yet",
    "AssociationJobLimit": "its account has as many jobs as it may run",
    "AssociationResourceLimit": "its account has reached a resource limit",
    "AssociationTimeLimit": "its account has reached its time limit",
    "QOSJobLimit": "its QOS has as many jobs as it may run",
    "QOSResourceLimit": "its QOS has reached a resource limit",
    "QOSTimeLimit": "its QOS has reached its time limit",
    "QOSUsageThreshold": "its QOS usage threshold is breached",
}
_LIMIT = re.compile(
    r"^(?P<who>QOS|Assoc)(?P<kind>Grp|Max)(?P<what>[A-Za-z]+?)(?P<per>PerUser|PerAccount|PerJob|PerNode|PerMinute)?"
    r"(?:Limit)?$"
)
_RESOURCES = {
    "GRES": "GRES (GPUs)", "Cpu": "CPUs", "CPU": "CPUs", "Mem": "memory", "Node": "nodes", "Nodes": "nodes",
    "Jobs": "running jobs", "SubmitJob": "submitted jobs", "Wall": "wall time", "Billing": "billing",
    "Energy": "energy", "License": "licenses",
}  # fmt: skip
_PER = {"PerUser": " per user", "PerAccount": " per account", "PerJob": " per job", "PerNode": " per node",
        "PerMinute": " per minute", None: ""}  # fmt: skip


def _resource(what: str) -> str:
    for suffix, words in (("RunMinutes", "running minutes"), ("Minutes", "minutes"), ("RunMins", "running minutes"),
                          ("Mins", "minutes")):  # fmt: skip
        if what.endswith(suffix) and what != suffix:
            return f"{_RESOURCES.get(what[: -len(suffix)], what[: -len(suffix)])}-{words}"
    return _RESOURCES.get(what, what)


def explain(reason: str) -> str:
    """Slurm's pending Reason in words: 'QOSMaxGRESPerUser' -> "its QOS's limit on GRES (GPUs) per user is
    reached"; the detail Slurm adds after a comma (the unavailable nodes) is kept."""
    code, _, detail = reason.partition(",")
    code, detail = code.strip(), detail.strip()
    text = REASONS.get(code)
    if text is None:
        m = _LIMIT.match(code)
        if m:
            owner = "its QOS" if m["who"] == "QOS" else "its account"
            what = _resource(m["what"]) + _PER[m["per"]]
            if m["kind"] == "Grp":
                text = f"{owner} has reached its aggregate limit on {what}"
            elif m["per"] == "PerJob":
                text = f"it asks for more {what} than {owner} allows"
            else:
                text = f"{owner}'s limit on {what} is reached"
        else:
            text = f"pending ({code})" if code else "pending"
    if detail.startswith("UnavailableNodes:"):
        detail = f"unavailable nodes: {detail.removeprefix('UnavailableNodes:')}"
    return f"{text}; {detail}" if detail else text


# --- partitions ----------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class PartitionGpus:
    name: str
    total: int = 0
    used: int = 0
    out: int = 0  # on nodes that take no work (down, drained, not responding)
    running: int = 0
    pending: int = 0
    gpus_pending: int = 0

    def summary(self) -> str:
        out = f", {self.out} on nodes that take no work" if self.out else ""
        return f"partition {self.name}: {self.used} of {self.total} GPUs allocated{out}"


def partition_gpus(nodes: list[SlurmNode]) -> dict[str, PartitionGpus]:
    """Each partition's GPUs from its nodes; a node in two partitions counts in both."""
    parts: dict[str, PartitionGpus] = {}
    for node in nodes:
        for name in node.partitions:
            p = parts.setdefault(name, PartitionGpus(name))
            p.total += node.gpus
            p.used += node.gpus_used
            if not node.state.available:
                p.out += node.gpus - node.gpus_used
    return parts


def scheduler_report(jobs: list[QueueJob], nodes: list[SlurmNode], now: float) -> SchedulerReport:
    """The report from squeue's jobs and scontrol's nodes. Pending work is every pending job that asks for GPUs or
    waits in a partition that has some (a CPU job in a GPU partition holds GPU work up too)."""
    parts = partition_gpus(nodes)
    pending = []
    for job in jobs:
        for name in job.partitions:
            p = parts.setdefault(name, PartitionGpus(name))
            if job.pending:
                p.pending += 1
                p.gpus_pending += job.gpus
            elif job.state in RUNNING_STATES:
                p.running += 1
        if not job.pending or not (job.gpus or any(parts[n].total for n in job.partitions)):
            continue
        message = explain(job.reason)
        code = job.reason.partition(",")[0].strip()
        if code in ("Resources", "Priority") and job.partitions:
            message += f" ({parts[job.partitions[0]].summary()}; it asks for {job.gpus})"
        pending.append(
            PendingWork(
                name=f"{job.job_id} {job.name}".strip()[:NAME_MAX],
                queue=",".join(job.partitions)[:NAME_MAX],
                namespace=job.account[:NAME_MAX],
                gpus=job.gpus,
                since=min(job.submitted, now) if job.submitted is not None and job.submitted >= 0 else None,
                reason=code[:NAME_MAX],
                message=message,
                priority=job.priority,
            )
        )
    queues = [
        QueueUse(
            name=p.name,
            gpus_used=p.used,
            gpus_pending=p.gpus_pending,
            quota=p.total,
            pending=p.pending,
            running=p.running,
        )
        for p in sorted(parts.values(), key=lambda p: p.name)
        if p.total or p.gpus_pending
    ]
    return SchedulerReport(manager=MANAGER, time=now, pending=pending, queues=queues)


class SlurmQueueReader:
    """Reads the queue and the nodes through one :class:`SlurmRunner` (its SLURM_CONF, timeouts, errors)."""

    def __init__(self, runner: SlurmRunner | None = None, clock: Callable[[], float] = time.time) -> None:
        self.runner = runner or SlurmRunner()
        self.clock = clock

    def jobs(self) -> list[QueueJob]:
        return parse_queue(self.runner.run(SQUEUE_QUEUE_ARGS))

    def read(self) -> SchedulerReport:
        jobs = self.jobs()
        return scheduler_report(jobs, self.runner.nodes(), self.clock())
