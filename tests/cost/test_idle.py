from __future__ import annotations

import subprocess

import numpy as np
import pytest

from gpufleet.cost.idle import IDLE_COST_FIELD, fill_idle_cost, hourly_prices
from gpufleet.telemetry.frame import MetricFrame
from tests.conftest import REPO_ROOT
from tests.telemetry.conftest import MODEL, make_entities


def test_idle_cost_follows_utilization_and_price() -> None:
    frame = MetricFrame(make_entities(3))
    prices = hourly_prices(frame, {MODEL: 4.0}, default=2.0)
    assert prices.tolist() == [4.0, 4.0, 4.0]
    frame.gpu("DCGM_FI_DEV_GPU_UTIL")[:] = [0, 75, np.nan]
    fill_idle_cost(frame, prices)
    cost = frame.gpu(IDLE_COST_FIELD)
    assert cost[:2].tolist() == [4.0, 1.0] and np.isnan(cost[2])


def test_install_components_lists_groups() -> None:
    out = subprocess.run(
        ["bash", str(REPO_ROOT / "scripts/install-components.sh"), "--list"], capture_output=True, text=True
    )
    assert out.returncode == 0
    assert "prometheus-alertmanager" in out.stdout and "victoria-metrics" in out.stdout


@pytest.mark.parametrize("args", [[], ["--bogus"]])
def test_start_prometheus_rejects_bad_arguments(args: list[str]) -> None:
    out = subprocess.run(
        ["bash", str(REPO_ROOT / "scripts/start-prometheus.sh"), *args], capture_output=True, text=True
    )
    assert out.returncode == 2 and "start-prometheus:" in out.stderr
