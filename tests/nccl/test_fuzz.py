"""Bad input never raises anything but a ParseError."""

from __future__ import annotations

import contextlib

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.errors import ParseError
from gpufleet.nccl.diagnose import diagnose_texts
from gpufleet.nccl.perf_parser import parse_perf

PIECES = st.sampled_from(
    [
        "     1048576        262144     float     sum      -1    50.0   20.97   31.46      0    49.0   21.40",
        "# Avg bus bandwidth    : ",
        "#  Rank  0 Group  0 Pid  1 on h device  0 [0x1] NVIDIA H100 80GB HBM3",
        "[1,0]<stdout>:",
        "0: ",
        "[rank3]:",
        "\x1b[31m",
        "| 1K | 0.04 |",
        "h:1:1 [0] NCCL WARN Call to connect failed : Connection timed out",
        "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=",
        "N/A",
        "\x00\xff",
        "\n",
    ]
)
TEXT = st.lists(st.one_of(PIECES, st.text(max_size=40)), max_size=30).map("".join)


@settings(max_examples=60, deadline=None)
@given(TEXT)
def test_perf_parser_only_parse_errors(text: str) -> None:
    with contextlib.suppress(ParseError):
        parse_perf(text)


@settings(max_examples=60, deadline=None)
@given(st.lists(TEXT, min_size=1, max_size=3))
def test_diagnose_never_raises(texts: list[str]) -> None:
    dx = diagnose_texts([(f"rank{i}.log", t) for i, t in enumerate(texts)])
    assert dx.cls
