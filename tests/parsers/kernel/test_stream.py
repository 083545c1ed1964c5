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


def _candidates_by_hand(text: str, max_line: int, context_after_all: bool = False) -> list[tuple[int, str]]:
    """What candidate_lines must give, one line at a time: the lines holding a candidate word; one holding a parser's
    word (or a JSON line) is followed by the next four lines, and with `context_after_all` every one is."""
    wanted, until = [], 0
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for number, line in enumerate(lines, start=1):
        line = line[:max_line]
        parsers = any(w.decode() in line for w in stream.PARSER_WORDS) or line.startswith("{")
        if parsers or any(w.decode() in line for w in stream.LINE_WORDS):
            wanted.append((number, line))
            if parsers or context_after_all:
                until = number + 4
        elif number <= until:
            wanted.append((number, line))
    return wanted


@pytest.mark.parametrize("seed", range(6))
def test_candidate_lines_match_a_line_by_line_reading(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    rng = random.Random(seed)
    words = ["eth0 up", "NVRM: Xid x", "SXid y", "plain", '{"MESSAGE":1}', "ib0: lost carrier", "", "x" * 30,
             "mlx5_core 0000:0c:00.0 ib0: Link up", "NVRM NVRM", "no NVR M here", "Killed process 1 (a)",
             "x {not json} Killed process NVRM", "oom_reaper: reaped 2 (b)", " amdgpu 0000:1c:00.0: x"]  # fmt: skip
    for _ in range(300):
        text = "\n".join(rng.choice(words) + str(i) for i in range(rng.randint(0, 60)))
        text += "\n" if rng.random() < 0.5 else ""
        if rng.random() < 0.3:
            text = text.replace("\n", "\r\n")
        monkeypatch.setattr(stream, "CHUNK_BYTES", rng.choice([1, 3, 7, 16, 1000]))
        every = rng.random() < 0.3
        got = list(stream.candidate_lines(io.BytesIO(text.encode()), context_after_all=every))
        assert got == _candidates_by_hand(text.replace("\r\n", "\n"), stream.MAX_LINE_BYTES, every), text


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


def test_a_word_cut_by_a_chunk_boundary_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks end at any byte: a word split across two reads is found whole, on its own line number."""
    noise = "[ 1.000000] eth0: renamed from veth1f\n" * 3
    xid = "[ 2.000000] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python3, GPU has fallen off the bus."
    kill = "[ 3.000000] Memory cgroup out of memory: Killed process 7 (python3) total-vm:1kB, anon-rss:1kB"
    text = f"{noise}{xid}\n{noise}{kill}\n{noise}"
    for where in (text.index("NVRM"), text.index("Killed process")):
        for cut in range(where + 1, where + 14):  # every byte inside the word
            monkeypatch.setattr(stream, "CHUNK_BYTES", cut)
            got = list(stream.candidate_lines(io.BytesIO(text.encode())))
            assert (4, xid) in got and (8, kill) in got, cut


def test_only_a_parsers_word_brings_the_next_lines() -> None:
    """An OOM kill or a link event is a report of one line: the noise after it is not read. After an NVRM line the
    next four are (a fallen-off-the-bus report spans three), and a JSON line too (journald's multi-line entries)."""
    noise = [f"[ {i}.000000] cni0: port {i}(veth{i}) entered forwarding state" for i in range(6)]
    kill = "[ 9.000000] Memory cgroup out of memory: Killed process 7 (python3) total-vm:1kB, anon-rss:1kB"
    link = "Jun  5 10:11:12 node7 systemd-networkd[812]: ib0: lost carrier"
    for single in (kill, link):
        assert list(stream.candidate_lines(io.BytesIO("\n".join([single, *noise]).encode()))) == [(1, single)]
    for multi in ("[ 9.000000] NVRM: The NVIDIA GPU 0000:b3:00.0", '{"MESSAGE": "x"}', "amdgpu 0000:1c:00.0: x"):
        got = list(stream.candidate_lines(io.BytesIO("\n".join([multi, *noise]).encode())))
        assert got == list(enumerate([multi, *noise[:4]], start=1))
    # a line holding both kinds of word brings its next lines, whichever word comes first on it
    both = f"{kill} NVRM"
    got = list(stream.candidate_lines(io.BytesIO("\n".join([both, *noise]).encode())))
    assert got == list(enumerate([both, *noise[:4]], start=1))


def test_the_parsers_words_are_told_from_the_other_readers_words_by_their_first_byte() -> None:
    """candidate_lines tells which reader a found word is for by its first byte: no two kinds may share one."""
    assert not stream.PARSER_FIRST_BYTES & {word[0] for word in stream.LINE_WORDS}
