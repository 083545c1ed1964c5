"""`gpufleet read FORMAT FILE`: parse what a node's tools printed (a saved file, or - for stdin) into gpufleet's
records, to check a capture by eye or hand it to a script as JSON. The same parsers the agent and `gpufleet triage`
run: a subcommand for each format of the registry (`gpufleet.triage.formats`) that has a parser."""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import typer

from gpufleet.cli.inputs import read_input_text
from gpufleet.cli.output import OUTPUT_HELP, OutputFormat, console, dump_yaml, emit, make_table
from gpufleet.triage.formats import REGISTRY, Format

FILE_ARG = typer.Argument(..., help="The saved output, or - to read stdin.")
OUTPUT_OPT = typer.Option(OutputFormat.table, "--output", "-o", help=OUTPUT_HELP)


def _app_help() -> str:
    judged_only = [f.name for f in REGISTRY if f.parse is None]
    text = (
        "Parse a saved tool output into records: "
        + ", ".join(f.name for f in REGISTRY.readable())
        + ". Each format is also one `gpufleet triage` tells and judges."
    )
    if judged_only:
        text += f" Judged by `gpufleet triage` only (no parser to print yet): {', '.join(judged_only)}."
    return text


read_app = typer.Typer(help=_app_help(), no_args_is_help=True)


def _text(path: Path) -> tuple[str, str]:
    """The file's text and the name to cite in errors."""
    text, cited = read_input_text(path)
    return text, Path(cited).name


def _show(fmt: Format, text: str, source: str, output: OutputFormat, options: Mapping[str, Any]) -> None:
    """Parse `text` as `fmt` and print it: JSON or YAML as parsed, or the format's table for people (its records as
    YAML when it has no table)."""
    if fmt.parse is None:  # only formats with a parser get a subcommand
        raise ValueError(f"format {fmt.name!r} has no parser")
    parsed = fmt.parse(text, source=source, **options)
    render = fmt.render

    def show(wide: bool) -> None:
        if render is None:
            sys.stdout.write(dump_yaml(parsed))
            return
        view = render(parsed, source)
        for table in view.tables:
            console.print(make_table(table.columns, table.rows, table.title))
        for line in view.lines:
            console.print(line, highlight=False)

    emit(parsed, output, show)


def _command(fmt: Format) -> Callable[..., None]:
    """`gpufleet read NAME FILE [options] [-o ...]` for one format; its options are the parser's (`Format.options`)."""

    def command(file: Path, output: OutputFormat, **options: Any) -> None:
        text, source = _text(file)
        _show(fmt, text, source, output, options)

    parameters = [
        inspect.Parameter("file", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=FILE_ARG, annotation=Path),
        *(
            inspect.Parameter(
                option.name,
                inspect.Parameter.KEYWORD_ONLY,
                default=typer.Option(None, option.flag, help=option.help),
                annotation=option.type | None,
            )
            for option in fmt.options
        ),
        inspect.Parameter("output", inspect.Parameter.KEYWORD_ONLY, default=OUTPUT_OPT, annotation=OutputFormat),
    ]
    command.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    command.__annotations__ = {}  # typer takes the types from the signature above
    command.__doc__ = fmt.read_help or fmt.summary
    command.__name__ = fmt.name.replace("-", "_")
    return command


for _fmt in REGISTRY.readable():
    read_app.command(_fmt.name)(_command(_fmt))


@read_app.command("nvidia-smi", hidden=True)
def nvidia_smi_cmd(file: Path = FILE_ARG, output: OutputFormat = OUTPUT_OPT) -> None:
    """`nvidia-smi` (the table), `nvidia-smi -q` or `-q -x`, told apart by shape: kept for scripts written before
    `nvidia-smi-table` and `nvidia-smi-q` were subcommands of their own."""
    text, source = _text(file)
    table = re.search(r"^[|+][-=+ ]", text, re.MULTILINE) is not None  # the boxed table; -q is indented text
    _show(REGISTRY["nvidia-smi-table" if table else "nvidia-smi-q"], text, source, output, {})


def register(app: typer.Typer) -> None:
    app.add_typer(read_app, name="read")
