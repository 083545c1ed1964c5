"""`gpufleet diag`: node health checks at DCGM's run levels."""

from __future__ import annotations

from pathlib import Path

import typer

from gpufleet.cli.inputs import read_input_lines
from gpufleet.cli.output import OUTPUT_HELP, OutputFormat, console, emit, make_table
from gpufleet.errors import BackendError, UserError
from gpufleet.health.diag import Check, DiagOutcome, judge, judge_links
from gpufleet.sources.gpu.dcgmi import run_dcgmi
from gpufleet.spec.base import parse_duration


def diag(
    level: int | None = typer.Option(
        None,
        "-r",
        "--run-level",
        help="1 quick, 2 medium (memory, PCIe, links), 3 long (stress); default 1, or for a saved run the level its "
        "tests show.",
    ),
    node: str | None = typer.Option(None, "--node", help="With --scenario: the twin node to check."),
    scenario: Path | None = typer.Option(None, "--scenario", "-f", help="Check a node of this scenario's twin."),
    at: str = typer.Option("0s", "--at", help="With --scenario: simulate this long first."),
    dcgmi_output: Path | None = typer.Option(None, "--dcgmi-output", help="Judge a saved `dcgmi diag` output."),
    nvlink_status: Path | None = typer.Option(
        None,
        "--nvlink-status",
        help="A saved `nvidia-smi nvlink -s`, judged as `gpufleet triage` judges it; alone, only the links are judged.",
    ),
    output: OutputFormat = typer.Option(OutputFormat.table, "--output", "-o", help=OUTPUT_HELP),
) -> None:
    """Run health checks. A dcgmi PASS while NVLink or HCA links are down is not trusted, a dcgmi failure that is
    the diagnostic's own error is Unknown (not a GPU failure), and a cut output is Unknown (never Pass).

    Exit status: 0 Pass or Warn, 1 Fail, 3 Unknown (the run cannot say)."""
    from gpufleet.parsers.nvidia.dcgmi_diag import read_diag
    from gpufleet.parsers.nvidia.topo import read_nvlink_status
    from gpufleet.triage.paste import Paste

    if level is not None and level not in (1, 2, 3):
        raise UserError(f"-r {level}", fix="use -r 1, 2 or 3")
    nvlink = None
    if nvlink_status is not None:
        text = "\n".join(line.rstrip("\r\n") for line in read_input_lines(nvlink_status)[0])
        # read as `gpufleet triage` reads it: a listing cut short or with lines that do not read is judged Unknown
        nvlink = read_nvlink_status(text, source=str(nvlink_status), strict=False)
    if scenario is not None:
        from gpufleet.sim.diag import twin_diag
        from gpufleet.sim.scenario import build_twin

        if node is None:
            raise UserError("--scenario needs --node", fix="name the node to check")
        twin, _ = build_twin(scenario)
        twin.run(parse_duration(at))
        outcome = twin_diag(twin, node, level or 1)
    elif dcgmi_output is not None:
        lines = Paste().cleaned(read_input_lines(dcgmi_output)[0])  # the same cleaning triage gives a paste
        report = read_diag(lines, source=str(dcgmi_output))  # its level: the lowest that runs the tests it shows
        # a run shows the tests of the level it ran at: at least that level, or the higher one -r says it was asked
        # for (whose missing tests are then gaps)
        report.level = max(level or 1, report.level or 1)
        outcome = judge(report, node or "this host", report.level, nvlink)
    elif nvlink is not None:
        outcome = judge_links(node or "this host", level or 1, nvlink)
    else:
        level = level or 1
        try:
            outcome = judge(run_dcgmi(level), node or "this host", level, nvlink)
        except BackendError as exc:  # no dcgmi, no host engine: the run cannot say, which is not a GPU failure
            reason = f"{exc.message} ({exc.fix})" if exc.fix else exc.message
            outcome = DiagOutcome(node or "this host", level, [Check("dcgmi", level, "Unknown", reason)])
    body = {
        "node": outcome.node,
        "level": outcome.level,
        "verdict": outcome.verdict,
        "checks": [{"name": c.name, "status": c.status, "detail": c.detail} for c in outcome.checks],
    }
    emit(body, output, lambda wide: _render(outcome))
    if outcome.verdict == "Unknown":
        raise typer.Exit(3)
    if not outcome.passed:
        raise typer.Exit(1)


def _render(outcome: DiagOutcome) -> None:
    colour = {"Pass": "green", "Warn": "yellow", "Fail": "red", "Skip": "dim", "Unknown": "magenta"}
    rows = [[c.name, c.status, c.detail] for c in outcome.checks]  # table cells are plain text, never markup
    console.print(make_table(["CHECK", "RESULT", "DETAIL"], rows, title=f"diag -r {outcome.level} on {outcome.node}"))
    console.print(f"verdict: [{colour[outcome.verdict]}]{outcome.verdict}[/]")


def register(app: typer.Typer) -> None:
    app.command()(diag)
