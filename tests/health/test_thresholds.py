"""The detection thresholds: the defaults, a site's file over them (given, or named by GPUFLEET_THRESHOLDS), and the
values the alert rules take from them."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.errors import ManifestError
from gpufleet.health.thresholds import THRESHOLDS_ENV, detection_limits, load_thresholds
from gpufleet.model import RootCause


def test_a_site_file_overrides_only_what_it_names(tmp_path: Path) -> None:
    site = tmp_path / "site.yaml"
    site.write_text("idle: {util_percent: 2}\n")
    t = load_thresholds(site)
    assert t.idle.util_percent == 2 and t.idle.hold_s == load_thresholds().idle.hold_s


def test_gpufleet_thresholds_names_the_site_file_for_every_door(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site.yaml"
    site.write_text("thermal: {clock_ratio: 0.8}\n")
    monkeypatch.setenv(THRESHOLDS_ENV, str(site))
    assert load_thresholds().thermal.clock_ratio == 0.8
    assert detection_limits().thermal_clock_ratio == 0.8  # so the generated rules judge by it too
    monkeypatch.setenv(THRESHOLDS_ENV, str(tmp_path / "missing.yaml"))
    with pytest.raises(ManifestError, match=r"missing\.yaml"):
        load_thresholds()


def test_a_bad_value_names_the_key_and_the_fix(tmp_path: Path) -> None:
    site = tmp_path / "site.yaml"
    site.write_text("idle: {util_percent: lots}\n")
    with pytest.raises(ManifestError, match=r"idle\.util_percent") as err:
        load_thresholds(site)
    assert "thresholds.yaml" in (err.value.fix or "")


def test_the_rules_limits_are_the_detectors_thresholds() -> None:
    t, limits = load_thresholds(), detection_limits()
    assert (limits.thermal_clock_ratio, limits.thermal_hold_s, limits.thermal_window_s) == (
        t.thermal.clock_ratio,
        t.thermal.hold_s,
        t.thermal.window_s,
    )
    assert (limits.idle_util_percent, limits.idle_hold_s) == (t.idle.util_percent, t.idle.hold_s)
    assert limits.ber_windows == tuple((w.window_s, w.ber) for w in t.symbol_errors.windows)
    assert limits.link_down_hold_s == t.control.resolve_after_s[RootCause.ib_link_down]
    limits_by_counter = {p.counter: (p.limit, p.cause) for p in limits.port_limits}
    assert limits_by_counter["PortRcvErrors"] == (t.infiniband.rcv_errors_per_window, "ib-symbol-errors")
    assert limits_by_counter["PortXmitDiscards"] == (t.infiniband.xmit_discards_per_window, "ib-congestion")
    assert limits_by_counter["LinkErrorRecoveryCounter"] == (t.fabric.link_recoveries_per_window, "ib-symbol-errors")
