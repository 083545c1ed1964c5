"""`gpufleet triage FILE... | -`: what operators paste, told apart by content and judged."""

from __future__ import annotations

import inspect

import typer
from rich.text import Text

from gpufleet.cli.inputs import open_input
from gpufleet.cli.output import OUTPUT_HELP, OutputFormat, console, emit, make_table
from gpufleet.errors import UserError
from gpufleet.triage.formats import REGISTRY
from gpufleet.triage.readers.oom import side_by_side
from gpufleet.triage.report import TriageReport
from gpufleet.triage.run import triage_stream

VERDICT_STYLE = {"healthy": "green", "degraded": "yellow", "faulty": "bold red", "unknown": "dim"}
SEVERITY_STYLE = {"critical": "red", "warning": "yellow", "info": "dim"}


def _one(name: str, fmt: str | None) -> TriageReport:
    with open_input(name) as (stream, cited):
        return triage_stream(stream, cited, fmt)


def triage(
    files: list[str] = typer.Argument(..., help="Saved outputs or pasted text; - reads stdin."),
    output: OutputFormat = typer.Option(OutputFormat.table, "-o", "--output", help=OUTPUT_HELP),
    fmt: str | None = typer.Option(
        None, "--format", "-F", help="Read as this format (one of those listed above) instead of telling it."
    ),
) -> None:
    """Tell what printed each input (kernel log, nvidia-smi, dcgmi, NCCL log, InfiniBand tools, kubectl, ...) by
    its content, and judge it: healthy, degraded, faulty, or unknown when it cannot say. Pasted text is fine:
    prompts, echoed commands, `> ` quoting, elisions, markers, colour and launcher prefixes are taken off.

    Exit status: 0 healthy or degraded, 1 faulty, 3 unknown (so a script can tell "fine" from "cannot say")."""
    if fmt is not None and fmt not in REGISTRY:
        raise UserError(f"no format {fmt!r}", fix=f"use one of: {', '.join(REGISTRY.names())}")
    reports = [_one(name, fmt) for name in files]
    body = [r.as_dict() for r in reports]
    # a kill by the kernel in one input and a GPU out of memory in another: two failures, said in one line
    combined = side_by_side(reports)
    if combined is not None:
        for r, entry in zip(reports, body, strict=True):
            if r in combined[1]:
                entry["notes"] = [*entry["notes"], f"side by side: {combined[0]}"]

    def render(wide: bool) -> None:
        for r in reports:
            head = Text.assemble(
                (f"{r.source}", "bold"), "  ", (r.format, "cyan"), "  ", (r.verdict.upper(), VERDICT_STYLE[r.verdict])
            )
            console.print(head)
            if r.findings:
                rows = []
                for f in r.ordered():
                    row = [Text(f.severity, style=SEVERITY_STYLE[f.severity]), f.code, f.entity or "-", f.message]
                    row.append(f.fix or "-")
                    if wide:
                        row.append(" | ".join(f.evidence[:2]))
                    rows.append(row)
                cols = ["SEVERITY", "CODE", "ENTITY", "FINDING", "FIX"] + (["EVIDENCE"] if wide else [])
                console.print(make_table(cols, rows))
            for note in r.notes:
                console.print(Text(f"  note: {note}", style="dim"))
        if combined is not None:
            console.print(Text.assemble(("side by side: ", "bold"), combined[0]))

    emit(body if len(body) > 1 else body[0], output, render)
    verdicts = {r.verdict for r in reports}
    if "faulty" in verdicts:
        raise typer.Exit(1)
    if verdicts == {"unknown"}:
        raise typer.Exit(3)


def _help() -> str:
    """The command's help: its docstring, then every format it tells, from the registry."""
    formats = "\n\n".join(f"{fmt.name}: {fmt.summary}" for fmt in REGISTRY)
    head = inspect.cleandoc(triage.__doc__ or "")
    return f"{head}\n\nFormats (told by content, or named with --format):\n\n{formats}"


def register(app: typer.Typer) -> None:
    app.command("triage", help=_help())(triage)
