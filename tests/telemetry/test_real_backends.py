"""Real Prometheus and VictoriaMetrics on 127.0.0.1: remote write from the store, PromQL reads, a scrape."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from gpufleet.control import views
from gpufleet.control.metrics import MetricRecorder
from gpufleet.health.thresholds import detection_limits
from gpufleet.health.xid_policy import xid_ratings
from gpufleet.sim.runner import run_headless
from gpufleet.telemetry.exposition.config import CONTENT_TYPE
from gpufleet.telemetry.exposition.dcgm import Renderer
from gpufleet.telemetry.frame import MetricFrame
from gpufleet.telemetry.monitoring.alert_rules import RulesConfig, dump, rule_groups
from gpufleet.telemetry.store import RemoteConfig, RemoteStore
from tests import apiclient
from tests.apiclient import free_port
from tests.conftest import REPO_ROOT, require_tool
from tests.telemetry.conftest import filled_frame
from tests.twins import door, small_twin

pytestmark = [pytest.mark.real, pytest.mark.slow]


def poll(fn: Callable[[], Any], timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = fn()
        if result or time.monotonic() > deadline:
            return result
        time.sleep(0.25)


class MetricsServer:
    """Serves a frame's /metrics on loopback, rendered on each request."""

    def __init__(self, frame: MetricFrame) -> None:
        renderer = Renderer()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = renderer.render(frame).encode()
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    require_tool("prometheus", "victoria-metrics", "curl")
    run_dir = tmp_path_factory.mktemp("prom")
    frame = filled_frame()
    exporter = MetricsServer(frame)
    prom_port, vm_port = free_port(), free_port()
    rules = run_dir / "gpufleet-rules.yml"
    rules.write_text(dump(rule_groups(RulesConfig(), xids=xid_ratings(), limits=detection_limits())))
    script = REPO_ROOT / "scripts" / "start-prometheus.sh"
    args = [
        "bash",
        str(script),
        "--run-dir",
        str(run_dir),
        "--target",
        f"127.0.0.1:{exporter.port}",
        "--prometheus-port",
        str(prom_port),
        "--victoria-metrics",
        "--vm-port",
        str(vm_port),
        "--rules",
        str(rules),
    ]
    started = subprocess.run(args, capture_output=True, text=True, timeout=60)
    try:
        assert started.returncode == 0, started.stderr
        yield {
            "frame": frame,
            "prometheus": f"http://127.0.0.1:{prom_port}",
            "vm": f"http://127.0.0.1:{vm_port}",
            "run_dir": run_dir,
        }
    finally:
        subprocess.run(["bash", str(script), "--stop", "--run-dir", str(run_dir)], timeout=30)
        exporter.close()


@pytest.mark.parametrize("backend", ["vm", "prometheus"])
def test_remote_write_then_promql(stack: dict[str, Any], backend: str) -> None:
    frame: MetricFrame = stack["frame"]
    # nocache: VictoriaMetrics would otherwise keep answering from a result cached before the data arrived
    store = RemoteStore(RemoteConfig(url=stack[backend], query_params={"nocache": "1"}))
    now = time.time()
    written = store.ingest(frame, now)
    assert written > 300
    selector = 'DCGM_FI_DEV_POWER_USAGE{hostname="gpu-node-01"}'
    # VictoriaMetrics shows pushed data after 1-2 s and caches query results: wait for the data, then ask
    time.sleep(2.5)
    # only what the store wrote: Prometheus also scrapes the frame (and forwards it to VM) with a job label
    result = poll(lambda: [s for s in store.instant(selector, at=now) if "job" not in s.labels])
    assert sorted(int(s.labels["gpu"]) for s in result) == list(range(8))
    by_gpu = {s.labels["gpu"]: s.value for s in result}
    assert by_gpu["5"] == pytest.approx(frame.gpu("DCGM_FI_DEV_POWER_USAGE")[5])
    agg = poll(lambda: store.aggregate_instant("max", 'DCGM_FI_DEV_GPU_TEMP{job!~".+"}', ["hostname"], at=now))
    assert agg[0].labels == {"hostname": "gpu-node-01"}
    assert agg[0].value == pytest.approx(frame.gpu("DCGM_FI_DEV_GPU_TEMP").max())
    store.close()


def test_prometheus_scrapes_our_exposition(stack: dict[str, Any]) -> None:
    store = RemoteStore(stack["prometheus"])
    query = 'DCGM_FI_DEV_GPU_TEMP{job="gpufleet-agent"}'
    result = poll(lambda: [s for s in store.query(query) if s.labels.get("job")], timeout=30)
    assert sorted(int(s.labels["gpu"]) for s in result) == list(range(8))
    labels = result[0].labels
    for key in ("UUID", "pci_bus_id", "device", "modelName", "hostname", "DCGM_FI_DRIVER_VERSION"):
        assert labels.get(key), key
    store.close()


def test_prometheus_loads_generated_rules(stack: dict[str, Any]) -> None:
    import httpx

    data = httpx.get(stack["prometheus"] + "/api/v1/rules").json()["data"]
    rules = [r for g in data["groups"] for r in g["rules"]]
    expected = [
        r["alert"]
        for g in rule_groups(RulesConfig(), xids=xid_ratings(), limits=detection_limits())["groups"]
        for r in g["rules"]
    ]
    assert sorted(r["name"] for r in rules) == sorted(expected)
    assert all(r["health"] in ("ok", "unknown") for r in rules)


@pytest.mark.parametrize("backend", ["vm", "prometheus"])
def test_the_control_plane_keeps_its_fleet_history_in_a_remote_store(stack: dict[str, Any], backend: str) -> None:
    """`gpufleet server --metrics URL`: the dashboard's history written by remote write and read back by PromQL."""
    twin = small_twin()
    plane, fleet = door(twin)
    store = RemoteStore(RemoteConfig(url=stack[backend], query_params={"nocache": "1"}))
    plane.metrics = MetricRecorder(store)  # type: ignore[attr-defined]
    # the twin's clock starts at its epoch; put it near now so the backends take the samples as recent
    start = time.time() - 600
    plane.clock = lambda: start + twin.time  # type: ignore[attr-defined]
    run_headless(twin, fleet, plane.ingest, plane.tick, 300)  # type: ignore[attr-defined]
    time.sleep(2.5)  # VictoriaMetrics shows pushed data after 1-2 s
    history = poll(lambda: views.history(plane, start + 300))  # type: ignore[arg-type]
    assert len(history) >= 4 and all(0 < p["util"] <= 100 for p in history if "util" in p)
    assert any(p.get("power", 0) > 1.0 for p in history)  # kW of 24 GPUs
    # per-GPU timelines and aggregation, through the API's metric query, answered by the backend's PromQL
    client = apiclient.client(plane)
    params = {"series": 'gpufleet_gpu_temp_c{node="n-000"}', "start": start, "end": start + 300, "step": 30}
    temps = poll(lambda: client.get("/api/v1/metrics/range", params=params).json() or None)
    assert {s["labels"]["gpu"] for s in temps} == {str(g) for g in range(8)}
    by_node = client.get(
        "/api/v1/metrics/query",
        params={"series": "gpufleet_gpu_power_w", "op": "sum", "by": "node", "time": start + 300},
    ).json()
    assert {s["labels"]["node"] for s in by_node} == {"n-000", "n-001", "n-002"}
    store.close()
