"""`gpufleet remediate replay`: a candidate policy rehearsed over the state a control plane left, as a person runs
it (the real entry point, real files, exit codes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.clirun import Ran
from tests.clirun import gpufleet as run_cli
from tests.remediate.recorded_day import record_day

STRICT = """apiVersion: gpufleet.io/v1
kind: RemediationPolicy
metadata: {name: strict-breaker}
spec:
  breaker: {threshold: 2, minFailures: 2, window: 10m}
"""


def gpufleet(home: Path, *args: str) -> Ran:
    return run_cli(*args, env={"GPUFLEET_HOME": str(home)})


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Seven hours of the recorded day: a GPU off the bus, the ECC pair, two nodes losing a GPU."""
    return record_day(tmp_path_factory.mktemp("home"), hours=7.0)


@pytest.fixture
def strict(tmp_path: Path) -> Path:
    path = tmp_path / "strict.yaml"
    path.write_text(STRICT)
    return path


def test_a_stricter_breaker_as_a_table_with_totals(home: Path, strict: Path) -> None:
    ran = gpufleet(home, "remediate", "replay", "--policy", str(strict), "--since", "1d")
    assert ran.returncode == 0, ran.stderr
    out = ran.stdout
    assert "current = recorded" in out
    assert "3 incident(s) handled differently" in out and "2 of 5 incidents handled the same" in out
    assert "INC-000003" in out and "cordon refused" in out
    [trips] = [line.split() for line in out.splitlines() if line.startswith("breaker trips")]
    assert trips[-3:] == ["0", "1", "+1"]
    [gpu_hours] = [line.split() for line in out.splitlines() if line.startswith("GPU-hours lost")]
    assert float(gpu_hours[-1]) < 0


def test_json_and_yaml_carry_the_same_comparison(home: Path, strict: Path) -> None:
    as_json = gpufleet(home, "remediate", "replay", "--policy", str(strict), "-o", "json")
    as_yaml = gpufleet(home, "remediate", "replay", "--policy", str(strict), "-o", "yaml")
    assert as_json.returncode == 0 and as_yaml.returncode == 0, as_json.stderr + as_yaml.stderr
    data = json.loads(as_json.stdout)
    assert data == yaml.safe_load(as_yaml.stdout)
    assert data["baseline"] == "recorded" and data["incidents"] == 5
    assert data["totals"]["refusals"] == {"current": 0, "candidate": 3, "difference": 3}
    assert [d["incident"] for d in data["differences"]] == ["INC-000003", "INC-000004", "INC-000005"]


def test_the_policy_that_ran_shows_no_difference(home: Path, tmp_path: Path) -> None:
    same = tmp_path / "default.yaml"
    same.write_text("apiVersion: gpufleet.io/v1\nkind: RemediationPolicy\nmetadata: {name: default}\n")
    ran = gpufleet(home, "remediate", "replay", "--policy", str(same), "-o", "json")
    assert ran.returncode == 0, ran.stderr
    data = json.loads(ran.stdout)
    assert data["differences"] == [] and all(t["difference"] == 0 for t in data["totals"].values())


@pytest.mark.parametrize(
    ("args", "said", "fix"),
    [
        (["--since", "a month"], "since 'a month' is not a duration", "30d, 12h or 90m"),
        (["--since", "1s"], "no incidents were recorded in the last 1s", "widen --since"),
        (["--reboot-time", "soon"], "--reboot-time 'soon' is not a duration", "5m or 90s"),
    ],
)
def test_bad_flags_say_what_to_give(home: Path, strict: Path, args: list[str], said: str, fix: str) -> None:
    ran = gpufleet(home, "remediate", "replay", "--policy", str(strict), *args)
    assert ran.returncode != 0 and said in ran.stderr and fix in ran.stderr
    assert "Traceback" not in ran.stderr


def test_a_policy_that_does_not_validate_names_the_field(home: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: gpufleet.io/v1\nkind: RemediationPolicy\nspec:\n  breaker: {treshold: 2}\n")
    ran = gpufleet(home, "remediate", "replay", "--policy", str(bad))
    assert ran.returncode != 0 and "treshold" in ran.stderr and "threshold" in ran.stderr


def test_an_empty_state_is_refused_with_the_fix(tmp_path: Path, strict: Path) -> None:
    ran = gpufleet(tmp_path / "nothing", "remediate", "replay", "--policy", str(strict))
    assert ran.returncode != 0 and "no state database" in ran.stderr and "gpufleet up" in ran.stderr
