"""health.temperature: a reading against its limits, one test per edge; the device's own limits over the catalog's."""

from __future__ import annotations

from gpufleet.catalog import get_gpu_model
from gpufleet.health.temperature import TemperatureLimits, catalog_limits, judge_temperature, valid_limit
from gpufleet.model import Severity

LIMITS = TemperatureLimits(shutdown=110, slowdown=100, max_operating=95)


def test_below_every_limit_is_no_issue() -> None:
    assert judge_temperature(94.9, LIMITS) is None
    assert judge_temperature(300, TemperatureLimits()) is None  # no limit known: not judged


def test_at_each_limit_the_most_severe_one_reached_is_said() -> None:
    at_max = judge_temperature(95, LIMITS)
    assert at_max is not None and (at_max.limit_name, at_max.severity) == ("max operating", Severity.warning)
    at_slowdown = judge_temperature(100, LIMITS)
    assert at_slowdown is not None and (at_slowdown.code, at_slowdown.severity) == (
        "GPU temperature over slowdown",
        Severity.warning,
    )
    at_shutdown = judge_temperature(110, LIMITS, "memory")
    assert at_shutdown is not None and (at_shutdown.code, at_shutdown.severity) == (
        "memory temperature over shutdown",
        Severity.critical,
    )
    assert at_shutdown.message == "110 C, at or over its shutdown temperature 110 C"


def test_the_devices_own_limits_win_and_the_catalog_fills_the_rest() -> None:
    own = TemperatureLimits(shutdown=105)
    merged = own.over(catalog_limits(get_gpu_model("mi300x")))
    assert (merged.shutdown, merged.slowdown) == (105, 100)
    assert not catalog_limits(None).known() and catalog_limits(get_gpu_model("mi300x")).known()


def test_a_printed_zero_or_sentinel_is_no_limit() -> None:
    assert valid_limit(0) is None and valid_limit(255.0 * 1000) is None and valid_limit(None) is None
    assert valid_limit(100.0) == 100.0
