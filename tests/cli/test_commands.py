"""The table `gpufleet --help` is drawn from agrees with what the command modules register."""

from __future__ import annotations

import importlib
import inspect

import typer

from gpufleet.cli.commands import BY_NAME, COMMANDS, modules


def registered() -> dict[str, tuple[str, str]]:
    """{command: (module, first paragraph of its help)} as the modules themselves register them."""
    found: dict[str, tuple[str, str]] = {}
    for module in modules():
        app = typer.Typer()
        importlib.import_module(module).register(app)
        for name, command in typer.main.get_group(app).commands.items():
            assert name not in found, f"{name} is registered by {found[name][0]} and by {module}"
            text = inspect.cleandoc(command.short_help or command.help or "").split("\n\n")[0]
            found[name] = (module.rsplit(".", 1)[1], " ".join(text.split()))
    return found


def test_every_registered_command_is_in_the_table_with_its_module_and_help() -> None:
    real = registered()
    table = {entry.name: (entry.module, " ".join(entry.help.split())) for entry in COMMANDS}
    missing = sorted(set(real) - set(table))
    assert not missing, "add to gpufleet/cli/commands.py: " + "; ".join(
        f"Entry({name!r}, {real[name][0]!r}, {real[name][1]!r})" for name in missing
    )
    assert not sorted(set(table) - set(real)), "in the table but registered by no module"
    for name, (module, help_text) in real.items():
        assert table[name][0] == module, f"{name} is registered by gpufleet.cli.{module}"
        assert table[name][1] == help_text, f"{name}'s one line in gpufleet/cli/commands.py should read: {help_text!r}"


def test_the_table_names_each_command_once() -> None:
    assert len(BY_NAME) == len(COMMANDS)
    assert all(entry.help and "\n" not in entry.help for entry in COMMANDS)
