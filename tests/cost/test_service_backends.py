"""The cost report reads the same from a real Prometheus and VictoriaMetrics (remote write in, PromQL range queries
out) as from the embedded store: the same samples written to each give the same GPU-hours per workload."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from gpufleet.control.service import ControlPlane
from gpufleet.cost.config import CostConfig
from gpufleet.cost.service import CostService
from gpufleet.cost.usage import Usage
from gpufleet.remediate.backends.observe import ObserveOnlyBackend
from gpufleet.state import Database
from gpufleet.telemetry.store import EmbeddedStore, RemoteConfig, RemoteStore
from tests.apiclient import free_port
from tests.conftest import REPO_ROOT, require_tool

pytestmark = [pytest.mark.real, pytest.mark.slow]

MINUTES = 40  # inside what a running Prometheus still takes by remote write
EVERY_S = 15.0
GPU = {"modelName": "NVIDIA H100 80GB HBM3", "hostname": "gpu-node-07"}
# gpu -> (utilization %, who holds it as namespace/pod/workload, or None)
GPUS = {0: (80.0, ("training", "train-7-node-07", "train-7")), 1: (0.0, ("default", "reserved-1", "")),
        2: (0.0, None), 3: (35.0, None)}  # fmt: skip


def samples(now: float) -> list[tuple[dict[str, str], list[tuple[float, int]]]]:
    """Every series with its points, as remote write sends them (value, timestamp in ms)."""
    times = [now - MINUTES * 60 + k * EVERY_S for k in range(int(MINUTES * 60 / EVERY_S) + 1)]
    out = []
    for gpu, (util, holder) in GPUS.items():
        ident = {"gpu": str(gpu), "UUID": f"GPU-node07-{gpu}", **GPU}
        out.append(({"__name__": "DCGM_FI_DEV_GPU_UTIL", **ident}, [(util, round(t * 1000)) for t in times]))
        if holder is not None:
            namespace, pod, workload = holder
            info = {"__name__": "gpufleet_gpu_pod_info", **ident, "namespace": namespace, "pod": pod}
            if workload:
                info["workload"] = workload
            out.append((info, [(1.0, round(t * 1000)) for t in times]))
    return out


def plane_on(store: EmbeddedStore | RemoteStore, now: float) -> ControlPlane:
    return ControlPlane(Database(":memory:"), ObserveOnlyBackend(lambda: []), clock=lambda: now, metrics=store)


def measured(store: EmbeddedStore | RemoteStore, now: float) -> Usage:
    return CostService(plane_on(store, now), CostConfig()).usage("30m")


@pytest.fixture(scope="module")
def backends(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    require_tool("prometheus", "victoria-metrics", "curl")
    run_dir = tmp_path_factory.mktemp("cost-prom")
    script = REPO_ROOT / "scripts" / "start-prometheus.sh"
    prom, vm = free_port(), free_port()
    args = ["bash", str(script), "--run-dir", str(run_dir), "--prometheus-port", str(prom), "--victoria-metrics",
            "--vm-port", str(vm)]  # fmt: skip
    started = subprocess.run(args, capture_output=True, text=True, timeout=60)
    try:
        assert started.returncode == 0, started.stderr
        yield {"prometheus": f"http://127.0.0.1:{prom}", "vm": f"http://127.0.0.1:{vm}"}
    finally:
        subprocess.run(["bash", str(script), "--stop", "--run-dir", str(run_dir)], timeout=30)


@pytest.mark.parametrize("backend", ["prometheus", "vm"])
def test_a_promql_backend_measures_what_the_embedded_store_does(backends: dict[str, str], backend: str) -> None:
    now = float(int(time.time() // 60 * 60))
    written = samples(now)
    embedded = EmbeddedStore(None)
    for labels, points in written:
        for value, ms in points:
            embedded.write(labels, ms / 1000.0, value)
    remote = RemoteStore(RemoteConfig(url=backends[backend], query_params={"nocache": "1"}))
    remote.write_series(written)
    time.sleep(2.5)  # VictoriaMetrics shows pushed data after 1-2 s
    expected = measured(embedded, now)
    deadline = time.monotonic() + 20
    got = measured(remote, now)
    while got.capacity != expected.capacity and time.monotonic() < deadline:
        time.sleep(0.5)
        got = measured(remote, now)
    remote.close()

    def by_workload(u: Usage) -> dict[str, Any]:
        return {(w.namespace, w.workload): (w.kind, w.parts) for w in u.workloads}

    assert got.capacity == expected.capacity and by_workload(got) == by_workload(expected)
    assert got.nodes == expected.nodes
    hours = {w.workload: w.parts[0].gpu_hours for w in expected.workloads}
    assert hours == {"train-7": 0.5, "reserved-1": 0.5}  # the last 30 of the 40 minutes written
    cap = expected.capacity[0]
    assert (cap.held_gpu_hours, cap.idle_gpu_hours, cap.unallocated_gpu_hours) == (1.0, 0.5, 1.0)
