"""`gpufleet diag`: node health checks at DCGM's run levels."""

from __future__ import annotations

from pathlib import Path

import typer

from gpufleet.cli.output import OUTPUT_HELP, OutputFormat, console, emit, make_table
from gpufleet.errors import UserError
from gpufleet.health.diag import DiagOutcome, judge, run_dcgmi
from gpufleet.spec.base import parse_duration


def diag(
    level: int = typer.Option(1, "-r", "--run-level", help="1 quick, 2 medium (memory, PCIe, links), 3 long (stress)."),
    node: str | None = typer.Option(None, "--node", help="With --scenario: the twin node to check."),
    scenario: Path | None = typer.Option(None, "--scenario", "-f", help="Check a node of this scenario's twin."),
    at: str = typer.Option("0s", "--at", help="With --scenario: simulate this long first."),
    dcgmi_output: Path | None = typer.Option(None, "--dcgmi-output", help="Judge a saved `dcgmi diag` output."),
    nvlink_status: Path | None = typer.Option(None, "--nvlink-status", help="A saved `nvidia-smi nvlink -s`."),
    output: OutputFormat = typer.Option(OutputFormat.table, "--output", "-o", help=OUTPUT_HELP),
) -> None:
    """Run health checks; exit 1 if any fails. A dcgmi PASS while NVLink or HCA links are down is not trusted."""
    from gpufleet.sources.dcgmi import parse_diag
    from gpufleet.sources.topo import parse_nvlink_status

    if level not in (1, 2, 3):
        raise UserError(f"-r {level}", fix="use -r 1, 2 or 3")
    nvlink = parse_nvlink_status(_read(nvlink_status), source=str(nvlink_status)) if nvlink_status else None
    if scenario is not None:
        from gpufleet.sim.diag import twin_diag
        from gpufleet.sim.scenario import build_twin

        if node is None:
            raise UserError("--scenario needs --node", fix="name the node to check")
        twin, _ = build_twin(scenario)
        twin.run(parse_duration(at))
        outcome = twin_diag(twin, node, level)
    elif dcgmi_output is not None:
        report = parse_diag(_read(dcgmi_output), level=level, source=str(dcgmi_output))
        outcome = judge(report, node or "this host", level, nvlink)
    else:
        outcome = judge(run_dcgmi(level), node or "this host", level, nvlink)
    body = {
        "node": outcome.node,
        "level": outcome.level,
        "verdict": outcome.verdict,
        "checks": [{"name": c.name, "status": c.status, "detail": c.detail} for c in outcome.checks],
    }
    emit(body, output, lambda wide: _render(outcome))
    if not outcome.passed:
        raise typer.Exit(1)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror}", fix="pass a readable file") from None


def _render(outcome: DiagOutcome) -> None:
    colour = {"Pass": "green", "Warn": "yellow", "Fail": "red", "Skip": "dim"}
    rows = [[c.name, f"[{colour[c.status]}]{c.status}[/]", c.detail] for c in outcome.checks]
    console.print(make_table(["CHECK", "RESULT", "DETAIL"], rows, title=f"diag -r {outcome.level} on {outcome.node}"))
    console.print(f"verdict: [{colour[outcome.verdict]}]{outcome.verdict}[/]")


def register(app: typer.Typer) -> None:
    app.command()(diag)
