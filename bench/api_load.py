"""The control plane's API under read load, its dashboard's first chart, and failover between two replicas.

Fleet: 256 nodes x 8 H100 simulated in a child process (bench/fleet_ingest.py's agents), each pushing once a second
to one real `gpufleet server` (SQLite state, embedded metric store) over HTTP, as real agents do.

Load: a separate process sends GET requests open-loop at a fixed rate for `--seconds` (a request's latency counts
from the moment it was due, so a stalled server cannot hide its stall by slowing the client), spread over the read
endpoints as the dashboard and scripts use them, with four Server-Sent Event clients connected throughout. Baseline
in the same run: the same mix at 5 requests/s (the server busy with ingest only). Rates that the client process
cannot reach on this machine show what it did reach.

Dashboard: Chromium headless loads the overview and reports `window.__gpufleetFirstChart` (ms from navigation start
to the first chart drawn), median of three loads.

Failover: two `gpufleet server --state postgresql://...` on one PostgreSQL (scripts/start-postgres.sh); the leader is
killed with SIGKILL and the other replica's /healthz is polled every 50 ms until it says it leads; three times.

Control loop: during each load, /healthz is polled every 200 ms and each rise of its turn count is timed: the
longest and the 99th-percentile wait between turns, and stalls (a wait over 10 s). Reads the server shed while its
loop was behind (503) count as errors.

Restart: `gpufleet up`'s twin (the bundled 256-GPU day) is run to an age, stopped and started again on its home, in
this process: the time until the API can answer (the control plane built from its state) and until the twin is
back where it stopped, from its last snapshot and, as the baseline, replayed from its start as before snapshots.

With `--spread` the agents push each at its own moment of the second, as agents that are not in step do; without
it every agent pushes at the same moment (the worst case for the server).

    python bench/api_load.py [--rates 200,1000] [--seconds 30] [--nodes 256] [--spread] [--skip-failover]
                             [--restart-ages 1,4] [--skip-restart] [-o json]
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing as mp
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console
from rich.table import Table

from fleet_ingest import SPREAD_OVER_S, Push, Pushes, SenderStats, Server, agents_main, free_port, sender

ROOT = Path(__file__).resolve().parents[1]
BASELINE_RATE = 5
STALL_S = 10.0  # a wait between two turns of the control loop longer than this is a stall
THREADS = 48
STREAMS = 4


def mix(nodes: list[str]) -> list[tuple[str, float]]:
    """(path, weight): what the dashboard and scripts read."""
    out = [
        ("/api/v1/summary", 10),
        ("/api/v1/nodes", 15),
        ("/api/v1/incidents?limit=100", 10),
        ("/api/v1/events?limit=50", 10),
        ("/api/v1/jobs", 5),
        ("/api/v1/fabric", 5),
        ("/healthz", 5),
    ]
    for n in nodes[:: max(1, len(nodes) // 20)]:
        out.append((f"/api/v1/nodes/{n}", 20 / 20))
        out.append((f"/api/v1/gpus?node={n}", 20 / 20))
    return out


def load_main(
    port: int, rate: float, seconds: float, paths: list[tuple[str, float]], seed: int, out: Connection
) -> None:
    """Child process: open-loop GETs at `rate` for `seconds`; sends back (latency s, status) per request."""
    rng = random.Random(seed)
    choices, weights = zip(*paths, strict=True)
    n = int(rate * seconds)
    plan = rng.choices(choices, weights=weights, k=n)
    start = time.monotonic() + 0.5
    results: list[tuple[float, int]] = []
    lock = threading.Lock()

    def worker(k: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        mine = []
        for i in range(k, n, THREADS):
            due = start + i / rate
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            status = 0
            for _attempt in range(2):  # a keep-alive connection the server closed while idle: retry once, as clients do
                try:
                    conn.request("GET", plan[i])
                    resp = conn.getresponse()
                    resp.read()
                    status = resp.status
                    break
                except (OSError, http.client.HTTPException):
                    conn.close()
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            mine.append((time.monotonic() - due, status))
        conn.close()
        with lock:
            results.extend(mine)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.send((results, time.monotonic() - start))


class Streams(threading.Thread):
    """SSE clients connected for the whole run: frames received, and whether any connection failed."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.frames = Counter[str]()
        self.failures = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        threads = [threading.Thread(target=self._one, daemon=True) for _ in range(STREAMS)]
        for t in threads:
            t.start()
        self.stopping.wait()

    def _one(self) -> None:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            conn.request("GET", "/api/v1/stream")
            resp = conn.getresponse()
            while not self.stopping.is_set():
                line = resp.readline()
                if not line:
                    break
                if line.startswith(b"event: "):
                    self.frames[line[7:].strip().decode()] += 1
        except (OSError, http.client.HTTPException):
            self.failures += 1


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


class LoopWatch(threading.Thread):
    """Polls /healthz every 200 ms: the waits between the control loop's turns while it runs."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.stopping = threading.Event()
        self.gaps: list[float] = []

    def run(self) -> None:
        last_ticks, last_at = None, time.monotonic()
        while not self.stopping.wait(0.2):
            ticks = (_health(self.port, timeout=30) or {}).get("ticks")
            now = time.monotonic()
            if ticks is not None and ticks != last_ticks:
                if last_ticks is not None:
                    self.gaps.append((now - last_at) / max(1, ticks - last_ticks))
                last_ticks, last_at = ticks, now
        if last_ticks is not None:
            self.gaps.append(time.monotonic() - last_at)  # the wait still open at the end counts too


def run_load(port: int, rate: float, seconds: float, paths: list[tuple[str, float]]) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=load_main, args=(port, rate, seconds, paths, int(rate), send))
    watch = LoopWatch(port)
    watch.start()
    proc.start()
    results, took = recv.recv()
    proc.join()
    watch.stopping.set()
    watch.join()
    lat = [r[0] for r in results]
    errors = sum(1 for r in results if r[1] != 200)
    codes = Counter(str(r[1]) for r in results if r[1] != 200)
    return {
        "rate": rate,
        "requests": len(results),
        "achieved": len(results) / took if took else 0.0,
        "p50_ms": percentile(lat, 50) * 1000,
        "p99_ms": percentile(lat, 99) * 1000,
        "max_ms": max(lat) * 1000 if lat else float("nan"),
        "errors": errors,
        "error_codes": dict(codes),
        "loop_gap_p99_s": percentile(watch.gaps, 99),
        "loop_gap_max_s": max(watch.gaps) if watch.gaps else float("nan"),
        "loop_stalls": sum(1 for g in watch.gaps if g > STALL_S),
    }


def restart_times(ages_h: list[float], console: Console) -> list[dict[str, Any]]:
    """Per twin age: seconds until a restarted `gpufleet up` can answer reads, and until its twin is back, from
    its last snapshot and (baseline) replayed from its start."""
    from gpufleet.cli.core import builtin_example
    from gpufleet.cli.server import Mode, twin_plane
    from gpufleet.sim import runner as runner_module

    scenario = builtin_example("scenarios/day-256gpu.yaml")
    rows = []
    saved = runner_module.SNAPSHOT_EVERY_S, runner_module.SNAPSHOT_MIN_WALL_S
    for age in ages_h:
        for label, every in (("snapshot", saved[0]), ("from the start", 1e12)):
            runner_module.SNAPSHOT_EVERY_S = every
            runner_module.SNAPSHOT_MIN_WALL_S = 0.0  # as a twin running at its speed would have taken them
            home = Path(tempfile.mkdtemp(prefix="gpufleet-restart-"))
            try:
                first = twin_plane(home, scenario, Mode.dry_run, 60.0)
                for _ in range(int(age * 3600)):
                    first.loop.step_once()
                first.plane.close()
                first.plane.db.close()
                started = time.perf_counter()
                again = twin_plane(home, scenario, Mode.dry_run, 60.0)
                readable = time.perf_counter() - started
                again.plane.incidents(limit=50)  # what the first read does
                first_read = time.perf_counter() - started
                again.loop.finish_restore()
                back = time.perf_counter() - started
                again.plane.close()
                again.plane.db.close()
            finally:
                runner_module.SNAPSHOT_EVERY_S, runner_module.SNAPSHOT_MIN_WALL_S = saved
                shutil.rmtree(home, ignore_errors=True)
            console.log(f"restart at {age:g} h ({label}): first read {first_read:.2f} s, twin back {back:.2f} s")
            rows.append({"age_h": age, "restore": label, "readable_s": readable, "first_read_s": first_read,
                         "twin_back_s": back})  # fmt: skip
    return rows


def first_chart(url: str) -> list[float]:
    """ms from navigation start to the first chart drawn, as the page records it, in headless Chromium."""
    chromium = shutil.which("chromium")
    if chromium is None:
        return []
    from tests.browser import Chromium

    times = []
    with tempfile.TemporaryDirectory() as profile:
        browser = Chromium(chromium, Path(profile))
        try:
            for k in range(3):
                browser.navigate(f"{url}?load={k}")
                value = browser.wait_for("window.__gpufleetFirstChart", timeout=30)
                if isinstance(value, int | float):
                    times.append(float(value))
        finally:
            browser.close()
    return times


def failover(repeats: int, console: Console) -> list[float]:
    """Seconds from SIGKILL of the leader to the other replica leading."""
    pg_dir = Path(tempfile.mkdtemp(prefix="gpufleet-pg-bench-"))
    started = subprocess.run(
        [str(ROOT / "scripts" / "start-postgres.sh"), str(pg_dir), str(free_port())], capture_output=True, text=True
    )
    if started.returncode != 0:
        console.log(f"no PostgreSQL: {started.stderr.strip()[-300:]}")
        return []
    url = started.stdout.strip().splitlines()[-1]
    ports = [free_port(), free_port()]
    servers = [_replica(url, p) for p in ports]
    times = []
    try:
        for k in range(repeats):
            if not _until(lambda: sum(bool((_health(p) or {}).get("leader")) for p in ports) == 1, 60):
                console.log("the replicas did not settle on one leader")
                break
            leader = next(i for i, p in enumerate(ports) if (_health(p) or {}).get("leader"))
            other = ports[1 - leader]
            killed = time.monotonic()
            servers[leader].send_signal(signal.SIGKILL)
            servers[leader].wait()
            if _until(lambda port=other: bool((_health(port) or {}).get("leader")), 30, every=0.05):
                times.append(time.monotonic() - killed)
                console.log(f"failover {k + 1}: {times[-1]:.2f} s")
            servers[leader] = _replica(url, ports[leader])  # back to two for the next round
    finally:
        for s in servers:
            if s.poll() is None:
                s.terminate()
                s.wait(timeout=10)
        subprocess.run([str(ROOT / "scripts" / "stop-postgres.sh"), str(pg_dir)], capture_output=True)
        shutil.rmtree(pg_dir, ignore_errors=True)
    return times


def _replica(url: str, port: int) -> subprocess.Popen[bytes]:
    home = tempfile.mkdtemp(prefix="gpufleet-replica-")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}, "GPUFLEET_HOME": home}
    cmd = [sys.executable, "-m", "gpufleet.cli.main", "server", "--state", url, "--port", str(port)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _health(port: int, timeout: float = 1) -> dict[str, Any] | None:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        conn.request("GET", "/healthz")
        body = json.loads(conn.getresponse().read())
        conn.close()
        return dict(body)
    except (OSError, ValueError, http.client.HTTPException):
        return None


def _until(condition: Any, seconds: float, every: float = 0.2) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(every)
    return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="200,1000")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--nodes", type=int, default=256)
    parser.add_argument("--spread", action="store_true", help="agents push each at its own moment of the second")
    parser.add_argument("--skip-failover", action="store_true")
    parser.add_argument("--restart-ages", default="1,4", help="twin ages (simulated hours) to restart at")
    parser.add_argument("--skip-restart", action="store_true")
    parser.add_argument("-o", "--output", choices=["table", "json"], default="table")
    args = parser.parse_args()
    console = Console(stderr=True)
    rates = [float(r) for r in args.rates.split(",")]
    minutes = (60 + (len(rates) + 1) * (args.seconds + 15)) / 60
    server = Server()
    ctx = mp.get_context("spawn")
    out_recv, out_send = ctx.Pipe(duplex=False)
    back_recv, back_send = ctx.Pipe(duplex=False)
    # a few faults, so there are incidents to read and stream
    faults = ["gpu-off-bus", "link-down", "thermal-runaway", "xid"]
    agents = ctx.Process(target=agents_main, args=(args.nodes, minutes, 1, 7, faults, out_send, back_recv))
    agents.start()
    rows: list[dict[str, Any]] = []
    streams = Streams(server.port)
    try:
        _, count = out_recv.recv()
        pushes = Pushes()
        stats = [SenderStats() for _ in range(16)]
        for s in stats:
            threading.Thread(target=sender, args=(pushes, server.port, server.token, s), daemon=True).start()
        start_mono = time.monotonic() + 1.0
        back_send.send(("go", time.time() + 1.0, start_mono))
        done = threading.Event()

        def pump() -> None:
            while not done.is_set():
                try:
                    msg = out_recv.recv()
                except (EOFError, OSError):  # the agents' process ended
                    return
                if msg[0] == "done":
                    done.set()
                    return
                items = msg[2]
                for i, (node, body, sent, records) in enumerate(items):
                    due = sent + SPREAD_OVER_S * i / len(items) if args.spread and not records else 0.0
                    pushes.put(Push(node, body, sent, records, due))
                back_send.send(("acks", pushes.drain_acks()))

        threading.Thread(target=pump, daemon=True).start()
        console.log(f"{count} agents pushing once a second to {server.home}; warming up 45 s")
        time.sleep(45)
        streams.start()
        nodes = [n["name"] for n in server.get("/api/v1/nodes")]
        paths = mix(nodes)
        for rate in [BASELINE_RATE, *rates]:
            console.log(f"reads at {rate:g}/s for {args.seconds:g} s")
            rows.append(run_load(server.port, rate, args.seconds, paths))
            time.sleep(5)
        ingest = [x for s in stats for x in s.rtt]
        ingest_errors = sum(sum(s.errors.values()) for s in stats)
        health = server.get("/healthz")
        url = f"http://127.0.0.1:{server.port}/"
        charts = first_chart(url)
        streams.stopping.set()
        done.set()
    finally:
        agents.terminate()
        server.stop()
    fail = [] if args.skip_failover else failover(3, console)
    restarts = [] if args.skip_restart else restart_times([float(a) for a in args.restart_ages.split(",")], console)
    result = {
        "nodes": args.nodes,
        "agents_in_step": not args.spread,
        "gpus": args.nodes * 8,
        "agents": count,
        "reads": rows,
        "ingest_rtt_p50_ms": percentile(ingest, 50) * 1000,
        "ingest_rtt_p99_ms": percentile(ingest, 99) * 1000,
        "ingest_errors": ingest_errors,
        "server_batches": health.get("batches"),
        "sse_frames": dict(streams.frames),
        "sse_failures": streams.failures,
        "first_chart_ms": charts,
        "failover_s": fail,
        "restarts": restarts,
    }
    if args.output == "json":
        print(json.dumps(result, indent=2))
        return
    out = Console(width=160)
    when = "each at its own moment" if args.spread else "all at the same moment"
    table = Table(title=f"API reads, {args.nodes} nodes x 8 GPUs pushing once a second, {when} (open-loop load, 30 s)")
    cols = ("target req/s", "achieved", "requests", "p50 ms", "p99 ms", "max ms", "errors", "p99 vs baseline",
            "loop gap p99 / max s", "loop stalls")  # fmt: skip
    for col in cols:
        table.add_column(col, justify="right")
    base = rows[0]["p99_ms"] if rows else float("nan")
    for r in rows:
        table.add_row(
            f"{r['rate']:g}" + (" (baseline)" if r["rate"] == BASELINE_RATE else ""),
            f"{r['achieved']:.0f}",
            str(r["requests"]),
            f"{r['p50_ms']:.1f}",
            f"{r['p99_ms']:.1f}",
            f"{r['max_ms']:.0f}",
            f"{r['errors']}" + (f" {r['error_codes']}" if r["errors"] else ""),
            f"{r['p99_ms'] / base:.1f}x",
            f"{r['loop_gap_p99_s']:.2f} / {r['loop_gap_max_s']:.2f}",
            str(r["loop_stalls"]),
        )
    out.print(table)
    other = Table(title="Alongside")
    other.add_column("measure")
    other.add_column("value", justify="right")
    other.add_row(
        "agent pushes: round trip p50 / p99",
        f"{result['ingest_rtt_p50_ms']:.0f} / {result['ingest_rtt_p99_ms']:.0f} ms",
    )
    other.add_row("agent push errors", str(ingest_errors))
    other.add_row(f"SSE frames to {STREAMS} clients (failures)", f"{sum(streams.frames.values())} ({streams.failures})")
    med = statistics.median(charts) if charts else float("nan")
    other.add_row("dashboard: first chart drawn (median of 3)", f"{med:.0f} ms" if charts else "not measured")
    fo = statistics.median(fail) if fail else float("nan")
    other.add_row("failover: leader SIGKILL -> other leads (median of 3)", f"{fo:.2f} s {fail}" if fail else "not run")
    out.print(other)
    if restarts:
        again = Table(title="gpufleet up restarted on its home (256 GPUs; seconds)")
        for col in ("twin age", "brought back", "API answers", "first read", "twin back where it stopped"):
            again.add_column(col, justify="right")
        for r in restarts:
            again.add_row(f"{r['age_h']:g} h", r["restore"], f"{r['readable_s']:.2f}", f"{r['first_read_s']:.2f}",
                          f"{r['twin_back_s']:.2f}")  # fmt: skip
        out.print(again)


if __name__ == "__main__":
    main()
