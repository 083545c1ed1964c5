"""The burn windows, written once for the SLO rules and the SLO detector: rows of the SRE workbook's Table 5-8."""

from __future__ import annotations

import pytest

from gpufleet.telemetry.monitoring.objectives import BURN_WINDOWS, PAGE_WINDOW, TICKET_WINDOW


def test_the_burn_windows_are_the_workbooks_rows() -> None:
    # "The Site Reliability Workbook", chapter 5, Table 5-8: 1 h / 5 min at 14.4 (2 % of a 30-day budget) and
    # 6 h / 30 min at 6 (5 %); each short window is 1/12 of its long one
    assert BURN_WINDOWS == (PAGE_WINDOW, TICKET_WINDOW)
    assert [(w.long_s, w.short_s, w.budget_share) for w in BURN_WINDOWS] == [(3600, 300, 0.02), (21600, 1800, 0.05)]
    assert [w.threshold(30) for w in BURN_WINDOWS] == [pytest.approx(14.4), pytest.approx(6.0)]
    assert all(w.short_s * 12 == w.long_s for w in BURN_WINDOWS)
    # the rates scale with the budget: a 7-day one
    assert [w.threshold(7) for w in BURN_WINDOWS] == [pytest.approx(3.36), pytest.approx(1.4)]
