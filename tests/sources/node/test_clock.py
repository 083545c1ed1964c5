"""The node's clock reader: the first time daemon that answers (run as commands on PATH that print real captures),
else the kernel's adjtimex state (the real system call)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gpufleet.sources.node.clock import ClockReader, read_adjtimex

DATA = Path(__file__).parents[2] / "parsers" / "clock" / "data"


def _command(bin_dir: Path, name: str, capture: str | None, code: int = 0) -> None:
    """An executable `name` that prints a capture (or nothing) and exits with `code`."""
    body = f"/bin/cat '{DATA / capture}'\n" if capture else "/bin/echo '506 Cannot talk to daemon' >&2\n"
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\n{body}exit {code}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PATH", str(tmp_path))
    return tmp_path


def test_the_kernel_state_is_read_through_adjtimex() -> None:
    fact = read_adjtimex(1.0)
    assert fact.source == "kernel" and fact.synchronised in (True, False) and fact.error_s is not None


def test_no_daemon_is_the_kernels_state(bin_dir: Path) -> None:
    assert ClockReader().read().source == "kernel"


def test_chrony_first(bin_dir: Path) -> None:
    _command(bin_dir, "chronyc", "chrony_tracking_csv_librenms345.txt")
    _command(bin_dir, "timedatectl", "timesync_status_systemd16492.txt")
    fact = ClockReader().read()
    assert fact.source == "chrony" and fact.reference == "PPS (50505300)"


def test_a_daemon_that_does_not_answer_is_passed_over(bin_dir: Path) -> None:
    _command(bin_dir, "chronyc", None, code=1)  # installed, chronyd not running
    _command(bin_dir, "ntpq", "ntpq_rv_tidb_insight57.txt")
    assert ClockReader().read().source == "ntpd"


def test_timesyncd_without_an_offset_takes_the_kernels_verdict(bin_dir: Path) -> None:
    _command(bin_dir, "timedatectl", "show_timesync_zabbix39.txt")
    fact = ClockReader().read()
    assert fact.source == "timesyncd" and fact.synchronised is True  # show-timesync's own Leap=0

    text = (DATA / "show_timesync_zabbix39.txt").read_text().replace("Leap=0, ", "")
    (bin_dir / "msg.txt").write_text(text)
    (bin_dir / "timedatectl").write_text(f"#!/bin/sh\n/bin/cat '{bin_dir / 'msg.txt'}'\n")
    fact = ClockReader().read()
    assert fact.source == "timesyncd" and fact.synchronised is read_adjtimex(0.0).synchronised


def test_a_hung_daemon_is_stopped(bin_dir: Path) -> None:
    path = bin_dir / "chronyc"
    path.write_text("#!/bin/sh\nexec /bin/sleep 30\n")
    path.chmod(0o755)
    assert os.access(path, os.X_OK)
    assert ClockReader(timeout_s=0.2).read().source == "kernel"
