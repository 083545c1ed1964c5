"""chrony's tracking report on real captures (text and CSV), signs as chrony's client.c prints them."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.errors import ParseError
from gpufleet.parsers.clock.chrony import parse_tracking

DATA = Path(__file__).parent / "data"


def test_a_clock_slow_of_ntp_time_is_behind() -> None:
    fact = parse_tracking((DATA / "chrony_tracking_rockstor2098.txt").read_text(), 100.0)
    assert fact.source == "chrony" and fact.synchronised is True and fact.time == 100.0
    assert fact.offset_s == pytest.approx(-0.000052616)
    assert fact.last_offset_s == pytest.approx(-0.000193872)
    assert fact.root_delay_s == pytest.approx(0.011188857)
    assert fact.root_dispersion_s == pytest.approx(0.001274664)
    # chronyc.adoc: |system time offset| + root dispersion + root delay / 2
    assert fact.error_s == pytest.approx(0.000052616 + 0.001274664 + 0.011188857 / 2)
    assert fact.stratum == 2 and fact.reference == "85.199.214.100 (55C7D664)" and fact.leap == "Normal"


def test_a_clock_fast_of_ntp_time_is_ahead_and_a_prompt_is_passed_over() -> None:
    fact = parse_tracking((DATA / "chrony_tracking_scale_network121.txt").read_text(), 0.0)
    assert fact.offset_s == pytest.approx(0.000260112)
    assert fact.last_offset_s == pytest.approx(0.000085454)
    assert fact.reference == "ntp1.bytestacker.com (B280042C)" and fact.stratum == 3


def test_the_csv_line_reads_the_signed_correction_the_other_way_round() -> None:
    # -c prints current_correction itself: negative is "fast" in the text form, so the clock is ahead
    fact = parse_tracking((DATA / "chrony_tracking_csv_librenms345.txt").read_text(), 0.0)
    assert fact.offset_s == pytest.approx(0.000000023)
    assert fact.last_offset_s == pytest.approx(0.000000019)
    assert fact.root_dispersion_s == pytest.approx(0.000004171)
    assert fact.stratum == 1 and fact.reference == "PPS (50505300)" and fact.synchronised is True


def test_both_forms_of_one_report_agree() -> None:
    text = parse_tracking((DATA / "chrony_tracking_tidb_insight57.txt").read_text(), 0.0)
    line = "85F3EEF3,ntp-a2.nict.go.jp,2,1641285038.000000000,0.000671486,-0.000040695,0.002843684,0.992,-0.000,"
    line += "0.028,0.071241446,0.002396419,2063.3,Normal"
    assert parse_tracking(line, 0.0) == text


def test_leap_status_not_synchronised_is_an_unsynchronised_clock() -> None:
    # the real report, its leap status as chrony prints it for LEAP_Unsynchronised
    text = (DATA / "chrony_tracking_rockstor2098.txt").read_text().replace("Normal", "Not synchronised")
    fact = parse_tracking(text, 0.0)
    assert fact.synchronised is False and fact.error_s is None and fact.leap == "Not synchronised"
    csv = (DATA / "chrony_tracking_csv_librenms345.txt").read_text().replace("Normal", "Not synchronised")
    assert parse_tracking(csv, 0.0).synchronised is False


@pytest.mark.parametrize("text", ["", "506 Cannot talk to daemon", "Reference ID : 00000000 ()"])
def test_what_is_not_a_report_is_an_error_naming_the_command(text: str) -> None:
    with pytest.raises(ParseError, match="chronyc"):
        parse_tracking(text, 0.0)
