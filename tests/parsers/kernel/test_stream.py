"""The lines of a kernel log worth parsing, read from a byte stream a chunk at a time: the same lines, with the
same numbers, as reading it line by line."""

from __future__ import annotations

import io
import random
from pathlib import Path

import pytest

from gpufleet.parsers.kernel import stream
from gpufleet.parsers.kernel.kmsg import KmsgParser, parse_kmsg


def _key(events: list) -> list[tuple]:
    return [(e.kind, e.line, e.xid, e.sxid, e.pci, e.message) for e in events]


def _candidates_by_hand(text: str, max_line: int) -> list[tuple[int, str]]:
    """What candidate_lines must give, one line at a time: the lines holding a candidate word, each followed by the
    next four lines."""
    wanted, until = [], 0
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for number, line in enumerate(lines, start=1):
        line = line[:max_line]
        if any(w.decode() in line for w in stream.CANDIDATE_WORDS) or line.startswith("{"):
            wanted.append((number, line))
            until = number + 4
        elif number <= until:
            wanted.append((number, line))
    return wanted


@pytest.mark.parametrize("seed", range(6))
def test_candidate_lines_match_a_line_by_line_reading(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    rng = random.Random(seed)
    words = ["eth0 up", "NVRM: Xid x", "SXid y", "plain", '{"MESSAGE":1}', "ib0: lost carrier", "", "x" * 30,
             "mlx5_core 0000:0c:00.0 ib0: Link up", "NVRM NVRM", "no NVR M here"]  # fmt: skip
    for _ in range(300):
        text = "\n".join(rng.choice(words) + str(i) for i in range(rng.randint(0, 60)))
        text += "\n" if rng.random() < 0.5 else ""
        monkeypatch.setattr(stream, "CHUNK_BYTES", rng.choice([1, 3, 7, 16, 1000]))
        got = list(stream.candidate_lines(io.BytesIO(text.encode())))
        assert got == _candidates_by_hand(text, stream.MAX_LINE_BYTES), text


def test_an_overlong_line_is_cut_and_the_next_one_keeps_its_number(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stream, "CHUNK_BYTES", 8)
    monkeypatch.setattr(stream, "MAX_LINE_BYTES", 16)
    text = "NVRM: " + "z" * 100 + "\nplain\nNVRM: Xid\n"
    got = list(stream.candidate_lines(io.BytesIO(text.encode())))
    assert got[0][0] == 1 and got[0][1].startswith("NVRM: zz") and len(got[0][1]) <= 24
    assert got[-1] == (3, "NVRM: Xid")


def test_candidate_lines_keep_the_file_line_numbers_for_the_parser(corpus: Path) -> None:
    noise = "".join(f"[{i:>6}.000000] eth0: link up\n" for i in range(5000))
    text = noise + (corpus / "burst_xid79_sxid_gpud.log").read_text() + noise
    parser = KmsgParser()
    events = []
    for number, line in stream.candidate_lines(io.BytesIO(text.encode())):
        parser.skip_to(number)
        events += parser.feed_line(line)
    events += parser.finish()
    assert sorted(_key(events)) == sorted(_key(parse_kmsg(text)))
