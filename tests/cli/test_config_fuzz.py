"""Every command that reads a person's YAML or JSON file, fed what breaks loaders: NUL and other control characters,
bytes that are not UTF-8, UTF-16, integers of more than 4,300 digits (Python's own int conversion refuses them),
dates that do not exist, nesting far past the stack, and a real config with such bytes placed at seeded positions.
Each ends in one clear error naming the file, with a fix, and a non-zero exit; never `internal error` or a
traceback. (`gpufleet doctor` reports an unreadable input as a GF092 finding instead, as it does any bad input.)"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from gpufleet.health.xid_policy import default_policy_text
from tests.clirun import Ran, gpufleet
from tests.conftest import CORPUS

ROOT = Path(__file__).resolve().parents[2]
CLUSTERS = ROOT / "src" / "gpufleet" / "examples" / "clusters"
NETDISCOVER = ROOT / "tests" / "captures" / "ibsim" / "ibnetdiscover.txt"
XID_LOG = CORPUS / "burst_xid79_sxid_gpud.log"
POD = (
    "apiVersion: v1\nkind: Pod\nmetadata: {name: train, namespace: ml}\nspec:\n  containers:\n  - {name: c, image: x}\n"
)
NODES = json.dumps({"apiVersion": "v1", "kind": "List", "items": []})


# command name -> (how to run it on a file, the file's suffix, a valid file it accepts)
COMMANDS: dict[str, tuple[Callable[[str], tuple[str, ...]], str, Callable[[], str]]] = {
    "xid classify --policy": (
        lambda f: ("xid", "classify", "--policy", f, str(XID_LOG)),
        ".yaml",
        default_policy_text,
    ),
    "xid explain --policy": (lambda f: ("xid", "explain", "79", "--policy", f), ".yaml", default_policy_text),
    "validate": (lambda f: ("validate", f), ".yaml", lambda: (CLUSTERS / "dgx-h100-su.yaml").read_text()),
    "doctor": (lambda f: ("doctor", f, "--no-schema", "-o", "json"), ".yaml", lambda: POD),
    "doctor --nodes": (lambda f: ("doctor", "--nodes", f, "--no-schema", "-o", "json"), ".json", lambda: NODES),
    "fabric discover --expect": (
        lambda f: ("fabric", "discover", "--ibnetdiscover", str(NETDISCOVER), "--expect", f),
        ".yaml",
        lambda: (CLUSTERS / "ibsim-fattree.yaml").read_text(),
    ),
}

# Bytes no config may hold, wherever they stand (tab, LF and CR are text).
BAD_BYTES: dict[str, list[bytes]] = {
    "nul": [b"\x00"],
    "control-character": [bytes([c]) for c in (*range(1, 9), 0x0B, 0x0C, *range(0x0E, 0x20))],
    "invalid-utf8": [b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf0\x28\x8c\x28", b"\x80"],
}

# What replaces a value of the valid file: integers past the digit limit, a date that does not exist, deep nesting.
HUGE = "9" * 5000
VALUES: dict[str, tuple[str, str]] = {  # name -> (as YAML, as JSON)
    "huge-integer": (HUGE, HUGE),
    "huge-negative-integer": ("-" + HUGE, "-" + HUGE),
    "huge-hex-integer": ("0x" + "f" * 5000, HUGE),
    "huge-sexagesimal-integer": ("1" + ":59" * 2000, HUGE),
    "impossible-date": ("2024-13-45", '"x"]'),  # JSON has no dates: its form is a stray bracket
    "deep-nesting": ("[" * 100_000 + "]" * 100_000, "[" * 100_000 + "]" * 100_000),
    "deep-but-parsable-nesting": ("[" * 500 + "]" * 500, "[" * 500 + "]" * 500),
}

WHOLE_FILES: dict[str, bytes] = {
    "only-nul": b"\x00" * 4096,
    "utf16": "a: 1\n".encode("utf-16"),
    "unclosed-brackets": b"[" * 100_000,
    "unclosed-json-objects": b'{"a":' * 50_000,
    "escape-sequences": b"a: \x1b[31mred\x1b[0m\n",
}


def _is_clear(res: Ran, path: Path, command: str) -> None:
    """Non-zero, no traceback, and one error naming the file with a fix (a GF092 finding for the doctor)."""
    assert "Traceback" not in res.stderr + res.stdout and "internal error" not in res.stderr, (command, res.stderr)
    if command.startswith("doctor"):
        findings = [f for f in json.loads(res.stdout) if f["rule"] == "GF092" and f["file"] == str(path)]
        assert findings and findings[0]["fix"], (command, res.stdout)
        if findings[0]["severity"] == "info":  # the doctor skips a binary file (NULs up front) with a note
            assert "binary" in findings[0]["message"], findings
            return
        assert res.returncode == 1 and findings[0]["severity"] == "error", (res.returncode, findings)
        return
    assert res.returncode == 2, (command, res.returncode, res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert lines[0].startswith(f"error: {path}") and lines[-1].strip().startswith("fix: "), (command, lines)


def _run(command: str, path: Path) -> None:
    args, _, _ = COMMANDS[command]
    _is_clear(gpufleet(*args(str(path))), path, command)


@pytest.mark.parametrize("command", list(COMMANDS))
def test_the_valid_file_is_accepted(tmp_path: Path, command: str) -> None:
    args, suffix, valid = COMMANDS[command]
    path = tmp_path / f"valid{suffix}"
    path.write_text(valid())
    res = gpufleet(*args(str(path)))
    assert "error" not in res.stderr and "GF092" not in res.stdout, (command, res.stderr, res.stdout)


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("hazard", list(BAD_BYTES))
def test_bad_bytes_at_seeded_positions(tmp_path: Path, command: str, hazard: str) -> None:
    _, suffix, valid = COMMANDS[command]
    data = valid().encode()
    rng = random.Random(f"{command}/{hazard}")
    for attempt in range(4):
        at = rng.randrange(len(data) + 1)
        path = tmp_path / f"{hazard}-{attempt}{suffix}"
        path.write_bytes(data[:at] + rng.choice(BAD_BYTES[hazard]) + data[at:])
        _run(command, path)


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("value", list(VALUES))
def test_values_no_config_can_hold(tmp_path: Path, command: str, value: str) -> None:
    _, suffix, valid = COMMANDS[command]
    as_yaml, as_json = VALUES[value]
    if suffix == ".json":
        text = valid().replace('"items": []', f'"items": [{as_json}]')
    else:  # a new last key of the top-level mapping
        text = valid().rstrip("\n") + f"\nzz: {as_yaml}\n"
    path = tmp_path / f"{value}{suffix}"
    path.write_text(text)
    _run(command, path)


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("hazard", list(WHOLE_FILES))
def test_whole_files_that_are_not_configs(tmp_path: Path, command: str, hazard: str) -> None:
    _, suffix, _ = COMMANDS[command]
    path = tmp_path / f"{hazard}{suffix}"
    path.write_bytes(WHOLE_FILES[hazard])
    _run(command, path)
