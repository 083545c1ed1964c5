"""The generated alert rules (with the default Xid policy's ratings) evaluated by promtool over given series: what
the consistency tests use to ask "would this alert fire on these series, with these labels and texts"."""

from __future__ import annotations

import subprocess
from pathlib import Path

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
