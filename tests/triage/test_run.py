"""Triage end to end on real captures, on the same captures pasted, and on what breaks readers."""

from __future__ import annotations

import csv
import io
import random
from pathlib import Path

import pytest

from gpufleet.triage.run import triage_lines, triage_stream
from tests.conftest import CORPUS

# every real capture: its format, verdict, the codes it must find, and why (bench/triage.py reads the same table)
EXPECTED = {row["file"]: row for row in csv.DictReader((Path(__file__).parent / "data" / "corpus_verdicts.csv").open())}


def _run(text: str) -> tuple[str, str, list[str]]:
    report = triage_lines(io.StringIO(text), "test")
    return report.format, report.verdict, [f.code for f in report.findings]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_captures(name: str) -> None:
    path = CORPUS / name
    fmt, verdict, codes = _run(path.read_text(errors="replace"))
    want = EXPECTED[name]
    assert (fmt, verdict) == (want["format"], want["verdict"]), want["why"]
    assert {c for c in want["codes"].split(";") if c} <= set(codes)


def _pasted(text: str, rng: random.Random) -> str:
    """The text as someone pastes it into a ticket: a prompt, quoting, CRLF, colour, an elision, a marker."""
    lines = text.splitlines()
    out = ["$ sudo cat /var/log/output.txt"]
    for line in lines:
        if rng.random() < 0.05:
            out.append("...")
        if line.strip() and rng.random() < 0.1:
            line += "   <=== look"
        out.append(line)
    quoted = [f"> {line}" for line in out] if rng.random() < 0.5 else out
    sep = "\r\n" if rng.random() < 0.5 else "\n"
    return "```\n" + sep.join(quoted) + sep + "```\n"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_pasting_does_not_change_the_verdict(name: str) -> None:
    path = CORPUS / name
    text = path.read_text(errors="replace")
    rng = random.Random(name)
    for _ in range(3):
        assert _run(_pasted(text, rng))[:2] == _run(text)[:2]


def test_a_kernel_log_streams_past_its_quiet_start() -> None:
    quiet = (f"[{i:>6}.000000] eth0: link up\n" for i in range(30_000))
    fault = iter(["[ 99999.000000] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n"])
    report = triage_lines((line for part in (quiet, fault) for line in part), "big")
    assert report.format == "kernel-log" and report.verdict == "faulty"


def test_a_format_is_told_past_the_usual_sample() -> None:
    """An application's chatter first, the driver's report thousands of lines later: still told and judged."""
    chatter = (f"worker {i}: loading shard {i}\n" for i in range(5_000))
    fault = iter(["[ 99999.000000] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n"])
    report = triage_lines((line for part in (chatter, fault) for line in part), "late")
    assert report.format == "kernel-log" and report.verdict == "faulty"


def test_empty_and_unknown_inputs_say_so() -> None:
    empty = triage_stream(io.BytesIO(b""), "empty")
    assert empty.verdict == "unknown" and "empty" in empty.notes[0]
    other = triage_stream(io.BytesIO(b"hello\nworld\n"), "other")
    assert other.format == "unknown" and other.verdict == "unknown"


def test_seeded_fuzz_never_raises() -> None:
    """Bytes mutated from real captures and cut at random: a report every time, never an exception."""
    rng = random.Random(12)
    files = [p for p in sorted(CORPUS.glob("*")) if p.suffix in (".txt", ".log") and ".source" not in p.name]
    assert files
    for k in range(300):
        data = bytearray(rng.choice(files).read_bytes())
        for _ in range(rng.randint(0, 20)):
            if data:
                data[rng.randrange(len(data))] = rng.randrange(256)
        if data and rng.random() < 0.5:
            data = data[: rng.randrange(len(data))]
        if rng.random() < 0.1:
            data += b"9" * 5000 + b"\n" + b"1e400\n"
        report = triage_stream(io.BytesIO(bytes(data)), f"fuzz-{k}")
        assert report.verdict in ("healthy", "degraded", "faulty", "unknown")


def test_a_truncated_diagnostic_never_turns_into_a_pass() -> None:
    path = CORPUS / "dcgmi_diag_fail_01_r3_rowremap_stas00.txt"
    text = path.read_text()
    for cut in range(len(text) // 4, len(text), max(1, len(text) // 40)):
        assert _run(text[:cut])[1] != "healthy", cut


def test_every_capture_has_an_expected_verdict() -> None:
    captures = {
        str(p.relative_to(CORPUS))
        for p in CORPUS.rglob("*")
        if p.is_file() and not p.name.endswith(".source.txt") and p.suffix not in (".csv", ".md")
    }
    assert captures <= set(EXPECTED), sorted(captures - set(EXPECTED))
