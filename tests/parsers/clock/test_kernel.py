"""The kernel's adjtimex state: a clock is synchronised while a daemon keeps maxerror under 16 s, whatever
STA_UNSYNC says (chrony clears it only with rtcsync); maxerror bounds the error."""

from __future__ import annotations

import pytest

from gpufleet.parsers.clock.kernel import STA_NANO, STA_UNSYNC, TIME_ERROR, clock_from_timex


def test_synchronised_kernel_clock() -> None:
    fact = clock_from_timex(0, STA_NANO, 1500, 20, 7.0)
    assert fact.source == "kernel" and fact.synchronised is True and fact.offset_s is None
    assert fact.error_s == pytest.approx(0.0015) and fact.leap.startswith("TIME_OK STA_NANO")


def test_chrony_without_rtcsync_leaves_sta_unsync_on_a_synchronised_clock() -> None:
    fact = clock_from_timex(TIME_ERROR, STA_UNSYNC | STA_NANO, 12_000, 40, 0.0)
    assert fact.synchronised is True and fact.error_s == pytest.approx(0.012) and "STA_UNSYNC" in fact.leap


@pytest.mark.parametrize("status", [STA_UNSYNC, 0])
def test_maxerror_at_the_phase_limit_is_unsynchronised(status: int) -> None:
    # the kernel grows maxerror 500 us a second when no daemon writes it, and stops at 16 s
    assert clock_from_timex(TIME_ERROR, status, 16_000_000, 16_000_000, 0.0).synchronised is False
