"""NCCL's RAS status report judged: which processes and ranks are dead, missing, failed or out of step.

What each section means comes from NCCL's own guide (docs/userguide/source/troubleshooting/ras.rst, NVIDIA/nccl
v2.30.7-1) and the code that prints it (src/ras/client_support.cc):

- DEAD: RAS could not reach the process for 60 s and gave up on it: the process (or its node) is gone. Critical,
  the process, its node and GPU are the entity.
- ERROR: ranks reported an initialization or asynchronous error (ncclResult_t): the communicator is broken on
  them. Critical.
- INCOMPLETE: processes or ranks that did not answer this query: unresponsive now (hung, stopped, overloaded), dead
  only if it lasts. A warning naming them.
- MISMATCH: ranks of one communicator in different states, or at different collective operation counts. The guide:
  a snapshot of collectives racing the query is normal, and so is a communicator being torn down; if repeated
  queries show the same counts, the communicator is stuck, and the ranks behind are the suspects. A warning naming
  the ranks behind where RAS printed them; the ranks RAS printed otherwise.
- TIMEOUT: the query itself timed out on some connections: a note beside the others, a warning alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpufleet.model import Severity
from gpufleet.parsers.nccl.ras import RasCommIssue, RasProcess, RasRank, RasStatus, RasValueGroup

MAX_NAMED = 8  # processes or ranks named in one entity before "and N more"

FIX_DEAD = (
    "the process or its node is gone: read that node's kernel log and the rank's own output for its first error "
    "(OOM killer, Xid, a crash); restart the job without the node if it is down"
)
FIX_ERROR = "read the failing ranks' NCCL log (NCCL_DEBUG=INFO) for the WARN that set the error; `gpufleet triage` it"
FIX_MISSING = (
    "query RAS again: a process that stays missing is hung or stopped (py-spy dump it, check its node); RAS declares "
    "it dead after 60 s"
)
FIX_MISMATCH = (
    "query RAS again: counts that move are collectives racing the query; counts that stay put mean the communicator "
    "is stuck and the ranks behind never called the next collective (py-spy dump them, look for a rank-divergent "
    "code path)"
)
FIX_TIMEOUT = "query again with a longer timeout (ncclras -t 30); persistent timeouts point at an unresponsive process"


@dataclass(frozen=True, slots=True)
class RasFinding:
    severity: Severity
    code: str
    message: str
    entity: str
    fix: str
    evidence: list[str] = field(default_factory=list)


def _listed(names: list[str], total: int | None = None) -> str:
    shown = ", ".join(names[:MAX_NAMED])
    more = max(len(names), total or 0) - min(len(names), MAX_NAMED)
    return shown + (f" and {more} more" if more > 0 else "")


def _process(p: RasProcess) -> str:
    return f"process {p.pid} on {p.node} (GPU {p.gpus})"


def _rank(r: RasRank) -> str:
    where = f" (GPU {r.gpu}, process {r.pid} on {r.node})" if r.node else ""
    return f"rank {r.rank}{where}"


def _behind(issue: RasCommIssue) -> tuple[list[RasValueGroup], list[RasValueGroup]]:
    """Operation-count groups split into those behind the furthest count and the furthest."""

    def count(g: RasValueGroup) -> int:
        return -1 if g.value == "none" else int(g.value) if g.value.isdigit() else -1

    top = max((count(g) for g in issue.groups), default=-1)
    return [g for g in issue.groups if count(g) < top], [g for g in issue.groups if count(g) == top]


def judge_ras(status: RasStatus) -> list[RasFinding]:
    """Findings for one RAS report; an empty list when every communicator is RUNNING and OK."""
    found: list[RasFinding] = []
    if status.dead_processes or status.dead_count:
        names = [_process(p) for p in status.dead_processes] or ["processes RAS did not list"]
        found.append(
            RasFinding(
                Severity.critical,
                "ras dead",
                f"{status.dead_count or len(status.dead_processes)} "
                "job process(es) considered dead (unreachable via the RAS network for 60 s)",
                _listed(names, status.dead_count),
                FIX_DEAD,
                [f"Process {p.pid} on node {p.node} managing GPU {p.gpus}" for p in status.dead_processes][:MAX_NAMED],
            )
        )
    for issue in status.issues:
        if issue.kind == "ERROR":
            ranks = [r for g in issue.groups for r in g.ranks]
            kinds = sorted({g.value for g in issue.groups if g.value})
            found.append(
                RasFinding(
                    Severity.critical,
                    "ras error",
                    f"communicator {issue.name}: {issue.detail or 'errors'} on {issue.count or len(ranks)} "
                    f"rank(s){': ' + ', '.join(kinds) if kinds else ''}",
                    _listed([_rank(r) for r in ranks], issue.count) or issue.name,
                    FIX_ERROR,
                    issue.lines[:MAX_NAMED],
                )
            )
    dead_pids = {(p.pid, p.node) for p in status.dead_processes}
    missing = [p for p in status.missing_processes if (p.pid, p.node) not in dead_pids]
    if missing or (status.missing_process_count and not status.missing_processes):
        found.append(
            RasFinding(
                Severity.warning,
                "ras incomplete",
                f"{status.missing_process_count or len(missing)} job process(es) did not answer the "
                "query (unresponsive now; dead only if it lasts)",
                _listed([_process(p) for p in missing], status.missing_process_count) or "job",
                FIX_MISSING,
                [f"Process {p.pid} on node {p.node} managing GPU {p.gpus}" for p in missing][:MAX_NAMED],
            )
        )
    for issue in status.issues:
        if issue.kind == "INCOMPLETE":
            found.append(
                RasFinding(
                    Severity.warning,
                    "ras incomplete",
                    f"communicator {issue.name}: no data from {issue.count or len(issue.ranks)} rank(s)",
                    _listed([_rank(r) for r in issue.ranks], issue.count) or issue.name,
                    FIX_MISSING,
                    issue.lines[:MAX_NAMED],
                )
            )
        elif issue.kind == "MISMATCH":
            found.append(_mismatch(issue))
    detailed = {issue.group for issue in status.issues}
    for group in status.groups:
        if group.status == "ABORT":
            found.append(
                RasFinding(
                    Severity.warning,
                    "ras abort",
                    f"group {group.group}: {group.comms} communicator(s) of {group.ranks_per_comm} ranks aborting",
                    f"group {group.group}",
                    FIX_ERROR,
                )
            )
        if group.errors != ("OK",) and group.group not in detailed and status.form == "text":
            found.append(
                RasFinding(
                    Severity.warning,
                    "ras " + group.errors[0].lower(),
                    f"group {group.group}: {group.comms} communicator(s) of {group.ranks_per_comm} "
                    f"ranks report {','.join(group.errors)}; their details are not in the text",
                    f"group {group.group}",
                    FIX_MISMATCH if "MISMATCH" in group.errors else FIX_MISSING,
                )
            )
    if status.timeouts and not found:
        found.append(
            RasFinding(
                Severity.warning,
                "ras timeout",
                f"{status.timeouts} communication timeout(s) while "
                "RAS gathered the report: some process answers slowly or not at all",
                "RAS network",
                FIX_TIMEOUT,
            )
        )
    for event in status.events:
        if event.event == "PEER_DEAD":
            proc = event.process
            found.append(
                RasFinding(
                    Severity.critical,
                    "ras dead",
                    f"RAS declared a peer dead at {event.time}",
                    _process(proc) if proc else "a peer RAS could not name",
                    FIX_DEAD,
                    [event.line],
                )
            )
    return found


def _mismatch(issue: RasCommIssue) -> RasFinding:
    what = issue.detail or "state"
    if "operation counts" in what:
        behind, ahead = _behind(issue)
        listed_behind = [r for g in behind for r in g.ranks]
        counts = "; ".join(
            f"{g.count} rank(s) at {'no operation' if g.value == 'none' else 'operation ' + g.value}"
            for g in issue.groups
        )
        if listed_behind:
            entity = _listed([_rank(r) for r in listed_behind], sum(g.count for g in behind))
            who = "the ranks behind are named"
        else:
            named_ahead = [_rank(r) for g in ahead for r in g.ranks]
            entity = (
                (
                    f"{sum(g.count for g in behind)} rank(s) behind in {issue.name} (RAS lists only "
                    f"{_listed(named_ahead)}, which are ahead)"
                )
                if named_ahead
                else issue.name
            )
            who = "RAS did not list the ranks behind"
        message = f"communicator {issue.name}: ranks at different {what} ({counts}); {who}"
    else:
        ranks = [r for g in issue.groups for r in g.ranks]
        states = "; ".join(f"{g.count} rank(s) {g.value}" for g in issue.groups)
        entity = _listed([_rank(r) for r in ranks]) or issue.name
        message = f"communicator {issue.name}: ranks in different states ({states})"
    return RasFinding(Severity.warning, "ras mismatch", message, entity, FIX_MISMATCH, issue.lines[:MAX_NAMED])
