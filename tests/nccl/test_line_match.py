"""Catalogue patterns matched stretch after stretch give the regex's own answer on every line, and a long line of near
misses is read in one pass."""

from __future__ import annotations

import random
import re

import pytest

from gpufleet.nccl.diagnose import _hand_patterns, catalog, classify_line, literal_runs
from gpufleet.nccl.line_match import Ordered, _split_wildcards

PATTERNS = [entry.regex for entry in catalog()] + [pattern for _, pattern, _ in _hand_patterns()]
# What stands in for a %s, %d or %p, and what breaks a message: digits next to digits, a bracket, a stray colon.
FILLERS = ["", "", "1", "12", "-3", "0x1f", "(nil)", "abc", " ", ":", " : ", "1,2", "x1", ")", "<42>", "\t", "é"]


def _lines(pattern: Ordered, rng: random.Random) -> list[str]:
    """Lines built from the pattern's literal stretches with fillers between them: some whole, some with a stretch
    dropped, repeated or swapped."""
    stretches = [text for _, text in (_split_wildcards(pattern.pattern) or ([], 0))[0]] or [pattern.pattern]
    runs = [run for text in stretches for run in literal_runs(text) or re.findall(r"[A-Za-z_ :/.=-]{3,}", text)]
    lines = []
    for _ in range(40):
        parts = list(runs)
        roll = rng.random()
        if parts and roll < 0.25:
            del parts[rng.randrange(len(parts))]
        elif parts and roll < 0.4:
            parts.insert(rng.randrange(len(parts) + 1), rng.choice(parts))
        elif len(parts) > 1 and roll < 0.5:
            i = rng.randrange(len(parts) - 1)
            parts[i], parts[i + 1] = parts[i + 1], parts[i]
        line = rng.choice(FILLERS)
        for part in parts:
            line += part + "".join(rng.choice(FILLERS) for _ in range(rng.randint(0, 2)))
        lines.append(line)
    return lines


def test_every_catalogue_pattern_gives_the_regex_answer() -> None:
    rng = random.Random(20240611)
    matched = tried = 0
    for pattern in PATTERNS:
        for line in _lines(pattern, rng):
            expected = pattern.regex.search(line) is not None
            assert pattern.search(line) is expected, (pattern.pattern, line)
            matched += expected
            tried += 1
    assert matched > tried // 5  # the lines test both answers, not only misses


@pytest.mark.parametrize(
    ("pattern", "stretches", "tail"),
    [
        (r"(.*?): connect to (.*?) failed : (.*)", [(0, ": connect to "), (0, " failed : ")], 0),
        (r"(?:.+?) failed(?:.+?)", [(1, " failed")], 1),
        (r"shm_open .*failed", [(0, "shm_open "), (0, "failed")], 0),
        (r"a[.*]b\.\*c", [(0, r"a[.*]b\.\*c")], 0),  # a class and escapes are not wildcards
        (r"a[]x.*]b", [(0, r"a[]x.*]b")], 0),  # a leading ] belongs to the class
        (r"x \((.*)\) y", [(0, r"x \("), (0, r"\) y")], 0),  # escaped brackets around a wildcard
        (r"x (?:a(.*)b) y", [(0, r"x (?:a(.*)b) y")], 0),  # inside a group: left to the regex
    ],
)
def test_the_stretches_of_a_pattern(pattern: str, stretches: list[tuple[int, str]], tail: int) -> None:
    assert _split_wildcards(pattern) == (stretches, tail)


@pytest.mark.parametrize("pattern", [r"a.*b|c", r"(.*)?x", r"(\w+) .* \1"])
def test_patterns_kept_whole(pattern: str) -> None:
    assert _split_wildcards(pattern) is None
    ordered = Ordered(pattern)
    for line in ("a b", "x", "ab c ab", "zz"):
        assert ordered.search(line) is (ordered.regex.search(line) is not None)


def test_a_line_with_a_newline_is_left_to_the_regex() -> None:
    ordered = Ordered(r"(.*?): connect to (.*?) failed")
    assert not ordered.search("x: connect to y\nfailed")
    assert ordered.search("x: connect to y failed")


def test_a_megabyte_of_near_misses_and_the_message_at_its_end() -> None:
    near_misses = "h:1:1 [0] NCCL WARN " + "x: connect to y " * 65_536  # 1 MiB: every word but "failed"
    assert classify_line(near_misses) is None
    assert classify_line(near_misses + "failed : Connection refused") == "bootstrap_unreachable"
    colons = "h:1:1 [0] NCCL WARN error " + "a : b " * 175_000 + "0x1f is not a valid pointer"
    assert classify_line(colons) == "invalid_usage"
