"""`gpufleet preflight`: what the `gpufleet-preflight` init container runs before a GPU pod starts.

It runs `gpufleet diag -r 1`'s checks on the GPUs the container was given (the same GPUs as the pod's app
containers: see integrations/kubernetes/admission.py) and, for a pod of a gang, a short NCCL all-reduce over them
(nccl-tests' `all_reduce_perf`, judged as `gpufleet nccl compare` judges a run). On a failure it reports the node,
the check and its output to the control plane (`POST /api/v1/preflight/failures`, which opens an incident on the
node) and exits 1 with a line that names the node and the check, so the pod fails before its job starts. A check
that cannot run (no dcgmi or host engine, no all_reduce_perf in the image) is not a GPU failure: it is said and the
pod goes on.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import typer

from gpufleet.cli.output import console
from gpufleet.errors import BackendError, GpufleetError, ParseError, UserError

TERMINATION_LOG = Path("/dev/termination-log")  # what `kubectl describe pod` shows for a failed container
ALLREDUCE_TIMEOUT_S = 120
ALLREDUCE_ARGS = ("-b", "8", "-e", "64M", "-f", "4", "-c", "1")  # small to 64 MiB, data checked (-c 1): seconds


@dataclass(frozen=True, slots=True)
class Outcome:
    check: str  # dcgm-diag, nccl-allreduce
    status: str  # Pass, Warn, Fail, Unknown
    detail: str
    output: str = ""


def diag_outcome(level: int, node: str, dcgmi_output: Path | None = None) -> Outcome:
    """`gpufleet diag -r <level>` on this container's GPUs (or a saved `dcgmi diag` output), as one outcome."""
    from gpufleet.health.diag import judge
    from gpufleet.parsers.nvidia.dcgmi_diag import read_diag

    try:
        if dcgmi_output is not None:
            from gpufleet.cli.inputs import read_input_lines
            from gpufleet.triage.paste import Paste

            lines = Paste().cleaned(read_input_lines(dcgmi_output)[0])
            report = read_diag(lines, source=str(dcgmi_output))
            report.level = max(level, report.level or 1)
        else:
            from gpufleet.sources.gpu.dcgmi import run_dcgmi

            report = run_dcgmi(level)
    except BackendError as exc:
        return Outcome("dcgm-diag", "Unknown", f"{exc.message} ({exc.fix})" if exc.fix else exc.message)
    outcome = judge(report, node, report.level or level)
    checks = [f"{c.name}: {c.status}: {c.detail}" for c in outcome.checks]
    failures = outcome.failures()
    detail = "; ".join(failures) if failures else f"verdict {outcome.verdict}"
    return Outcome("dcgm-diag", outcome.verdict, detail, "\n".join([f"verdict: {outcome.verdict}", *checks]))


def allreduce_outcome(gpus: int, output: str | None = None, returncode: int = 0) -> Outcome:
    """A short all-reduce over this container's GPUs with nccl-tests' all_reduce_perf (or judge a saved output):
    a run that stops on an error or whose results are corrupted fails."""
    from gpufleet.nccl.compare import judge_run
    from gpufleet.nccl.perf_parser import parse_perf_runs

    if output is None:
        binary = shutil.which("all_reduce_perf")
        if binary is None:
            return Outcome("nccl-allreduce", "Unknown", "all_reduce_perf (nccl-tests) is not in this image")
        command = [binary, *ALLREDUCE_ARGS, "-g", str(max(gpus, 1))]
        try:
            proc = subprocess.run(command, capture_output=True, text=True, timeout=ALLREDUCE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return Outcome(
                "nccl-allreduce", "Fail", f"all_reduce_perf did not finish within {ALLREDUCE_TIMEOUT_S} s (a hang)"
            )
        output, returncode = proc.stdout + proc.stderr, proc.returncode
    try:
        runs = parse_perf_runs(output.splitlines())
    except ParseError:  # not an nccl-tests output at all
        runs = []
    if not runs:
        if returncode != 0:
            return Outcome("nccl-allreduce", "Fail", f"all_reduce_perf exited {returncode}", output)
        return Outcome("nccl-allreduce", "Unknown", "all_reduce_perf printed no result table", output)
    judgement = judge_run(runs[-1], default_op="all_reduce")
    causes = [c.message for c in judgement.issues]
    if judgement.verdict == "failed" or returncode != 0:
        detail = "; ".join(causes) or f"all_reduce_perf exited {returncode}"
        return Outcome("nccl-allreduce", "Fail", detail, output)
    return Outcome("nccl-allreduce", "Pass", f"{len(runs[-1].rows)} sizes, results checked", output)


def report(node: str, outcome: Outcome, pod: str, gang: str) -> str:
    """POST the failure to the control plane; the incident's id. Tried a few times: only the replica that leads
    opens incidents, and each try may reach another through the Service."""
    from gpufleet.cli.client import Api

    _trust_given_ca()
    api = Api()
    if api.token() is None:
        raise UserError(
            "no token to report the failure with",
            fix="create the preflight token Secret in this namespace (see the chart's preflight.token values)",
        )
    body = {"node": node, "check": outcome.check, "output": outcome.output or outcome.detail, "pod": pod, "gang": gang}
    last: GpufleetError | None = None
    for _ in range(5):
        try:
            answer = api.post("/api/v1/preflight/failures", body)
            return str((answer or {}).get("incident", ""))
        except UserError as exc:
            if "does not lead" not in exc.message:
                raise
            last = exc
    assert last is not None
    raise last


def _trust_given_ca() -> None:
    """$GPUFLEET_CA_PEM (the control plane's CA, which the webhook hands the init container) as the CA file the
    standard library's TLS checks the server with."""
    pem = os.environ.get("GPUFLEET_CA_PEM", "").strip()
    if not pem:
        return
    with tempfile.NamedTemporaryFile("w", suffix=".pem", delete=False) as handle:
        handle.write(pem + "\n")
    os.environ["SSL_CERT_FILE"] = handle.name


def _say_failed(node: str, outcome: Outcome, reported: str) -> str:
    line = f"GPU preflight failed on node {node}: {outcome.check}: {outcome.detail}"
    if reported:
        line += f" (reported: {reported})"
    with contextlib.suppress(OSError):  # not in a container: the printed line is enough
        TERMINATION_LOG.write_text(line[:4000], encoding="utf-8")
    return line


def preflight(
    node: str = typer.Option(..., "--node", envvar="NODE_NAME", help="The node this pod was placed on."),
    pod: str = typer.Option("", "--pod", help="namespace/name of the pod, for the report."),
    gang: str = typer.Option("", "--gang", help="The pod's gang (e.g. JobSet/train): also run the NCCL all-reduce."),
    gang_size: int | None = typer.Option(None, "--gang-size", help="How many pods the gang has, when known."),
    gpus: int = typer.Option(
        0, "--gpus", envvar="GPUFLEET_PREFLIGHT_GPUS", help="The GPUs this container was given (all_reduce_perf -g)."
    ),
    level: int = typer.Option(1, "-r", "--run-level", help="The dcgmi diag run level (1 quick; 2 and 3 take long)."),
    no_report: bool = typer.Option(False, "--no-report", help="Fail without telling the control plane."),
    dcgmi_output: Path | None = typer.Option(None, "--dcgmi-output", help="Judge a saved `dcgmi diag` output."),
    allreduce_output: Path | None = typer.Option(
        None, "--allreduce-output", help="With --gang: judge a saved all_reduce_perf output instead of running it."
    ),
) -> None:
    """Check this pod's GPUs before its job starts (the preflight init container): dcgmi diag, and an NCCL
    all-reduce for a gang's pod. A failure is reported to the control plane, which opens an incident on the node.

    Exit status: 0 passed (or a check could not run), 1 a check failed."""
    if level not in (1, 2, 3):
        raise UserError(f"-r {level}", fix="use -r 1, 2 or 3")
    outcomes = [diag_outcome(level, node, dcgmi_output)]
    if gang:
        saved = allreduce_output.read_text(encoding="utf-8", errors="replace") if allreduce_output else None
        outcomes.append(allreduce_outcome(gpus, saved))
    for outcome in outcomes:
        console.print(f"{outcome.check}: {outcome.status}: {outcome.detail}", highlight=False, markup=False)
    failed = next((o for o in outcomes if o.status == "Fail"), None)
    if failed is None:
        where = f" ({gang}, {gang_size} pods)" if gang and gang_size else f" ({gang})" if gang else ""
        console.print(f"GPU preflight passed on node {node}{where}", highlight=False, markup=False)
        return
    reported = ""
    if not no_report and (os.environ.get("GPUFLEET_SERVER") or os.environ.get("GPUFLEET_TOKEN")):
        try:
            reported = report(node, failed, pod, gang) or "no incident"
        except GpufleetError as exc:  # the pod fails all the same; say why the report did not go
            reported = f"not reported: {exc.message}"
    console.print(_say_failed(node, failed, reported), style="red", highlight=False, markup=False)
    raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command()(preflight)
