"""systemd-timesyncd's status on real captures, spans in FORMAT_TIMESPAN's units."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.errors import ParseError
from gpufleet.parsers.clock.timesyncd import parse_timesync_status, timespan

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("34min 8s", 2048.0), ("40.580ms", 0.04058), ("-1.087495s", -1.087495), ("1us", 1e-6), ("2h 3min", 7380.0)],
)
def test_timespans(text: str, seconds: float) -> None:
    assert timespan(text) == pytest.approx(seconds)


def test_timesync_status_offset_is_the_servers_clock_minus_this_one() -> None:
    fact = parse_timesync_status((DATA / "timesync_status_systemd16492.txt").read_text(), 5.0)
    assert fact.source == "timesyncd" and fact.synchronised is True and fact.leap == "normal"
    assert fact.offset_s == pytest.approx(1.087495)  # "Offset: -1.087495s": the server is behind, this clock ahead
    assert fact.error_s == pytest.approx(1.087495 + 0.04058)
    assert fact.stratum == 2 and fact.reference == "(null) (3.debian.pool.ntp.org)"


def test_show_timesync_gives_the_leap_and_root_values_but_no_offset() -> None:
    fact = parse_timesync_status((DATA / "show_timesync_zabbix39.txt").read_text(), 0.0)
    assert fact.synchronised is True and fact.offset_s is None and fact.leap == "normal"
    assert fact.root_delay_s == pytest.approx(0.008926) and fact.root_dispersion_s == pytest.approx(0.00177)
    assert fact.stratum == 2 and fact.reference == "ntp.ubuntu.com"


def test_leap_3_and_no_answer_are_unsynchronised() -> None:
    show = (DATA / "show_timesync_zabbix39.txt").read_text().replace("Leap=0", "Leap=3")
    assert parse_timesync_status(show, 0.0).synchronised is False
    status = (DATA / "timesync_status_systemd16492.txt").read_text().replace("Leap: normal", "Leap: not synchronized")
    assert parse_timesync_status(status, 0.0).synchronised is False
    # print_ntp_status_info stops after the packet count when no server answered
    none_yet = "       Server: n/a (ntp.ubuntu.com)\nPoll interval: 0 (min: 32s; max 34min 8s)\n Packet count: 0\n"
    assert parse_timesync_status(none_yet, 0.0).synchronised is False


def test_not_a_status_is_an_error() -> None:
    with pytest.raises(ParseError, match="timesync-status"):
        parse_timesync_status("Local time: Thu 2026-12-03 16:00:00 UTC", 0.0)
