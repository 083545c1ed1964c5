"""`gpufleet triage` as a person runs it: files or stdin, a table or JSON, and an exit status scripts can use."""

from __future__ import annotations

import json
from pathlib import Path

from tests.clirun import gpufleet

XID79 = "[  101.2] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n"


def test_stdin_json_and_exit_status(tmp_path: Path) -> None:
    res = gpufleet("triage", "-", "-o", "json", input=f"$ dmesg | grep Xid\n> {XID79}")
    assert res.returncode == 1, res.stderr  # faulty
    body = json.loads(res.stdout)
    assert body["format"] == "kernel-log" and body["verdict"] == "faulty"
    (finding,) = body["findings"]
    assert finding["code"] == "Xid 79" and finding["severity"] == "critical" and finding["evidence"]
    assert set(finding) == {"check", "severity", "entity", "code", "message", "fix", "evidence"}


def test_several_files_a_table_and_unknown(tmp_path: Path) -> None:
    good = tmp_path / "dmesg.txt"
    good.write_text("[    1.000000] Linux version 6.8.0\n[    2.000000] eth0: link up\n")
    other = tmp_path / "notes.txt"
    other.write_text("hello\n")
    res = gpufleet("triage", str(good), str(other))
    assert res.returncode == 0, res.stderr
    assert "HEALTHY" in res.stdout and "UNKNOWN" in res.stdout
    only_unknown = gpufleet("triage", str(other))
    assert only_unknown.returncode == 3


def test_bad_paths_and_formats_are_clear_errors(tmp_path: Path) -> None:
    missing = gpufleet("triage", str(tmp_path / "nope.log"))
    assert missing.returncode != 0 and "no such file" in missing.stderr and "Traceback" not in missing.stderr
    folder = gpufleet("triage", str(tmp_path))
    assert "is a directory" in folder.stderr
    bad = gpufleet("triage", "-F", "tea-leaves", "-", input="x\n")
    assert "no format 'tea-leaves'" in bad.stderr and "kernel-log" in bad.stderr
