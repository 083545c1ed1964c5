"""Triage end to end on real captures, on the same captures pasted, and on what breaks readers."""

from __future__ import annotations

import csv
import io
import random
import re
from pathlib import Path
from typing import Any

import pytest

from gpufleet.parsers.kernel.kmsg import KmsgParser
from gpufleet.triage.paste import SHAPE_LINES
from gpufleet.triage.readers.kernel import _LinkWatch
from gpufleet.triage.readers.oom import OomKillTracker
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


# -- a big kernel log past its sample: the chunk prefilter, and what reaches the readers ----------------------------

XID_79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python3, GPU has fallen off the bus."
OOM_KILL = "Memory cgroup out of memory: Killed process {n} (python3) total-vm:1024kB, anon-rss:{rss}kB, file-rss:0kB"
# noise that holds readers' words without being any reader's line: the OOM killer's daemon, a process named for it
NEAR_MISS = ("systemd[1]: Started systemd-oomd.service - Userspace Out-Of-Memory (OOM) Killer.",
             "systemd[1]: earlyoom-killer.service: Deactivated successfully.")  # fmt: skip


def _big_log(tail: int = 2_000, xid_at: int = 1_005) -> tuple[list[str], int, int]:
    """SHAPE_LINES lines of noise (the sample), then `tail` lines holding an OOM kill every tenth line and the Xid at
    `xid_at`, the rest noise and near misses. Returns the lines, the Xid's line number and the number of kills."""
    lines = [f"[{i:>6}.000000] eth0: renamed from veth{i:x}" for i in range(SHAPE_LINES)]
    kills = 0
    for i in range(tail):
        stamp = f"[{SHAPE_LINES + i:>6}.000000] "
        if i == xid_at:
            lines.append(stamp + XID_79)
        elif i % 10 == 0:
            lines.append(stamp + OOM_KILL.format(n=100 + i, rss=512))
            kills += 1
        else:
            lines.append(
                stamp + (NEAR_MISS[i % 2] if i % 3 == 0 else f"cni0: port {i % 64}(veth{i:x}) entered forwarding")
            )
    return lines, SHAPE_LINES + xid_at + 1, kills


def _read_lines(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """The lines each reader of a kernel log is handed, recorded as they are handed (the readers still read them)."""
    handed: dict[str, list[str]] = {"parser": [], "oom": [], "links": []}

    def record(cls: type, name: str, reader: str) -> None:
        real = getattr(cls, name)

        def recorded(self: object, *args: Any) -> Any:
            handed[reader].append(args[-1])
            return real(self, *args)

        monkeypatch.setattr(cls, name, recorded)

    record(KmsgParser, "feed_line", "parser")
    record(OomKillTracker, "feed", "oom")
    record(_LinkWatch, "see", "links")
    return handed


def test_past_the_sample_only_trigger_lines_and_a_parsers_next_lines_reach_the_readers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every line of the sample is read; past it, the OOM kills and the Xid with the four lines after it (a report
    the parser reads may go on over them), and no other line: not the lines after a kill, not the near misses."""
    handed = _read_lines(monkeypatch)
    lines, xid_line, kills = _big_log()
    report = triage_stream(io.BytesIO("\n".join(lines).encode() + b"\n"), "big")
    past = lines[SHAPE_LINES:]
    wanted = [line for line in past if "Killed process" in line or "NVRM" in line]
    wanted += lines[xid_line : xid_line + 4]  # the four after the Xid (line numbers are 1-based)
    for reader in ("parser", "oom", "links"):
        assert handed[reader][:SHAPE_LINES] == lines[:SHAPE_LINES]
        assert sorted(handed[reader][SHAPE_LINES:]) == sorted(wanted), reader
    near_misses = [line for line in handed["oom"][SHAPE_LINES:] if any(near in line for near in NEAR_MISS)]
    assert near_misses == [line for line in lines[xid_line : xid_line + 4] if any(near in line for near in NEAR_MISS)]
    xid = next(f for f in report.findings if f.code == "Xid 79")
    assert xid.evidence == [lines[xid_line - 1]]
    oom = next(f for f in report.findings if f.code == "host-oom")
    assert f"({kills} kills, lines {SHAPE_LINES + 1}-" in oom.message


def _hazard(lines: list[str], hazard: str) -> bytes:
    """The log as pasted with one hazard, through every line (the cleaner in triage/paste.py takes each off)."""
    if hazard == "crlf":
        return "\r\n".join(lines).encode() + b"\r\n"
    if hazard == "quoted":
        return "".join(f"> {line}\n" for line in lines).encode()
    if hazard == "indented":
        return "".join(f"    {line}\n" for line in lines).encode()
    if hazard == "colour":
        return "".join(f"\x1b[0m{line}\x1b[0m\n" for line in lines).encode()
    # a terminal 80 columns wide: a longer line goes on on the next
    return "".join(line[i : i + 80] + "\n" for line in lines for i in range(0, len(line), 80)).encode()


@pytest.mark.parametrize("hazard", ["crlf", "quoted", "indented", "colour", "wrapped"])
def test_a_big_pasted_kernel_log_is_read_whole_past_its_sample(hazard: str) -> None:
    """A trigger deep in a pasted log is found and read as the tool printed it: the same findings as the clean log.
    A wrapped line's rest holds no trigger, so a wrapped paste's candidates bring their next lines to be rejoined."""
    lines, xid_line, kills = _big_log()
    lines[10] = "[    10.000000] " + XID_79.replace("79", "13")  # a wrapped line in the sample: the wrap is learnt
    clean = triage_stream(io.BytesIO("\n".join(lines).encode() + b"\n"), "clean")
    pasted = triage_stream(io.BytesIO(_hazard(lines, hazard)), hazard)
    # a wrapped paste has more lines than the log: the lines a finding names are its own
    unnumbered = re.compile(r"lines \d+-\d+")
    assert [(f.code, unnumbered.sub("", f.message), f.evidence) for f in pasted.findings] == [
        (f.code, unnumbered.sub("", f.message), f.evidence) for f in clean.findings
    ]
    oom = next(f for f in pasted.findings if f.code == "host-oom")
    assert "anon-rss 512 KiB" in oom.message and f"({kills} kills" in oom.message
    assert next(f for f in pasted.findings if f.code == "Xid 79").evidence == [lines[xid_line - 1]]
