"""NCCL's own log (NCCL_DEBUG=INFO/WARN, and PyTorch's ProcessGroupNCCL around it), nccl-tests' output and NCCL's
RAS status report (`ncclras`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpufleet.nccl.perf_parser import PerfTable, parse_perf_runs
from gpufleet.parsers.nccl.ras import RasStatus, parse_ras_status
from gpufleet.triage.formats.registry import Format, Table, View
from gpufleet.triage.readers.nccl import read_nccl_log, read_nccl_ras, read_nccl_tests

if TYPE_CHECKING:
    from gpufleet.nccl.diagnose import LogLine


def _parse_nccl_log(text: str, source: str) -> list[LogLine]:
    from gpufleet.nccl.diagnose import read_lines  # its catalogue is compiled on import: only when a log is read

    return read_lines(text, source)


NCCL_LOG = Format(
    name="nccl-log",
    summary="An NCCL log (`NCCL_DEBUG=INFO` or `WARN`), or a PyTorch log around one: what failed, on which ranks",
    signs=(
        (r"NCCL (?:INFO|WARN)\b", 8),
        # NCCL before 2.1 printed `host:pid:tid [dev] INFO ...` without its name
        (r"^[\w.-]+:\d+:\d+ \[\d+\] (?:INFO|WARN) ", 8),
        (r"\bNCCL version \d+\.\d+\.\d+", 4),
        (r"ProcessGroupNCCL|Watchdog caught collective operation timeout", 6),
        # NCCL's own text where a wrapper or a person quotes it without the `NCCL INFO/WARN` prefix: its result
        # strings through a framework ("NCCL error: unhandled system error", PyTorch; "Last NCCL warning(error)",
        # XLA), its API calls failing, its error codes, its shared-memory segments (/dev/shm/nccl-XXXXXX,
        # misc/shmutils.cc) and its subsystem tags (bootstrap.cc, transport/net_ib.cc, net_socket.cc);
        # NVIDIA/nccl v2.19.3-1 .. v2.30.7-1
        (r"\bNCCL error\b|Last NCCL (?:warning|error)|\bncclCommInit\w*(?:\(.*\))? failed", 6),
        (r"\bnccl(?:SystemError|InternalError|InvalidUsage|InvalidArgument|UnhandledCudaError|RemoteError)\b", 6),
        (r"/dev/shm/nccl-|\b(?:Bootstrap|NET/IB|NET/Socket|NET/OFI|NET/Plugin) : |\bncclSocket\w+: ", 6),
    ),
    parse=_parse_nccl_log,
    judge=read_nccl_log,
    keeps_launchers=True,
)


def _parse_nccl_tests(text: str, source: str) -> list[PerfTable]:
    return parse_perf_runs(text.splitlines())


NCCL_TESTS = Format(
    name="nccl-tests",
    summary="nccl-tests output (`all_reduce_perf` and the others): each run's sizes, times and bus bandwidth",
    signs=(
        (r"^#? ?nThread \d+ nGpus \d+", 10),
        (r"^#?\s+(?:size\s+count\s+type|\(B\)\s+\(elements\))", 8),
        (r"^#? ?Avg bus bandwidth\s*:", 8),
        (r"out-of-place\s+in-place", 6),
        (r"^# (?:nccl-tests version|Collective test (?:starting|concluded):)", 10),
        (r"^#? ?Out of bounds values\s*:", 6),
        (r"^#?\s+Rank\s+\d+\s+(?:Group\s+\d+\s+)?(?:Pid\s+\d+\s+)?on\s+\S+\s+device\s+\d+\s+\[", 8),
        # a row: size, count, type, redop, root, then time and bandwidths
        (
            r"^\s*\d+\s+\d+\s+(?:u?int(?:8|32|64)?|half|b?float(?:16)?|double|char|f8e[45]m[23])\s+"
            r"(?:(?:sum|prod|max|min|avg|mulsum|none)\s+)?-?\d+\s+\d+(?:\.\d+)?\s+\d+\.\d+\s",
            8,
        ),
    ),
    parse=_parse_nccl_tests,
    judge=read_nccl_tests,
)


def _parse_nccl_ras(text: str, source: str) -> RasStatus:
    return parse_ras_status(text)


def _render_nccl_ras(status: RasStatus, source: str) -> View:
    groups = Table(
        ("Group", "Comms", "Nodes", "Ranks/node", "Ranks/comm", "Status", "Errors"),
        [[g.group, g.comms, g.nodes, g.ranks_per_node, g.ranks_per_comm, g.status, ",".join(g.errors)]
         for g in status.groups],
        title=f"{source}: NCCL {status.nccl_version or '?'} RAS report",
    )  # fmt: skip
    rows: list[list[object]] = [["DEAD", "job", f"process {p.pid} on {p.node}", p.gpus] for p in status.dead_processes]
    rows += [["INCOMPLETE", "job", f"process {p.pid} on {p.node}", p.gpus] for p in status.missing_processes]
    for issue in status.issues:
        ranks = issue.ranks or [r for g in issue.groups for r in g.ranks]
        detail = issue.detail or ", ".join(f"{g.count} at {g.value}" for g in issue.groups)
        rows.append([issue.kind, issue.name, ", ".join(str(r.rank) for r in ranks[:20]) or "-", detail])
    rows += [[e.event, e.time, f"process {e.process.pid} on {e.process.node}" if e.process else "-", ""]
             for e in status.events]  # fmt: skip
    problems = Table(("Kind", "Where", "Ranks / processes", "Detail"), rows, title="problems")
    return View((groups, problems) if rows else (groups,))


NCCL_RAS = Format(
    name="nccl-ras",
    summary="NCCL's RAS status report (`ncclras`, NCCL 2.24+; text, monitor or JSON): dead, missing and out-of-step "
    "ranks",
    # NVIDIA/nccl src/ras/client_support.cc, v2.24.3-1 .. v2.30.7-1
    signs=(
        (r"^Group\s+Comms\s+Nodes\s+Ranks\s+Ranks\s+Ranks\s+Status\s+Errors", 10),
        (r"^#\d+-\d+ \([0-9a-f]{8,16}\) (?:MISMATCH|INCOMPLETE|ERROR)\s*$", 10),
        (r"^Communicators\.\.\. \(\d+\.\d+s\)", 8),
        (r"considered dead \(unreachable via the RAS network\)", 10),
        (r"^\s*Rank \d+ (?:-- GPU .+|has .+ -- GPU .+) managed by process \d+ on node ", 8),
        (r"^RAS Monitor Mode|^\[[\d-]+ [\d:]+\] PEER_(?:DEAD|NEW|CONNECTING): ", 10),
        (r"^Job summary\s*$", 4),
        (r'^\s*"secondary_hash":', 4),  # the JSON form (2.28.7+)
        (r'^\s*"(?:missing_ranks_count|considered_dead|unresponsive)":', 4),
    ),
    parse=_parse_nccl_ras,
    judge=read_nccl_ras,
    render=_render_nccl_ras,
)
