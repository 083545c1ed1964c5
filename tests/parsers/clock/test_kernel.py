"""The kernel's adjtimex state: STA_UNSYNC and TIME_ERROR say unsynchronised, maxerror bounds the error."""

from __future__ import annotations

import pytest

from gpufleet.parsers.clock.kernel import STA_NANO, STA_UNSYNC, TIME_ERROR, clock_from_timex


def test_synchronised_kernel_clock() -> None:
    fact = clock_from_timex(0, STA_NANO, 1500, 20, 7.0)
    assert fact.source == "kernel" and fact.synchronised is True and fact.offset_s is None
    assert fact.error_s == pytest.approx(0.0015) and fact.leap.startswith("TIME_OK STA_NANO")


@pytest.mark.parametrize(("state", "status"), [(0, STA_UNSYNC), (TIME_ERROR, 0), (TIME_ERROR, STA_UNSYNC | STA_NANO)])
def test_unsynchronised_kernel_clock(state: int, status: int) -> None:
    assert clock_from_timex(state, status, 16_000_000, 16_000_000, 0.0).synchronised is False
