"""Time daemons' reports through triage: told by content, a clock its daemon calls unsynchronised is
health.clock_skew's finding, and a synchronised clock further from true time than thresholds' clock.skew_limit_s
is one too (the threshold read from the thresholds file, not a copy)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from gpufleet.health.clock_skew import ACTION
from gpufleet.model import RootCause, Severity
from gpufleet.triage.report import TriageReport
from gpufleet.triage.run import triage_lines

DATA = Path(__file__).parents[2] / "parsers" / "clock" / "data"

# the real captures beside the parsers' tests: format, verdict, and whether a finding names the offset
EXPECTED = {
    "chrony_tracking_csv_librenms345.txt": ("chronyc-tracking", "healthy"),
    "chrony_tracking_rockstor2098.txt": ("chronyc-tracking", "healthy"),
    "chrony_tracking_scale_network121.txt": ("chronyc-tracking", "healthy"),
    "chrony_tracking_tidb_insight57.txt": ("chronyc-tracking", "healthy"),
    "ntpq_rv_tidb_insight57.txt": ("ntpq-rv", "healthy"),
    "show_timesync_zabbix39.txt": ("timedatectl-timesync", "healthy"),
    "timesync_status_systemd16492.txt": ("timedatectl-timesync", "degraded"),  # offset -1.087495 s
}

# what chronyc tracking prints while chronyd has no selected source (chrony client.c print_report with a zero
# reference and leap status LEAP_Unsynchronised): the values are chronyd's resets, not a measurement
CHRONY_UNSYNCHRONISED = """\
Reference ID    : 00000000 ()
Stratum         : 0
Ref time (UTC)  : Thu Jan 01 00:00:00 1970
System time     : 0.000000000 seconds fast of NTP time
Last offset     : +0.000000000 seconds
RMS offset      : 0.000000000 seconds
Frequency       : 0.000 ppm slow
Residual freq   : +0.000 ppm
Skew            : 0.000 ppm
Root delay      : 1.000000000 seconds
Root dispersion : 1.000000000 seconds
Update interval : 0.0 seconds
Leap status     : Not synchronised
"""


def _triage(text: str, fmt: str | None = None) -> TriageReport:
    return triage_lines(io.StringIO(text), "test", fmt=fmt)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_real_capture_is_told_and_judged(name: str) -> None:
    report = _triage((DATA / name).read_text())
    assert (report.format, report.verdict) == EXPECTED[name]


def test_an_unsynchronised_chrony_is_the_health_finding() -> None:
    report = _triage(CHRONY_UNSYNCHRONISED)
    assert report.format == "chronyc-tracking" and report.verdict == "degraded"
    [finding] = report.findings
    assert finding.code == RootCause.clock_unsynchronised.value and finding.severity is Severity.warning
    assert "not synchronised" in finding.message and "chrony's leap status is Not synchronised" in finding.evidence[0]
    assert "Leap status     : Not synchronised" in finding.evidence
    assert finding.fix.startswith(ACTION)


def test_an_unsynchronised_chrony_in_csv_and_a_lost_ntpd_are_the_same_finding() -> None:
    csv = (DATA / "chrony_tracking_csv_librenms345.txt").read_text().replace(",Normal", ",Not synchronised")
    ntpq = (DATA / "ntpq_rv_tidb_insight57.txt").read_text()
    ntpq = ntpq.replace("status=0615 leap_none, sync_ntp", "status=c618 leap_alarm, sync_unspec").replace(
        "leap=00", "leap=11"
    )
    for text, fmt, said in ((csv, "chronyc-tracking", "chrony's"), (ntpq, "ntpq-rv", "ntpd's leap indicator is 11")):
        report = _triage(text)
        assert report.format == fmt
        assert [f.code for f in report.findings] == [RootCause.clock_unsynchronised.value]
        assert said in report.findings[0].evidence[0]


def test_timesyncd_without_an_answer_is_unsynchronised() -> None:
    """`timedatectl show-timesync` before any server answered: no NTPMessage (systemd's timedatectl.c)."""
    text = "\n".join(
        line for line in (DATA / "show_timesync_zabbix39.txt").read_text().splitlines() if "NTPMessage" not in line
    )
    report = _triage(text)
    assert report.format == "timedatectl-timesync"
    assert [f.code for f in report.findings] == [RootCause.clock_unsynchronised.value]


def test_the_offset_is_judged_against_the_thresholds_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """timesyncd says the clock is 1.087 s ahead: past the default 1 ms, not past a limit an operator set to 2 s."""
    text = (DATA / "timesync_status_systemd16492.txt").read_text()
    [finding] = _triage(text).findings
    assert finding.code == RootCause.clock_skew.value and "1087.495 ms ahead of true time" in finding.message
    assert "Offset: -1.087495s" in finding.evidence
    override = tmp_path / "thresholds.yaml"
    override.write_text("clock:\n  skew_limit_s: 2.0\n")
    monkeypatch.setenv("GPUFLEET_THRESHOLDS", str(override))
    report = _triage(text)
    assert report.verdict == "healthy" and not report.findings


def test_the_error_bound_is_noted_not_judged() -> None:
    """chrony's bound (|offset| + dispersion + delay / 2) over the limit is said, with no verdict of its own."""
    report = _triage((DATA / "chrony_tracking_tidb_insight57.txt").read_text())
    assert report.verdict == "healthy"
    assert any("bounds the clock's error at 38.689 ms, more than clock.skew_limit_s" in n for n in report.notes)


def test_a_text_that_is_not_the_forced_format_is_unknown_saying_why() -> None:
    report = _triage("hello\n", fmt="chronyc-tracking")
    assert report.verdict == "unknown" and "System time or Leap status" in " ".join(report.notes)
