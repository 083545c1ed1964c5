"""The `gpufleet` command."""

from __future__ import annotations

import os
import sys

import typer

from gpufleet import __version__
from gpufleet.cli.output import err_console
from gpufleet.errors import GpufleetError, UserError

app = typer.Typer(
    name="gpufleet",
    help="Operations stack for GPU clusters: schedule, see, catch and fix faults, tune collectives.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gpufleet {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks instead of one-line errors."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    if debug:
        os.environ["GPUFLEET_DEBUG"] = "1"


# Each module exposes `register(app)`; one line per command family keeps this file free of their details.
COMMAND_MODULES = (
    "gpufleet.cli.core",
    "gpufleet.cli.fleet",
    "gpufleet.cli.top",
    "gpufleet.cli.server",
    "gpufleet.cli.telemetry",
    "gpufleet.cli.agent",
    "gpufleet.cli.xid",
    "gpufleet.cli.nccl",
    "gpufleet.cli.sched",
    "gpufleet.cli.partition",
    "gpufleet.cli.remediate",
    "gpufleet.cli.diag",
    "gpufleet.cli.read",
    "gpufleet.cli.triage",
    "gpufleet.cli.fabric",
    "gpufleet.cli.token",
    "gpufleet.cli.deploy",
    "gpufleet.cli.doctor",
    "gpufleet.cli.cost",
)


def _register() -> None:
    import importlib

    for name in COMMAND_MODULES:
        importlib.import_module(name).register(app)


_register()


def run() -> None:
    """Entry point: run the app, turning gpufleet errors into one red line and a non-zero exit."""
    debug = "--debug" in sys.argv or os.environ.get("GPUFLEET_DEBUG") == "1"
    try:
        code = app(standalone_mode=False)
        if isinstance(code, int) and code:  # typer.Exit(n) comes back as a return value here
            sys.exit(code)
    except GpufleetError as exc:
        if debug:
            raise
        err_console.print(f"[red]error:[/red] {exc.message}", highlight=False, soft_wrap=True)
        if exc.fix:
            err_console.print(f"  fix: {exc.fix}", highlight=False, soft_wrap=True)
        sys.exit(2 if isinstance(exc, UserError) else 1)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        err_console.print("aborted")
        sys.exit(130)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:
        show = getattr(exc, "show", None)
        if callable(show) and isinstance(getattr(exc, "exit_code", None), int):  # a usage error from the parser
            show()
            sys.exit(exc.exit_code)  # type: ignore[attr-defined]
        if debug:
            raise
        err_console.print(f"[red]internal error:[/red] {type(exc).__name__}: {exc}", highlight=False)
        err_console.print("  fix: rerun with --debug and report the traceback")
        sys.exit(1)


if __name__ == "__main__":
    run()
