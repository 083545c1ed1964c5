"""The generated alert rules (with the default Xid policy's ratings) evaluated by promtool over given series: what
the consistency tests use to ask "would this alert fire on these series, with these labels and texts"."""

from __future__ import annotations

import subprocess
from pathlib import Path

from gpufleet.health.thresholds import detection_limits
from gpufleet.health.xid_policy import xid_ratings
from gpufleet.telemetry.monitoring.alert_rules import RULE_FILE, dump, rule_groups


def assert_alerts(tmp_path: Path, series: list[dict[str, str]], expected: dict[str, list[dict[str, object]]]) -> None:
    """Each alert in `expected` fires at 2 m with exactly the listed labels and annotations (none listed: it stays
    quiet) over `series` sampled every minute."""
    tests = {
        "rule_files": [RULE_FILE],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "alert_rule_test": [
                    {"eval_time": "2m", "alertname": name, "exp_alerts": alerts} for name, alerts in expected.items()
                ],
            }
        ],
    }
    (tmp_path / RULE_FILE).write_text(dump(rule_groups(xids=xid_ratings(), limits=detection_limits())))
    (tmp_path / "tests.yml").write_text(dump(tests))
    run = subprocess.run(["promtool", "test", "rules", "tests.yml"], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
