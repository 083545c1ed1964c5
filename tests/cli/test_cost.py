"""`gpufleet cost report` against a running control plane: JSON and YAML as the API gives them, the tables, a price
file that prices the control plane's measurement again on this side, and clear errors for a bad period or file."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.sim.faults import InjectedFault
from gpufleet.sim.runner import run_headless
from gpufleet.spec.scenario_spec import FaultType
from tests import apiclient
from tests.clirun import gpufleet
from tests.twins import door, small_twin


@pytest.fixture(scope="module")
def served() -> Iterator[str]:
    twin = small_twin(nodes=3, job_nodes=2, service_node="n-002",
                      faults=[InjectedFault(0, FaultType.idle_gpu, 0.0, node="n-002", gpu=7)])  # fmt: skip
    plane, fleet = door(twin)
    run_headless(twin, fleet, plane.ingest, plane.tick, 900)  # type: ignore[attr-defined]
    with apiclient.serving(apiclient.app(plane)) as url:
        yield url


@pytest.fixture
def env(served: str, tmp_path: Path) -> dict[str, str]:
    return {"GPUFLEET_SERVER": served, "GPUFLEET_TOKEN": apiclient.TOKEN, "GPUFLEET_HOME": str(tmp_path)}


def report(env: dict[str, str], *args: str) -> Any:
    res = gpufleet("cost", "report", "--since", "1h", *args, env=env)
    assert res.returncode == 0, res.stderr
    return res


def test_json_is_the_apis_report(env: dict[str, str]) -> None:
    data = json.loads(report(env, "-o", "json").stdout)
    assert {"totals", "by_workload", "by_namespace", "by_team", "by_model", "waste", "recommendations", "prices",
            "usage"} <= set(data)  # fmt: skip
    # the twin ran 15 minutes of the hour asked: the report is of those, and says what was asked
    assert data["hours"] == pytest.approx(0.25, abs=0.02) and data["asked_hours"] == 1.0 and data["currency"] == "USD"
    namespaces = {w["namespace"] for w in data["by_workload"]}
    assert namespaces == {"training", "inference", "default"}
    job = next(w for w in data["by_workload"] if w["namespace"] == "training")
    assert job["kind"] == "job" and job["peak_gpus"] == 16 and job["cost_usd"] > 0
    assert data["totals"]["cost_usd"] == pytest.approx(sum(w["cost_usd"] for w in data["by_workload"]), abs=0.05)
    assert yaml.safe_load(report(env, "-o", "yaml").stdout)["totals"] == data["totals"]


def test_the_tables(env: dict[str, str]) -> None:
    out = report(env).stdout
    for heading in ("TOTALS", "By team", "By namespace", "By GPU model", "Workloads, costliest first", "Waste"):
        assert heading in out
    assert "NVIDIA H100 80GB HBM3" in out and "training" in out and "$" in out


def test_a_price_file_prices_the_measurement_here(env: dict[str, str], tmp_path: Path) -> None:
    served = json.loads(report(env, "-o", "json").stdout)
    prices = tmp_path / "cost.yaml"
    prices.write_text(
        "provider: lambda\n"
        "teams: {training: research, inference: serving}\n"
        "prices:\n"
        "  - {model: h100-sxm, provider: lambda, usd_per_gpu_hour: 2.0, source: our contract}\n"
    )
    mine = json.loads(report(env, "--price-file", str(prices), "-o", "json").stdout)
    assert mine["usage"] == served["usage"]  # the same measurement, priced again
    assert {t["name"] for t in mine["by_team"]} == {"research", "serving", "unassigned"}
    assert mine["prices"] == [{"model": "NVIDIA H100 80GB HBM3", "provider": "lambda", "offering": "on-demand",
                               "usd_per_gpu_hour": 2.0, "source": "our contract"}]  # fmt: skip
    held = mine["totals"]["held_gpu_hours"]
    assert mine["totals"]["cost_usd"] == pytest.approx(2.0 * held, abs=0.05)
    assert served["totals"]["cost_usd"] == pytest.approx(98.32 / 8 * held, abs=0.1)


def test_a_bad_period_is_one_clear_line(env: dict[str, str]) -> None:
    res = gpufleet("cost", "report", "--since", "7x", env=env)
    assert res.returncode == 2
    assert "--since '7x' is not a duration" in res.stderr
    assert "fix: give a duration such as 90m, 24h or 7d" in res.stderr
    assert res.stdout == ""


def test_a_bad_price_file_names_the_field(env: dict[str, str], tmp_path: Path) -> None:
    bad = tmp_path / "cost.yaml"
    bad.write_text("teams: {training: ml}\nprovder: aws\n")
    res = gpufleet("cost", "report", "--price-file", str(bad), env=env)
    assert res.returncode == 2
    assert "provder" in res.stderr and "did you mean 'provider'" in res.stderr


def test_no_control_plane_says_where_it_looked(tmp_path: Path) -> None:
    env = {"GPUFLEET_SERVER": f"http://127.0.0.1:{apiclient.free_port()}", "GPUFLEET_HOME": str(tmp_path)}
    res = gpufleet("cost", "report", env=env)
    assert res.returncode == 1 and "no control plane answers" in res.stderr


def test_a_scenario_run_an_hour_is_headed_with_the_hour_it_covers(tmp_path: Path) -> None:
    """`--at 1h` of a scenario, asked for the default week: the heading, the JSON and the note describe the hour the
    history covers, on an hour's grid, not a 168 h window."""
    scenario = str(Path(__file__).resolve().parents[2] / "src/gpufleet/examples/scenarios/gpu-sharing.yaml")
    env = {"GPUFLEET_HOME": str(tmp_path)}
    res = gpufleet("cost", "report", "-f", scenario, "--at", "1h", "-o", "json", env=env)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["hours"] == pytest.approx(1.0, abs=0.02) and data["asked_hours"] == 168 and data["step_s"] == 60
    assert data["end"] - data["start"] == pytest.approx(3600, abs=60)
    assert any("of the 168 h asked" in note for note in data["notes"])
    table = gpufleet("cost", "report", "-f", scenario, "--at", "1h", env=env).stdout
    heading = next(line for line in table.splitlines() if line.startswith("GPU cost"))
    assert re.search(r"\(1(\.0\d)? h of the 168 h asked", heading) and "a point every 60 s" in heading, heading
