"""The generated alert rules (with the default Xid policy's ratings) evaluated by promtool over given series: what
the consistency tests use to ask "would this alert fire on these series, with these labels and texts"."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

from gpufleet.health.thresholds import detection_limits
from gpufleet.health.xid_policy import xid_ratings
from gpufleet.telemetry.monitoring.alert_rules import RULE_FILE, dump, rule_groups


def assert_alerts(
    tmp_path: Path,
    series: list[dict[str, str]],
    expected: dict[str, list[dict[str, object]]],
    *,
    interval: str = "1m",
    eval_time: str = "2m",
) -> None:
    """Each alert in `expected` fires at `eval_time` with exactly the listed labels and annotations (none listed: it
    stays quiet) over `series` sampled (and the rules evaluated) every `interval`."""
    tests = {
        "rule_files": [RULE_FILE],
        "evaluation_interval": interval,
        "tests": [
            {
                "interval": interval,
                "input_series": series,
                "alert_rule_test": [
                    {"eval_time": eval_time, "alertname": name, "exp_alerts": alerts}
                    for name, alerts in expected.items()
                ],
            }
        ],
    }
    (tmp_path / RULE_FILE).write_text(dump(rule_groups(xids=xid_ratings(), limits=detection_limits())))
    (tmp_path / "tests.yml").write_text(dump(tests))
    run = subprocess.run(["promtool", "test", "rules", "tests.yml"], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]


# The shipped rules as generated with the defaults: every variant, and one per name (a per-price rule: its last)
SHIPPED: list[dict[str, Any]] = [
    r for g in rule_groups(xids=xid_ratings(), limits=detection_limits())["groups"] for r in g["rules"]
]
RULES = {r["alert"]: r for r in SHIPPED}
XID_RULES = ("GpuXidFatal", "GpuXid", "GpuXidLineDependent")
_MATCHER = re.compile(r'DCGM_EXP_XID_ERRORS_COUNT\{xid(=~|!~)"([^"]*)"\} > 0')


def xid_alerts(code: int) -> list[str]:
    """The shipped Xid rules a DCGM_EXP_XID_ERRORS_COUNT series for `code` makes fire (Prometheus' label matchers
    are anchored regular expressions); promtool checks the same where the series are evaluated."""
    fired = []
    for name in XID_RULES:
        if name not in RULES:
            continue
        match = _MATCHER.fullmatch(RULES[name]["expr"])
        assert match is not None, RULES[name]["expr"]
        op, pattern = match.groups()
        if (re.fullmatch(pattern, str(code)) is not None) == (op == "=~"):
            fired.append(name)
    return fired
