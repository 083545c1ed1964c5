"""The `gpufleet` command."""

from __future__ import annotations

import difflib
import importlib
import os
import sys
from typing import TYPE_CHECKING

import typer
from typer.core import TyperCommand, TyperGroup

from gpufleet import __version__
from gpufleet.cli.commands import BY_NAME, COMMANDS
from gpufleet.errors import GpufleetError, UserError

if TYPE_CHECKING:
    from typer._click import Command, Context, HelpFormatter

# The click commands each command module registers, built once a process: {module: {name: command}}.
_LOADED: dict[str, dict[str, Command]] = {}


def load_module_commands(module: str) -> dict[str, Command]:
    """Import one command module and build the commands it registers (`register(app)` on an app of its own)."""
    if module not in _LOADED:
        scratch = typer.Typer()
        importlib.import_module(f"gpufleet.cli.{module}").register(scratch)
        _LOADED[module] = dict(typer.main.get_group(scratch).commands)
    return _LOADED[module]


# Below this many columns rich's help tables squeeze an option's help into a column of 20-odd characters (the type
# column and the --x/--no-x pairs take the rest); click's plain layout keeps it readable there.
RICH_HELP_FROM_COLUMNS = 100


def narrow_terminal() -> bool:
    """Whether help is shown narrower than RICH_HELP_FROM_COLUMNS ($COLUMNS, else the terminal's width; 80 for a
    pipe)."""
    import shutil

    return shutil.get_terminal_size((80, 24)).columns < RICH_HELP_FROM_COLUMNS


def fit_help(command: Command, narrow: bool) -> None:
    """`command` and its subcommands print click's plain help when `narrow`, their own (rich) help otherwise."""
    if hasattr(command, "rich_markup_mode"):
        own = command.__dict__.setdefault("_own_markup_mode", command.rich_markup_mode)
        command.rich_markup_mode = None if narrow else own
    for sub in getattr(command, "commands", {}).values():
        fit_help(sub, narrow)


class LazyGroup(TyperGroup):
    """The top-level group: a command's module is imported when that command runs (or its own help is asked for).
    The listing in `gpufleet --help` comes from the table in gpufleet.cli.commands, so it imports none of them."""

    _listing = False

    def list_commands(self, ctx: Context) -> list[str]:
        return [entry.name for entry in COMMANDS] + [name for name in self.commands if name not in BY_NAME]

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        entry = BY_NAME.get(cmd_name)
        if entry is None:
            return None
        if self._listing:  # a stand-in that carries the one line the listing shows
            return TyperCommand(name=entry.name, help=entry.help)
        command = load_module_commands(entry.module).get(cmd_name)
        if command is not None:
            fit_help(command, narrow_terminal())
        return command

    def resolve_command(self, ctx: Context, args: list[str]) -> tuple[str | None, Command | None, list[str]]:
        from typer._click.exceptions import UsageError

        try:
            return super().resolve_command(ctx, args)
        except UsageError as exc:  # Typer suggests from the commands already loaded: suggest from them all
            matches = difflib.get_close_matches(args[0], self.list_commands(ctx)) if args else []
            if self.suggest_commands and matches and "Did you mean" not in exc.message:
                exc.message = f"{exc.message.rstrip('.')}. Did you mean {', '.join(map(repr, matches))}?"
            raise

    def format_help(self, ctx: Context, formatter: HelpFormatter) -> None:
        self._listing = True
        fit_help(self, narrow_terminal())
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


app = typer.Typer(
    name="gpufleet",
    cls=LazyGroup,
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


def run() -> None:
    """Entry point: run the app, turning gpufleet errors into one red line and a non-zero exit."""
    debug = "--debug" in sys.argv or os.environ.get("GPUFLEET_DEBUG") == "1"
    from rich.markup import escape

    from gpufleet.cli.output import err_console  # rich's console: imported once a command runs, not before

    try:
        code = app(standalone_mode=False)
        if isinstance(code, int) and code:  # typer.Exit(n) comes back as a return value here
            sys.exit(code)
    except GpufleetError as exc:
        if debug:
            raise
        # the text is the error's own: `gpufleet[deploy]` or `gpu[0]` are words, not markup
        err_console.print(f"[red]error:[/red] {escape(exc.message)}", highlight=False, soft_wrap=True)
        if exc.fix:
            err_console.print(f"  fix: {exc.fix}", highlight=False, soft_wrap=True, markup=False)
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
        err_console.print(f"[red]internal error:[/red] {type(exc).__name__}: {escape(str(exc))}", highlight=False)
        err_console.print("  fix: rerun with --debug and report the traceback")
        sys.exit(1)


if __name__ == "__main__":
    run()
