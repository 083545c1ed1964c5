"""What a catch-up of the twin says while it runs: how far, how fast and how long still, on stderr only, and only
where someone reads it (a terminal, or `--progress`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufleet.cli.progress import CatchUp
from tests.clirun import Ran
from tests.clirun import gpufleet as run_cli
from tests.twins import su_scenario


class Clock:
    """Wall time that moves when the test says."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_line_says_how_far_how_fast_and_how_long_still() -> None:
    clock = Clock()
    state = CatchUp(12 * 3600, clock)
    assert state.line() == "0s of 12h (0%), starting"
    clock.now += 30.0
    state.update(4 * 3600)  # 4 h in 30 s: 480x, 8 h to go at that pace
    assert state.speed == pytest.approx(480.0)
    assert state.line() == "4h of 12h (33%), 480x real time, 1m left"
    clock.now += 60.0
    state.update(12 * 3600)
    assert state.line() == "12h of 12h (100%), 480x real time, 0s left"


def gpufleet(*args: str) -> Ran:
    return run_cli(*args, env={"GPUFLEET_SERVER": "http://127.0.0.1:9"})


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return su_scenario(
        tmp_path_factory.mktemp("p") / "short.yaml",
        ["{at: 5m, type: xid, node: dgx-002, gpu: 3, code: 13}"],
        duration="10m",
    )


def test_asked_for_it_goes_to_stderr_and_json_stays_clean(scenario: Path) -> None:
    res = gpufleet("get", "nodes", "-f", str(scenario), "--at", "90s", "-o", "json", "--progress")
    assert res.returncode == 0, res.stderr
    assert len(json.loads(res.stdout)) == 32  # stdout is the JSON alone
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("simulated dgx-h100-su to 1m30s: 1m30s of 1m30s (100%), ")
    assert "x real time" in last


def test_not_a_terminal_and_not_asked_says_nothing(scenario: Path) -> None:
    res = gpufleet("get", "nodes", "-f", str(scenario), "--at", "30s", "-o", "json")
    assert res.returncode == 0, res.stderr
    assert res.stderr == "" and len(json.loads(res.stdout)) == 32
    quiet = gpufleet("sim", "run", str(scenario), "--duration", "30s", "-o", "json", "--no-progress")
    assert quiet.stderr == "" and json.loads(quiet.stdout)["simulated_seconds"] == 30
