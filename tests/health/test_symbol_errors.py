"""Symbol errors against a bit-error-rate budget, judged once for the agent, the fabric service and triage: each
window just short of its budget and just past it, the longer window a warning, and no rate falling back to the
counter's threshold."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.errors import ManifestError
from gpufleet.health.symbol_errors import SymbolErrorBudget
from gpufleet.health.thresholds import BerWindow, SymbolErrors, load_thresholds
from gpufleet.model import Severity

BUDGET = SymbolErrorBudget()
SHORT, LONG = BUDGET.windows


def test_the_windows_are_nvidias_two() -> None:
    # the UFM PDR plugin's NDR rule: 1e-14 over 12 minutes (2.88 errors at 400 Gb/s), 1e-15 over 125 (3 errors)
    assert [(w.window_s, w.ber) for w in BUDGET.windows] == [(720, 1e-14), (7500, 1e-15)]
    assert (SHORT.budget(400), LONG.budget(400)) == (pytest.approx(2.88), pytest.approx(3.0))
    assert BUDGET.targets() == "1e-14 over 12 min and 1e-15 over 125 min"


@pytest.mark.parametrize(
    ("short", "long", "severity", "over"),
    [
        (2, 2, None, ()),  # within both
        (3, 3, Severity.critical, ("12 min",)),  # over 2.88 in 12 minutes
        (0, 3, None, ()),  # 3 in 125 minutes is not over 3.0
        (0, 4, Severity.warning, ("125 min",)),  # over the long window's budget only
        (3, 4, Severity.critical, ("12 min", "125 min")),  # both: the short window's says how bad
    ],
)
def test_each_window_against_its_budget(
    short: float, long: float, severity: Severity | None, over: tuple[str, ...]
) -> None:
    verdict = BUDGET.judge([(short, 720), (long, 7500)], 400)
    assert (verdict.severity if verdict else None) == severity
    windows = {SHORT.window_s: "12 min", LONG.window_s: "125 min"}
    assert (tuple(windows[b.window.window_s] for b in verdict.breaches) if verdict else ()) == over


def test_a_breach_says_the_rate_it_measured() -> None:
    verdict = BUDGET.judge([(2, 720), (2, 7500)], 200)  # 200 Gb/s: 1.44 allowed in 12 minutes, 1.5 in 125
    assert verdict is not None and verdict.severity is Severity.critical
    assert verdict.describe().startswith("2 in 12 min: a bit error rate of about 1.4e-14, over 1e-14 (1.44 allowed")
    assert "2 in 125 min" in verdict.describe() and "over 1e-15" in verdict.describe()


def test_a_reading_covering_longer_than_a_window_is_held_against_that_time() -> None:
    # 5 errors in an hour at 400 Gb/s: 1.4e-15 on average, within 1e-14 over the hour, over 1e-15 over 125 minutes
    verdict = BUDGET.judge_reading(5, 3600, 400)
    assert verdict is not None and verdict.severity is Severity.warning
    assert [b.window for b in verdict.breaches] == [LONG]


@pytest.mark.parametrize("rate", [None, 0.0, float("nan")])
def test_without_a_rate_the_count_meets_the_counters_threshold(rate: float | None) -> None:
    assert BUDGET.threshold == 10  # infiniband-diags' error_thresholds
    assert BUDGET.judge([(10, 720), (50, 7500)], rate) is None  # the short window's count, not over 10
    verdict = BUDGET.judge([(11, 720), (11, 7500)], rate)
    assert verdict is not None and verdict.severity is Severity.warning and not verdict.breaches
    assert "link rate unknown" in verdict.describe()


def test_a_site_sets_its_own_windows(tmp_path: Path) -> None:
    site = tmp_path / "thresholds.yaml"
    site.write_text("symbol_errors:\n  windows: [{window_s: 3600, ber: 1.0e-13}]\n", encoding="utf-8")
    own = SymbolErrorBudget(load_thresholds(site))
    assert own.windows == (BerWindow(window_s=3600, ber=1e-13),)
    assert own.judge([(143, 3600)], 400) is None and own.judge([(145, 3600)], 400) is not None
    with pytest.raises(ValueError, match="2 counts for 1"):
        own.judge([(1, 720), (1, 7500)], 400)
    site.write_text("infiniband:\n  symbol_ber: 1.0e-12\n", encoding="utf-8")
    with pytest.raises(ManifestError, match=r"infiniband\.symbol_ber moved"):
        load_thresholds(site)


def test_windows_are_kept_shortest_first() -> None:
    section = SymbolErrors(windows=[BerWindow(window_s=7500, ber=1e-15), BerWindow(window_s=720, ber=1e-14)])
    assert [w.window_s for w in SymbolErrorBudget(section).windows] == [720, 7500]
