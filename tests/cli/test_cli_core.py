"""The core verbs, run the way a person runs them: the real entry point, real files, exit codes, no tracebacks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.clirun import Ran
from tests.clirun import gpufleet as run_cli
from tests.twins import su_scenario

EXAMPLES = Path(__file__).resolve().parents[2] / "src" / "gpufleet" / "examples"


def gpufleet(*args: str, env: dict[str, str] | None = None) -> Ran:
    return run_cli(*args, env={"GPUFLEET_SERVER": "http://127.0.0.1:9", **(env or {})})


@pytest.fixture(scope="module")
def short_scenario(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return su_scenario(
        tmp_path_factory.mktemp("s") / "short.yaml",
        ["{at: 5m, type: gpu-off-bus, node: dgx-003, gpu: 2}", "{at: 6m, type: link-down, node: dgx-020, rail: 0}"],
        duration="20m",
        workload="autoTrainingNodesPerJob: 8, autoTrainingFill: 1.0",
    )


def test_validate_ok_and_typo() -> None:
    ok = gpufleet("validate", str(EXAMPLES / "clusters" / "mixed-fleet.yaml"))
    assert ok.returncode == 0 and "valid" in ok.stdout


def test_validate_typo_is_one_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: gpufleet.io/v1\nkind: Cluster\nmetadata: {name: x}\nspec:\n  nodePool: []\n")
    res = gpufleet("validate", str(bad))
    assert res.returncode == 2
    assert "Traceback" not in res.stderr
    assert "unknown field 'spec.nodePool'; did you mean 'nodePools'" in res.stderr
    assert "fix:" in res.stderr


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    res = gpufleet("--debug", "validate", str(tmp_path / "missing.yaml"))
    assert res.returncode != 0 and "Traceback" in res.stderr


def test_sim_run_reports_faults_as_json(short_scenario: Path) -> None:
    res = gpufleet("sim", "run", str(short_scenario), "-o", "json")
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout)
    assert summary["simulated_seconds"] == 1200
    assert [f["type"] for f in summary["faults"]] == ["gpu-off-bus", "link-down"]
    assert summary["faults"][0]["effects"] == ["job train-0 hangs"]
    assert summary["xid_counts"] == {"79": 1}
    assert summary["fleet"]["gpus_lost"] == 1
    states = {j["name"]: j["state"] for j in summary["jobs"]}
    assert states == {"train-0": "Hung", "train-1": "Running", "train-2": "Hung", "train-3": "Running"}


def test_sim_run_table_and_duration_override(short_scenario: Path) -> None:
    res = gpufleet("sim", "run", str(short_scenario), "--duration", "2m")
    assert res.returncode == 0, res.stderr
    assert "Injected faults" in res.stdout and "simulated 2m" in res.stdout


def test_get_and_describe_from_a_scenario(short_scenario: Path) -> None:
    res = gpufleet("get", "gpus", "-f", str(short_scenario), "--at", "6m", "--node", "dgx-003", "-o", "json")
    rows = json.loads(res.stdout)
    assert len(rows) == 8 and rows[2]["health"] == "lost" and rows[2]["temp_c"] is None
    table = gpufleet("get", "nodes", "-f", str(short_scenario), "--at", "7m")
    assert "dgx-020" in table.stdout and "7/8" in table.stdout  # one rail down
    described = gpufleet("describe", "node", "dgx-003", "-f", str(short_scenario), "--at", "6m")
    assert "GPU has fallen off the bus" in described.stdout
    assert "Affinity: from twin" in described.stdout and "(PIX)" in described.stdout  # each GPU's nearest NIC


def test_incidents_listed_as_json_feed_remediate_plan(short_scenario: Path, tmp_path: Path) -> None:
    listed = gpufleet("get", "incidents", "-f", str(short_scenario), "--at", "8m", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert {r["cause"] for r in rows} >= {"gpu-lost", "ib-link-down"}
    assert all(0 <= r["age_s"] < 8 * 60 for r in rows)  # ages, not epoch seconds
    path = tmp_path / "i.json"
    path.write_text(listed.stdout)
    env_home = tmp_path / "home"
    plan = gpufleet("remediate", "plan", "--incident", str(path), "-o", "json", env={"GPUFLEET_HOME": str(env_home)})
    assert plan.returncode == 0, plan.stderr
    assert {r["cause"] for r in json.loads(plan.stdout)} == {r["cause"] for r in rows}
    table = gpufleet("get", "incidents", "-f", str(short_scenario), "--at", "8m")
    assert "AGE" in table.stdout and "20454d" not in table.stdout


def test_get_without_a_control_plane_says_how_to_start_one() -> None:
    res = gpufleet("get", "nodes")
    assert res.returncode == 1 and "no control plane answers" in res.stderr and "gpufleet up" in res.stderr


def test_get_unknown_resource_is_a_usage_error() -> None:
    res = gpufleet("get", "pods")
    assert res.returncode == 2 and "Traceback" not in res.stderr
