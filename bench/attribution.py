"""Per-workload attribution's cost on an 8-GPU node collected every second: agent CPU, memory and scrape latency.

Each configuration runs the real agent (collector at 1 s, /metrics over HTTP, NvmlSource and NvmlProcesses on
nvidia-ml-py with the driver replaced by data, AttributionSource reading the kubelet's pod-resources over gRPC on a
unix socket, cgroups under a /proc tree and the pod list over HTTP) in a child process of its own, so its CPU and
RSS are the agent's alone; this process plays the kubelet and Prometheus (a scrape every second). Configurations:

- baseline: 8 whole GPUs, attribution off (the agent as before);
- whole: 8 whole GPUs, one pod each;
- mig56: 7x 1g.10gb on each GPU, 56 instances, one pod each;
- ts80: time-slicing x10 on each GPU, 80 pods, each with a process and SM samples.

Targets (issue): <= 1 % of a core and <= 200 MB RSS at 56 MIG instances and 80 pods. Medians over the run; the
baseline in the same run gives the ratios.

    .venv/bin/python bench/attribution.py [--seconds 60] [--only ts80]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.attribution_node import (  # noqa: E402
    GPU_NAME,
    Case,
    Container,
    Gpu,
    Pod,
    Proc,
    allocatable_answer,
    list_answer,
    load_fake,
    pod_list,
    write_proc_tree,
)
from tests.kubelet import Kubelet  # noqa: E402
from tests.sources.gpu.fake_nvml import FakeGpu, FakeNvml  # noqa: E402

GPUS = [Gpu(f"GPU-{i:08x}-1111-2222-3333-444455556666") for i in range(8)]
ONE_G = tuple((7 + k, "1g.10gb", 9_856.0) for k in range(7))
SCRAPE_EVERY_S = 1.0  # as often as the agent collects: a demanding Prometheus


def case(name: str) -> Case:
    pods: list[Pod] = []
    procs: list[Proc] = []
    if name in ("baseline", "whole"):
        for g in range(8):
            pods.append(Pod(f"train-{g}", "ml", (Container("trainer", (GPUS[g].uuid,)),)))
            procs.append(Proc(10_000 + g, g, 40_000.0, sm=85, owner=f"ml/train-{g}/trainer"))
        return Case(name, GPUS, pods, procs)
    if name == "mig56":
        gpus = [Gpu(g.uuid, mig=ONE_G) for g in GPUS]
        for g in range(8):
            for gi, profile, _ in ONE_G:
                pod = f"inf-{g}-{gi}"
                pods.append(
                    Pod(pod, "serving", (Container("server", (gpus[g].mig_uuid(gi),), f"nvidia.com/mig-{profile}"),))
                )
                procs.append(Proc(10_000 + g * 100 + gi, g, 4_000.0, gi=gi, owner=f"serving/{pod}/server"))
        return Case(name, gpus, pods, procs)
    if name == "ts80":
        for g in range(8):
            for k in range(10):
                pod = f"nb-{g}-{k}"
                pods.append(Pod(pod, f"team-{k % 4}", (Container("lab", (f"{GPUS[g].uuid}::{k}",)),)))
                procs.append(Proc(10_000 + g * 100 + k, g, 2_000.0 + 10 * k, sm=8, owner=f"team-{k % 4}/{pod}/lab"))
        return Case(name, GPUS, pods, procs, replicas={g.uuid: 10 for g in GPUS})
    raise SystemExit(f"unknown configuration {name!r}")


CONFIGS = ("baseline", "whole", "mig56", "ts80")


# ---- the child: the agent -------------------------------------------------------------------------------------


def run_agent(config: str, root: Path, seconds: float, port_file: Path) -> None:
    from gpufleet.agent.attribution import AttributionSource
    from gpufleet.agent.collector import Collector, MetricSource
    from gpufleet.agent.http import make_server, serve_in_thread
    from gpufleet.sources.gpu.nvml import NvmlSource
    from gpufleet.sources.gpu.nvml_processes import NvmlProcesses
    from gpufleet.sources.workload.cgroups import CgroupOwners
    from gpufleet.sources.workload.kubelet_pods import KubeletPodList
    from gpufleet.sources.workload.podresources import PodResourcesReader
    from gpufleet.telemetry.exposition.config import ExpositionConfig

    spec = case(config)
    fake = FakeNvml([FakeGpu(uuid=g.uuid, name=GPU_NAME, minor=i) for i, g in enumerate(spec.gpus)])
    fake.record_calls = False
    sampling = load_fake(fake, spec)
    nvml = NvmlSource("bench-node", fake)
    frame = nvml.new_frame()

    class Driver:
        """What the GPUs do between collections: each process leaves its SM sample (as the driver's sampler)."""

        name = "driver"
        tick = 0

        def collect(self, frame: Any) -> None:
            self.tick += 1
            for i, gpu in enumerate(fake.gpus):
                gpu.samples = [(pid, self.tick * 1_000_000, sm, 0) for pid, sm in sampling.get(i, [])]

    sources: list[MetricSource] = [Driver(), nvml]
    if config != "baseline":
        pods = KubeletPodList(url=(root / "pods-url").read_text(), token_path=None)
        sources.append(
            AttributionSource(
                [PodResourcesReader(str(root / "kubelet.sock"))],
                NvmlProcesses.of(nvml),
                CgroupOwners(pods=pods.index, proc_root=root / "proc"),
            )
        )
    exposition = ExpositionConfig(workload_series_sharing=("all",))
    collector = Collector(frame, sources, interval=1.0, exposition=exposition)
    times: list[float] = []
    plain = collector.collect_once

    def timed() -> None:
        start = time.thread_time()
        plain()
        times.append(time.thread_time() - start)

    collector.collect_once = timed  # type: ignore[method-assign]
    collector.collect_once()
    server = make_server(collector, "127.0.0.1", 0, dict)
    serve_in_thread(server)
    port_file.write_text(str(server.server_address[1]))
    warm = time.monotonic() + 3.0
    collector.start()
    time.sleep(max(0.0, warm - time.monotonic()))
    cpu0, wall0, ticks0 = _cpu(), time.monotonic(), len(times)
    time.sleep(seconds)
    cpu1, wall1 = _cpu(), time.monotonic()
    per_tick = sorted(times[ticks0:])
    result = {
        "cpu_core_pct": 100.0 * (cpu1 - cpu0) / (wall1 - wall0),
        "tick_cpu_ms_median": 1000 * statistics.median(per_tick),
        "tick_cpu_ms_p99": 1000 * per_tick[min(len(per_tick) - 1, int(0.99 * len(per_tick)))],
        "rss_mb": _rss_mb(),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "entities": len(frame.entities),
        "lines": collector.body.count(b"\n"),
        "workload_series": sum(1 for line in collector.body.splitlines() if line.startswith(b"gpufleet_workload_gpu_")),
        "shares": sum(len(d.shares) for d in frame.shares if d is not None),
    }
    collector.stop()
    server.shutdown()
    print(json.dumps(result), flush=True)


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# ---- the parent: the kubelet and Prometheus ---------------------------------------------------------------------


class _Pods(BaseHTTPRequestHandler):
    body = b"{}"

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        return None


def measure(config: str, seconds: float) -> dict[str, Any]:
    spec = case(config)
    with tempfile.TemporaryDirectory(prefix="attrb") as tmp:
        root = Path(tmp)
        (root / "proc").mkdir()
        write_proc_tree(root / "proc", spec)
        kubelet = Kubelet(root / "kubelet.sock")
        kubelet.list_answer = list_answer(spec.pods)
        kubelet.allocatable_answer = allocatable_answer(spec)
        kubelet.start()
        handler = type("Pods", (_Pods,), {"body": json.dumps(pod_list(spec.pods)).encode()})
        pods = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=pods.serve_forever, daemon=True).start()
        (root / "pods-url").write_text(f"http://127.0.0.1:{pods.server_address[1]}/pods")
        port_file = root / "port"
        child = subprocess.Popen(
            [sys.executable, __file__, "--agent", config, "--root", tmp, "--seconds", str(seconds)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        try:
            while not port_file.exists() or not port_file.read_text():
                if child.poll() is not None:
                    raise SystemExit(f"{config}: the agent exited ({child.returncode})")
                time.sleep(0.05)
            url = f"http://127.0.0.1:{port_file.read_text()}/metrics"
            latencies: list[float] = []
            with httpx.Client() as client:
                while child.poll() is None:
                    start = time.perf_counter()
                    try:
                        client.get(url, timeout=5.0).raise_for_status()
                    except httpx.HTTPError:
                        break  # the agent is stopping
                    latencies.append(time.perf_counter() - start)
                    time.sleep(SCRAPE_EVERY_S)
            out, _ = child.communicate(timeout=30)
        finally:
            if child.poll() is None:
                child.kill()
            kubelet.stop()
            pods.shutdown()
        result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        ordered = sorted(latencies)
        result["scrape_ms_median"] = 1000 * statistics.median(ordered)
        result["scrape_ms_p99"] = 1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
        result["scrapes"] = len(ordered)
        result["pods"] = len(spec.pods)
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--seconds", type=float, default=60.0, help="measured run per configuration (after 3 s warm-up)"
    )
    parser.add_argument("--only", choices=CONFIGS, action="append", help="run only these configurations")
    parser.add_argument("--agent", choices=CONFIGS, help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.agent:
        run_agent(args.agent, Path(args.root), args.seconds, Path(args.root) / "port")
        return
    console = Console(width=200)
    results = {}
    for config in args.only or CONFIGS:
        with console.status(f"{config}: {args.seconds:g} s at 1 s collections"):
            results[config] = measure(config, args.seconds)
    base = results.get("baseline")
    table = Table(title="Attribution on an 8-GPU node, collected every 1 s (medians; a scrape every second)")
    for col in (
        "config",
        "entities",
        "pods",
        "shares",
        "/metrics lines",
        "workload series",
        "agent CPU (% of a core)",
        "vs baseline",
        "collect CPU ms (median / p99)",
        "RSS MB (peak)",
        "scrape ms (median / p99)",
    ):
        table.add_column(col, justify="right")
    for config, r in results.items():
        ratio = f"{r['cpu_core_pct'] / base['cpu_core_pct']:.2f}x" if base and config != "baseline" else "-"
        table.add_row(
            config,
            str(r["entities"]),
            str(r["pods"] if config != "baseline" else 0),
            str(r["shares"]),
            str(r["lines"]),
            str(r["workload_series"]),
            f"{r['cpu_core_pct']:.2f}",
            ratio,
            f"{r['tick_cpu_ms_median']:.2f} / {r['tick_cpu_ms_p99']:.2f}",
            f"{r['rss_mb']:.0f} ({r['peak_rss_mb']:.0f})",
            f"{r['scrape_ms_median']:.2f} / {r['scrape_ms_p99']:.2f}",
        )
    console.print(table)
    for config in ("mig56", "ts80"):
        if config in results:
            r = results[config]
            ok = r["cpu_core_pct"] <= 1.0 and r["rss_mb"] <= 200
            console.print(
                f"{config}: {r['cpu_core_pct']:.2f} % of a core (target <= 1 %), {r['rss_mb']:.0f} MB "
                f"(target <= 200 MB): {'meets' if ok else 'MISSES'} the targets"
            )


if __name__ == "__main__":
    main()
