"""ntpd's system variables (`ntpq -c rv`) on a real capture: milliseconds, the server's clock minus this one."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.errors import ParseError
from gpufleet.parsers.clock.ntpd import parse_rv

DATA = Path(__file__).parent / "data"


def test_rv() -> None:
    fact = parse_rv((DATA / "ntpq_rv_tidb_insight57.txt").read_text(), 0.0)
    assert fact.source == "ntpd" and fact.synchronised is True and fact.leap == "leap=00"
    assert fact.offset_s == pytest.approx(-0.000671)
    assert fact.root_delay_s == pytest.approx(0.122293) and fact.root_dispersion_s == pytest.approx(0.101044)
    assert fact.error_s == pytest.approx(0.000671 + 0.101044 + 0.122293 / 2)
    assert fact.stratum == 3 and fact.reference == "133.18.174.255"


def test_leap_11_is_unsynchronised() -> None:
    text = (DATA / "ntpq_rv_tidb_insight57.txt").read_text().replace("leap=00", "leap=11")
    assert parse_rv(text, 0.0).synchronised is False


def test_not_rv_is_an_error() -> None:
    with pytest.raises(ParseError, match="ntpq"):
        parse_rv("ntpq: read: Connection refused", 0.0)
