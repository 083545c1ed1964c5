"""The `gpufleet` entry point: commands are loaded on demand, so a short command imports what it uses and no more.

The cost of start-up is tested by what is imported (module counts and the heavy libraries that must stay out),
never by time: `bench/cli_startup.py` measures the time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.cli.commands import COMMANDS
from tests.clirun import gpufleet

# Loaded by a command that needs them (the twin, the parsers, the server), never by the listing or a read of the API.
HEAVY = (
    "numpy",
    "scipy",
    "numba",
    "matplotlib",
    "pandas",
    "fastapi",
    "starlette",
    "uvicorn",
    "msgspec",
    "celpy",
    "torch",
    "httpx",
)
NOT_FOR_A_CLIENT = ("gpufleet.sim", "gpufleet.triage", "gpufleet.server", "gpufleet.health", "gpufleet.state")
# Python, typer (with click and pydantic), rich: about 330 modules; a command module for `--help` would add 100s.
HELP_MODULES = 400
# ... and the standard library's HTTP client, the API client and the tables for one read of the API: about 340.
CLIENT_MODULES = 400


def modules_after(tmp_path: Path, *args: str) -> list[str]:
    """Run `gpufleet ARGS` through the console entry point in a fresh interpreter; the modules it had loaded."""
    probe = (
        "import json, sys\n"
        f"sys.argv = ['gpufleet', *{list(args)!r}]\n"
        "from gpufleet.cli.main import run\n"
        "try:\n    run()\nexcept SystemExit:\n    pass\n"
        "print(json.dumps(sorted(sys.modules)), file=sys.__stderr__)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    env["GPUFLEET_HOME"] = str(tmp_path)
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    return list(json.loads(done.stderr.strip().splitlines()[-1]))


def heavy(loaded: list[str], prefixes: tuple[str, ...]) -> list[str]:
    return sorted({p for p in prefixes for m in loaded if m == p or m.startswith(p + ".")})


@pytest.mark.parametrize("args", [("--help",), ()], ids=["--help", "no-args"])
def test_the_listing_imports_no_command_module(tmp_path: Path, args: tuple[str, ...]) -> None:
    loaded = modules_after(tmp_path, *args)
    assert heavy(loaded, HEAVY) == []
    commands = sorted(m for m in loaded if m.startswith("gpufleet.cli.") and m != "gpufleet.cli.commands")
    assert commands == ["gpufleet.cli.main", "gpufleet.cli.output"]
    assert len(loaded) < HELP_MODULES, f"{len(loaded)} modules for the listing"


def test_a_read_of_the_api_imports_the_client_and_no_more(tmp_path: Path) -> None:
    # Nothing listens on port 1: the command fails after the request, with every import it needs done.
    loaded = modules_after(tmp_path, "get", "nodes", "--server", "http://127.0.0.1:1")
    assert "gpufleet.cli.client" in loaded and "gpufleet.cli.fleet" in loaded
    assert heavy(loaded, HEAVY + NOT_FOR_A_CLIENT) == []
    assert heavy(loaded, tuple(f"gpufleet.cli.{e.module}" for e in COMMANDS if e.module != "fleet")) == []
    assert len(loaded) < CLIENT_MODULES, f"{len(loaded)} modules for `gpufleet get nodes`"


def test_the_listing_shows_every_command_with_its_line() -> None:
    ran = gpufleet("--help", env={"COLUMNS": "200"})  # rich's panel, every line whole
    assert ran.returncode == 0
    panel = ran.stdout.split("Commands")[1]
    rows: list[list[str]] = []
    for line in panel.splitlines():
        if not line.startswith("│ "):
            continue
        if line[2] != " ":  # a command's first line: its name, then its help
            rows.append(line[2:].split(None, 1))
        else:  # its help, continued
            rows[-1][1] += " " + line.strip("│ ")
    listed = [(name, " ".join(text.replace("│", "").split())) for name, text in rows]
    assert listed == [(entry.name, " ".join(entry.help.split())) for entry in COMMANDS]


def test_a_command_loads_when_it_runs_and_its_own_help_is_complete() -> None:
    ran = gpufleet("remediate", "breaker", "--help")
    assert ran.returncode == 0
    assert "reset" in ran.stdout and "status" in ran.stdout
    ran = gpufleet("xid", "explain", "79")
    assert ran.returncode == 0, ran.stderr
    assert "79" in ran.stdout


def test_a_misspelt_command_is_matched_against_every_command() -> None:
    ran = gpufleet("partiton")
    assert ran.returncode == 2
    assert "No such command 'partiton'. Did you mean 'partition'?" in ran.stderr


def test_an_error_and_its_fix_are_printed_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    """Brackets in a message or a fix (an extra's name, an index) are words, not terminal markup."""
    from gpufleet.cli import client
    from gpufleet.errors import UserError

    def refuse() -> dict[str, str]:
        raise UserError("gpu[0] of [bold]dgx-001[/bold] is unknown", fix="pip install 'gpufleet[deploy]'")

    monkeypatch.setattr(client, "read_config", refuse)
    ran = gpufleet("config", "view")
    assert ran.returncode == 2
    assert ran.stderr.splitlines() == [
        "error: gpu[0] of [bold]dgx-001[/bold] is unknown",
        "  fix: pip install 'gpufleet[deploy]'",
    ]


def _help_column(text: str) -> int:
    """The column where option help starts in click's plain layout (the indent of its wrapped lines)."""
    indents = [len(line) - len(line.lstrip(" ")) for line in text.splitlines() if line.startswith("      ")]
    return max(indents, default=0)


@pytest.mark.parametrize("entry", COMMANDS, ids=lambda e: e.name)
def test_every_commands_help_is_readable_at_80_columns(entry: object) -> None:
    name = entry.name  # type: ignore[attr-defined]
    ran = gpufleet(name, "--help", env={"COLUMNS": "80"})
    assert ran.returncode == 0, ran.stderr
    assert "╭" not in ran.stdout  # click's plain layout, not rich's panels with their squeezed help column
    assert 80 - _help_column(ran.stdout) >= 40, ran.stdout  # option help keeps at least 40 columns
    wide = gpufleet(name, "--help", env={"COLUMNS": "160"})
    assert "╭" in wide.stdout  # rich's panels where there is room


def test_the_listing_is_readable_at_80_columns() -> None:
    ran = gpufleet("--help", env={"COLUMNS": "80"})
    assert "╭" not in ran.stdout and all(len(line) <= 80 for line in ran.stdout.splitlines())
