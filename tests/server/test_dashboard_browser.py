"""The dashboard in a real headless Chromium: the page's JavaScript must fetch the API and draw the fleet."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn

from gpufleet.sim.faults import InjectedFault
from gpufleet.sim.runner import run_headless
from gpufleet.spec.scenario_spec import FaultType
from gpufleet.state import Database
from tests import apiclient
from tests.conftest import require_tool
from tests.twins import door, small_twin

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    twin = small_twin(faults=[InjectedFault(0, FaultType.gpu_off_bus, 20.0, node="n-001", gpu=5)])
    plane, fleet = door(twin, remediation="dry-run", db=Database(tmp_path / "state.db"))
    run_headless(twin, fleet, plane.ingest, plane.tick, 180)  # type: ignore[attr-defined]
    port = _free_port()
    app = apiclient.app(plane, secret="t")
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(100):
        if server.started:
            break
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}/"
    server.should_exit = True
    thread.join(timeout=5)


def _chromium() -> str:
    require_tool("chromium")
    return shutil.which("chromium") or "chromium"


def test_dashboard_renders_the_fleet(served: str) -> None:
    browser = _chromium()
    with tempfile.TemporaryDirectory() as profile:
        out = subprocess.run(
            [
                browser,
                *CHROMIUM_FLAGS,
                f"--user-data-dir={profile}",
                "--virtual-time-budget=4000",
                "--dump-dom",
                served,
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    dom = out.stdout
    assert 'title="n-000: Ready"' in dom and 'title="n-002: Ready"' in dom  # the grid, drawn by the page's script
    assert 'title="GPU 5: lost"' in dom  # the GPU that fell off the bus
    assert ">24<" in dom  # KPI: GPUs
    assert "Stalled" in dom  # the job table shows the job the lost GPU hung
    assert "fallen off the bus" in dom  # the event stream
    assert "gpu-lost" in dom and "gpu/n-001/5" in dom  # the open incident, its root cause named


def test_dashboard_screenshot(served: str, tmp_path: Path) -> None:
    browser = _chromium()
    shot = tmp_path / "dashboard.png"
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [
                browser,
                *CHROMIUM_FLAGS,
                f"--user-data-dir={profile}",
                "--window-size=1400,1000",
                "--virtual-time-budget=4000",
                f"--screenshot={shot}",
                served,
            ],
            capture_output=True,
            timeout=60,
        )
    assert shot.exists() and shot.stat().st_size > 20_000  # a rendered page, not a blank one
