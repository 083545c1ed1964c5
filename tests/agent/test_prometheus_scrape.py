"""A real Prometheus scrapes the agent running on the twin; PromQL returns every simulated GPU with its labels."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import httpx

from gpufleet.sim.agent import sim_agent
from tests.apiclient import free_port
from tests.conftest import REPO_ROOT, require_tool

EXAMPLES = REPO_ROOT / "src" / "gpufleet" / "examples"
LABELS = {"gpu", "UUID", "pci_bus_id", "device", "modelName", "hostname", "DCGM_FI_DRIVER_VERSION", "instance", "job"}


def _query(prom: str, expr: str) -> list[dict[str, Any]]:
    res = httpx.get(f"{prom}/api/v1/query", params={"query": expr}, timeout=5).json()
    assert res["status"] == "success", res
    return res["data"]["result"]  # type: ignore[no-any-return]


def test_prometheus_scrapes_every_simulated_gpu(tmp_path: Path) -> None:
    require_tool("prometheus", "promtool")
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        """apiVersion: gpufleet.io/v1
kind: Scenario
metadata: {name: scrape}
spec:
  duration: 1h
  cluster:
    nodePools:
    - {name: dgx, count: 4, gpu: {model: h100-sxm, count: 8}, nics: {count: 8}}
    - {name: t4, count: 2, gpu: {model: t4, count: 4}, nics: {count: 1, speedGbps: 100}}
  workload: {autoTrainingNodesPerJob: 2}
"""
    )
    agent = sim_agent(
        scenario,
        node=None,
        host="127.0.0.1",
        port=0,
        interval=1.0,
        speed=1.0,
        data_dir=tmp_path / "agent",
        control_plane=None,
        token=lambda: None,
    )
    agent.start()
    run_dir = tmp_path / "prom"
    prom_port = free_port()
    start = [
        str(REPO_ROOT / "scripts" / "start-prometheus.sh"),
        "--run-dir",
        str(run_dir),
        "--target",
        f"127.0.0.1:{agent.port}",
        "--prometheus-port",
        str(prom_port),
        "--interval",
        "1s",
    ]
    subprocess.run(start, check=True, timeout=60)
    prom = f"http://127.0.0.1:{prom_port}"
    try:
        result: list[dict[str, Any]] = []
        deadline = time.time() + 45  # Prometheus discovers targets about 5 s after it is ready
        while time.time() < deadline:
            result = _query(prom, "DCGM_FI_DEV_GPU_TEMP")
            if len(result) == 40:
                break
            time.sleep(0.5)
        assert len(result) == 40  # 4 x 8 H100 + 2 x 4 T4
        for series in result:
            labels = series["metric"]
            assert set(labels) >= LABELS, labels
            assert labels["UUID"].startswith("GPU-") and labels["device"] == f"nvidia{labels['gpu']}"
            assert 20.0 < float(series["value"][1]) < 95.0
        models = {s["metric"]["modelName"] for s in result}
        assert models == {"NVIDIA H100 80GB HBM3", "Tesla T4"}
        by_host = _query(prom, "count by (hostname) (DCGM_FI_DEV_GPU_UTIL)")
        assert sorted(int(s["value"][1]) for s in by_host) == [4, 4, 8, 8, 8, 8]
        up = _query(prom, 'gpufleet_source_up{source="twin"}')
        assert up and up[0]["value"][1] == "1"
    finally:
        subprocess.run(
            [str(REPO_ROOT / "scripts" / "start-prometheus.sh"), "--stop", "--run-dir", str(run_dir)], timeout=30
        )
        agent.stop()
