"""Whatever text comes in, each clock parser gives a reading or a ParseError naming the fix, never a traceback: random
text, and the real captures cut short or with a line lost."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.errors import ParseError
from gpufleet.model.observe import ClockFact
from gpufleet.parsers.clock.chrony import parse_tracking
from gpufleet.parsers.clock.ntpd import parse_rv
from gpufleet.parsers.clock.timesyncd import parse_timesync_status

DATA = Path(__file__).parent / "data"
PARSERS: dict[str, Callable[[str, float], ClockFact]] = {
    "chrony": parse_tracking,
    "ntpq": parse_rv,
    "timesync": parse_timesync_status,
    "show_timesync": parse_timesync_status,
}


def _reads_or_refuses(parse: Callable[[str, float], ClockFact], text: str) -> None:
    try:
        assert isinstance(parse(text, 0.0), ClockFact)
    except ParseError as exc:
        assert exc.fix


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=400), st.sampled_from(sorted(PARSERS)))
def test_random_text(text: str, name: str) -> None:
    _reads_or_refuses(PARSERS[name], text)


@pytest.mark.parametrize("capture", sorted(p.name for p in DATA.glob("*.txt") if not p.name.endswith(".source.txt")))
def test_real_captures_cut_short_or_missing_a_line(capture: str) -> None:
    text = (DATA / capture).read_text()
    parse = next(PARSERS[k] for k in sorted(PARSERS, key=len, reverse=True) if capture.startswith(k))
    for cut in range(0, len(text), max(1, len(text) // 30)):
        _reads_or_refuses(parse, text[:cut])
    lines = text.splitlines()
    for k in range(len(lines)):
        _reads_or_refuses(parse, "\n".join(lines[:k] + lines[k + 1 :]))
