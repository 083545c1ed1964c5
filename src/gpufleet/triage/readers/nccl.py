"""NCCL logs, diagnosed against the catalog of NCCL's own messages; nccl-tests runs, judged as `gpufleet nccl
compare` judges them; NCCL's RAS status reports, judged by health.nccl_ras."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from gpufleet.model import Severity
from gpufleet.triage.readers.common import MAX_FINDINGS, MAX_TEXT, bounded_text
from gpufleet.triage.report import TriageFinding, TriageReport

if TYPE_CHECKING:
    from gpufleet.nccl.compare import RunJudgement


def read_nccl_log(lines: Iterable[str], source: str) -> TriageReport:
    from gpufleet.nccl.diagnose import diagnose_texts

    report = TriageReport("nccl-log", source)
    dx = diagnose_texts([(source, bounded_text(lines, report))])
    if dx.cls == "unknown":
        report.judged = False
        report.notes.append(dx.summary)
        if dx.evidence:
            report.findings.append(TriageFinding("nccl", Severity.info, dx.summary, code="unknown", fix=dx.fix,
                                                 evidence=dx.evidence))  # fmt: skip
        return report
    where = ", ".join([*(f"rank {r}" for r in dx.ranks), *dx.hosts])
    report.findings.append(TriageFinding("nccl", Severity.critical, dx.summary, where, dx.cls, dx.fix, dx.evidence))
    if dx.also_seen:
        report.notes.append(f"also seen (symptoms of the cause, or secondary): {', '.join(dx.also_seen)}")
    return report


MAX_RUNS_JUDGED = 20  # runs in one input judged one by one; more are counted in a note
CHECK = "nccl-tests"
FIXES = {
    "data_corruption": "drain the hosts of this run; run `dcgmi diag -r 3` on each and rerun nccl-tests on fewer GPUs "
    "to find the GPU or link that corrupts data",
    "run_failed": "read the error above (rerun with NCCL_DEBUG=INFO and give that log to `gpufleet triage`)",
    "avg_below_target": "compare the run with the fabric's expectation (`gpufleet nccl compare`)",
    "rail_missing": "check every NIC is up and listed in NCCL_IB_HCA (`ibstat`), and that each GPU has its rail",
    "wrong_transport": "check NCCL_IB_DISABLE / NCCL_P2P_DISABLE and that NVLink / GPUDirect RDMA are up",
    "low_peak": "check link speeds (`nvidia-smi nvlink -s`, `nvidia-smi -q -d PCIE`, `ibstat`) and clock throttling",
    "mid_size_dip": "unset forced NCCL_PROTO / NCCL_ALGO / NCCL_MAX_NCHANNELS and rerun",
    "high_latency": "check rank-to-CPU binding and NUMA placement; rerun with `--bind-to numa`",
}


def read_nccl_tests(lines: Iterable[str], source: str) -> TriageReport:
    """nccl-tests output (all_reduce_perf and friends), judged as `gpufleet nccl compare` judges it: corrupted
    results and a run that stopped are faulty, bandwidth below the model's expectation is degraded, and output that
    ends before nccl-tests' closing lines is not a whole run."""
    from gpufleet.nccl.compare import judge_run
    from gpufleet.nccl.perf_parser import PerfParser

    report = TriageReport("nccl-tests", source)
    parser = PerfParser()
    size = 0
    for line in lines:  # streamed: only the rows are held
        size += len(line) + 1
        if size > MAX_TEXT:
            report.notes.append(f"only the first {MAX_TEXT // (1024 * 1024)} MiB were read")
            report.complete = False
            break
        parser.feed(line)
    runs = parser.finish()
    judged = False
    for number, table in enumerate(runs[:MAX_RUNS_JUDGED], 1):
        name = f"run {number} ({table.op or 'test not named'})" if len(runs) > 1 else ""
        judged |= _present(judge_run(table), name, report)
    if len(runs) > MAX_RUNS_JUDGED:
        report.notes.append(f"{len(runs) - MAX_RUNS_JUDGED} more run(s) were not judged")
        report.complete = False
    report.judged = judged
    del report.findings[MAX_FINDINGS:]
    return report


def _present(j: RunJudgement, name: str, report: TriageReport) -> bool:
    """Findings and notes for one judged run; True when something about it could be judged."""
    table = j.table
    prefix = f"{name}: " if name else ""
    entity = ", ".join(table.hosts[:4]) + (f" and {len(table.hosts) - 4} more" if len(table.hosts) > 4 else "")
    if name:
        entity = f"{name}, {entity}" if entity else name
    row_lines = {r.bytes: r.line for r in table.rows}
    for cause in j.causes:
        severity: Severity = Severity.critical if cause.code in ("data_corruption", "run_failed") else Severity.warning
        if cause.code == "data_corruption":
            evidence = [r.line for r in table.wrong_rows] + [table.out_of_bounds_line]
        elif cause.code == "run_failed":
            evidence = (table.last_errors or table.errors)[:6] + ([table.rows[-1].line] if table.rows else [])
        elif cause.code == "avg_below_target":
            evidence = [table.footer or ""]
        elif j.result is not None or j.own is not None:
            sizes = j.result.flagged_sizes if j.result is not None else _own_sizes(j, cause.code)
            flagged = [row_lines.get(n, "") for n in sizes]
            evidence = flagged[:4] + flagged[-4:] if len(flagged) > 8 else flagged
        else:
            evidence = []
        code = {"data_corruption": "#wrong", "run_failed": "run stopped"}.get(cause.code, cause.code)
        if cause.code == "data_corruption" and not table.wrong_rows:
            code = "out of bounds values"
        fix = FIXES.get(cause.code, "")
        message = cause.message
        if cause.code == "run_failed":
            message, fix = _diagnosed(table.errors, message, fix)
        report.findings.append(TriageFinding(CHECK, severity, message, entity, code, fix, [e for e in evidence if e]))
    if table.truncated:
        report.complete = False
        report.notes.append(
            f"{prefix}the output ends before nccl-tests' closing '# Avg bus bandwidth' line: cut short, or the run "
            "did not finish"
        )
    if j.inferred.read:
        report.notes.append(f"{prefix}read from the output: {', '.join(j.inferred.read)}")
    for fact in j.assumed:
        report.notes.append(f"{prefix}assumed: {fact}")
    if table.zero_rows:
        report.notes.append(f"{prefix}{table.zero_rows} 0-byte row(s) read and left out: nothing moves at that size")
    if table.wrong_column == "off":
        report.notes.append(f"{prefix}#wrong is N/A: the data check was off (-c 0), so corruption was not checked")
    elif table.wrong_column == "delta" and table.out_of_bounds is None:
        report.notes.append(f"{prefix}the error column (nccl-tests before 2.13) is a difference, not a count of "
                            "wrong elements, and the output has no 'Out of bounds values' line")  # fmt: skip
    result, topo = j.result, j.topology
    if (result is None or topo is None) and j.own is not None and j.judged_by_itself:
        flags = f" (`gpufleet nccl compare` can be told: {j.fix})" if "--" in j.fix else ""
        report.notes.extend(f"{prefix}{note}{flags if i == 0 else ''}" for i, note in enumerate(j.own.notes))
        if table.rows and table.wrong_column == "count" and not j.issues:
            report.notes.append(f"{prefix}no corrupted results: #wrong is 0 on every row read")
        return True
    if result is None or topo is None:
        flags = f" (`gpufleet nccl compare` can be told: {j.fix})" if "--" in j.fix else ""
        report.notes.append(f"{prefix}bandwidth not judged: {j.not_judged}{flags}")
        if j.own is not None and j.own.peak is not None:
            report.notes.extend(f"{prefix}{note}" for note in j.own.notes[1:])
        if table.rows and table.wrong_column == "count" and not j.issues:
            report.notes.append(f"{prefix}no corrupted results: #wrong is 0 on every row read")
        return bool(j.issues)
    if result.median_ratio_bandwidth_region is not None:
        report.notes.append(
            f"{prefix}bus bandwidth from 256 MiB up is {result.median_ratio_bandwidth_region:.0%} of the expected for "
            f"{topo.nranks} x {topo.gpu} on {topo.nodes} node(s) ({j.op}, NCCL {topo.nccl_version} model)"
        )
    elif not result.rows:
        report.notes.append(f"{prefix}no row large enough to compare with the model")
        return bool(j.issues)
    return True


def _diagnosed(errors: list[str], message: str, fix: str) -> tuple[str, str]:
    """The stop explained by NCCL's own messages among the error lines, when they name a known failure."""
    from gpufleet.nccl.diagnose import diagnose_texts

    dx = diagnose_texts([("nccl-tests", "\n".join(errors))])
    if dx.cls == "unknown":
        return message, fix
    return f"{message} ({dx.cls}: {dx.summary})", dx.fix or fix


def _own_sizes(j: RunJudgement, code: str) -> list[int]:
    """The rows behind a cause found against the run's own peak: the sizes that sag, or the peak's size."""
    own = j.own
    if own is None or own.peak is None:
        return []
    if code == "low_peak":
        return own.sizes
    return [max((r for r in j.table.rows if r.busbw == own.peak), key=lambda r: r.bytes).bytes]


def read_nccl_ras(lines: Iterable[str], source: str) -> TriageReport:
    """An `ncclras` report: dead, missing, failed and out-of-step ranks, each named by rank, process, node and GPU."""
    from gpufleet.health.nccl_ras import judge_ras
    from gpufleet.parsers.nccl.ras import parse_ras_status

    report = TriageReport("nccl-ras", source)
    status = parse_ras_status(bounded_text(lines, report))
    if status.form == "text" and "Communicators" not in status.sections:
        report.complete = False
        report.notes.append("the report has no communicator table: cut before `Communicators...`, so not every "
                            "communicator was seen")  # fmt: skip
    elif (
        status.form == "text"
        and not {"Errors", "Warnings"} & status.sections
        and any(g.errors != ("OK",) for g in status.groups)
    ):
        report.notes.append("the report ends before its Errors section: the groups' details are not in it")
    if status.nccl_version:
        report.notes.append(f"NCCL {status.nccl_version}")
    if status.gpus is not None:
        report.notes.append(f"job: {status.gpus} GPU(s) in {status.processes} process(es) on {status.nodes} node(s)")
    for node, pids in status.outlier_nodes:
        report.notes.append(f"outlier node {node} (processes {pids}): runs a different number of processes")
    for f in judge_ras(status):
        report.findings.append(TriageFinding("nccl-ras", f.severity, f.message, f.entity, f.code, f.fix, f.evidence))
    if status.form == "monitor" and not report.findings:
        report.notes.append("monitor-mode events only, none a dead peer")
    del report.findings[MAX_FINDINGS:]
    return report
