"""The real HTTP door under load: simulated agents for 64, 256 and 1,024 nodes pushing to one `gpufleet server`.

What is simulated: the nodes. A twin of N nodes x 8 H100 (eight 400 Gb/s rails; bench/faults.py's cluster, workload
and seeded fault campaign) runs in this benchmark's own process in real time, one simulated second per wall second.
Each second it steps once, `SimFleet.collect()`s every answering node's batch (node-local detectors already run, as
in a real agent's edge) and hands each batch, JSON-encoded with `gpufleet.model.wire.encode`, to a pool of sender
threads in the parent process (a pipe between the two keeps the twin's CPU off the senders' interpreter lock).
Batches that carry new records go first, the rest follow in node order at once: every agent collects at the same
moment, the worst case for the server. With `--spread` each agent pushes at its own moment of the second instead,
as agents that are not in step do (records still go at once). A node whose previous push is still queued has it
replaced by the newer one (it holds every record the old one did), as a real agent's pusher does.

What is real: one `python -m gpufleet.cli.main server --backend none --remediate dry-run` process with a fresh
GPUFLEET_HOME (its own SQLite state, embedded metric store, control loop at 1 s, dry-run remediation), and one HTTP
POST to /api/v1/ingest per agent per second with the bearer token, over keep-alive connections (http.client, one
connection per sender thread). Acknowledged sequence numbers go back to the agents' spools a second later.

Clocks: the server stamps with the wall clock, so every time in a batch (sent, records, metric snapshot, job steps)
is shifted by one constant so that the collection after step k carries the step's scheduled wall time. A fault
is injected at wall time W (when the step that applies it starts) and its incident is visible at V, the first
answer of `GET /api/v1/incidents` (polled every 0.2 s from its own thread) that lists it; latency is V - W, in wall
seconds, so it includes the collection, the push queue, ingest and correlation, the control loop (for cross-node
checks) and up to one poll interval. Incidents are matched to faults with bench/faults.py's rules.

The campaign in real time: the twin is first fast-forwarded `CAMPAIGN_START_S` (jobs past their first steps), then
every fault class (`--types`, default all) is injected `--per-type` times (fewer when the cluster is too small
to give each fault its own node or job; the row says so) at random times of a `--minutes` window, each class early
enough for its detection window to fit (ib-symbol-errors' 12-minute BER window, idle-gpu's 10-minute hold).

Measured per size: the server's CPU (utime + stime from /proc/<pid>/stat, in cores: the median of 10 s windows and
the whole run), ingest requests/s achieved, the push round trip as the client sees it (p50/p99), the lag from a
batch's `sent` time (its collection; with `--spread`, its agent's moment to push) to its acknowledgement (p50/p99;
when all push at once, the time the server takes to absorb a second's worth of pushes), fault -> incident latency
p50/p99 per class, recall and precision (every incident at the server must match an injected fault; effects join
their cause's incident and are not counted apart). With `--profile S`, py-spy samples the server for S seconds in
the middle of the largest run and the output names where its time goes (with FLEET_INGEST_PROFILE_OUT=PATH, the raw
stacks are kept there).

In-process rows (from bench/faults.py, `--with-faults-bench` runs it, `--faults-json` reads a saved run): the
"twin-direct" campaign (256 nodes, 24 simulated hours) and the healthy day (24 h, no fault; 0 incidents expected)
through the same ingest code after the transport, no HTTP. Their latencies are in simulated seconds at 1 s ticks
and their CPU is the time spent in `ingest` + `tick` per simulated second (the cores the plane needs at real time
without HTTP).

Caveats: the agents, the senders and the server share this machine's cores (two here, with other work): the
server's CPU time is its own, but its latencies include waiting for a core; the table prints what the other
processes used. With a handful of faults per class, p99 is the largest sample.

    python bench/fleet_ingest.py [--nodes 64,256,1024] [--minutes 15,15,25] [--per-type 3] [--seed 11]
        [--types all] [--senders 16] [--spread] [--with-faults-bench | --faults-json PATH] [--profile 120]
        [--save PATH] [-o json]
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import multiprocessing as mp
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
from rich.console import Console
from rich.table import Table

from faults import (
    CAMPAIGN_START_S,
    Campaign,
    Ranks,
    campaign,
    incident_row,
    match,
    note_ranks,
    percentile,
)
from gpufleet.errors import ManifestError
from gpufleet.model.observe import Ack, Batch, Finding, Record
from gpufleet.model.wire import JSON, decode_ack, encode
from gpufleet.sim.faults import InjectedFault
from gpufleet.sim.twin import EPOCH
from gpufleet.spec.scenario_spec import FaultType

BENCH = Path(__file__).resolve().parent
KEY_CLASSES = (FaultType.xid, FaultType.gpu_off_bus, FaultType.link_down)
TARGET_P99_S = 2.0
TARGET_CORES = 1.0
POLL_S = 0.2
SPREAD_OVER_S = 0.95
CPU_WINDOW_S = 10.0
WARMUP_S = 45.0  # real-time seconds before the first fault: every agent has pushed its inventory and jobs
TAIL_S = 10.0  # polling goes on this long after the last push
# How long after its injection a fault class may need before its incident opens (its detection window + margin).
SETTLE_S = {
    FaultType.ib_symbol_errors: 13 * 60.0,
    FaultType.idle_gpu: 11 * 60.0,
    FaultType.thermal_runaway: 7 * 60.0,
    FaultType.link_flap: 3 * 60.0,
    FaultType.straggler: 3 * 60.0,
    FaultType.nccl_hang: 2 * 60.0,
    FaultType.driver_mismatch: 2 * 60.0,
}
DEFAULT_SETTLE_S = 60.0


# --- the fault plan ------------------------------------------------------------------------------------------------


def plan(
    nodes: int, minutes: float, per_type: int, seed: int, types: list[FaultType] | None
) -> tuple[Campaign, int, list[str]]:
    """bench/faults.py's campaign for a real-time window: the same places, times drawn inside the window, each
    class early enough to be detected before the run ends. Fewer per class when the cluster cannot hold them."""
    notes: list[str] = []
    start = CAMPAIGN_START_S + WARMUP_S
    end = CAMPAIGN_START_S + minutes * 60.0
    for k in range(per_type, 0, -1):
        try:
            last = max(start + 1.0, end - DEFAULT_SETTLE_S)
            setup = campaign(nodes, end, k, seed, True, start=start, end=last, types=types)
        except ManifestError:
            continue
        break
    else:
        raise SystemExit(f"{nodes} nodes cannot hold one fault of each class")
    if k < per_type:
        notes.append(f"{k} per class ({per_type} do not fit {nodes} nodes)")
    rng = np.random.default_rng(seed + 7)
    for f in setup.faults:
        latest = end - SETTLE_S.get(f.type, DEFAULT_SETTLE_S)
        if latest < start:
            notes.append(f"{f.type.value}: the window is shorter than its detection time")
            latest = start
        if f.time > latest:
            f.time = float(round(rng.uniform(start, latest)))
    setup.faults.sort(key=lambda f: f.time)
    return setup, k, sorted(set(notes))


# --- the agents' process: the twin in real time ---------------------------------------------------------------------


def shifted(batch: Batch, offset: float) -> Batch:
    """The batch with every time moved by `offset` (twin epoch -> wall clock). Copies: the spool keeps the
    original records, which may be sent again."""
    replace = msgspec.structs.replace
    records = []
    for r in batch.records:
        body = r.body
        if isinstance(body, Finding) and body.began is not None:
            body = replace(body, time=body.time + offset, began=body.began + offset)
        else:
            body = replace(body, time=body.time + offset)
        records.append(Record(r.seq, body))
    return replace(
        batch,
        sent=batch.sent + offset,
        records=records,
        metrics=None if batch.metrics is None else replace(batch.metrics, time=batch.metrics.time + offset),
        jobs=None if batch.jobs is None else [replace(j, last_step_time=j.last_step_time + offset) for j in batch.jobs],
    )


@dataclass
class AgentsResult:
    faults: list[InjectedFault]
    injected_at: dict[int, float]  # fault id -> wall time W
    ranks: Ranks
    offset: float  # wall = twin epoch time + offset
    steps: int
    end: float  # twin time of the last collection
    late: list[float]  # how late each step started (s)
    busy: list[float]  # step + collect + encode per second (s)
    cpu_s: float
    records: int


def agents_main(
    nodes: int, minutes: float, per_type: int, seed: int, types: list[str] | None, out: Connection, back: Connection
) -> None:
    """Child process: build the twin, fast-forward it, then run it in real time and hand batches to the parent."""
    from gpufleet.sim.fleet import SimFleet

    setup, _, _ = plan(nodes, minutes, per_type, seed, [FaultType(t) for t in types] if types else None)
    twin = setup.twin(seed)
    twin.run(CAMPAIGN_START_S)
    fleet = SimFleet(twin)
    out.send(("ready", len(fleet.agents)))
    _, start_wall, start_mono = back.recv()
    offset = start_wall - (EPOCH + twin.time + twin.tick)  # the collection after step k carries start + k
    pending = sorted(setup.faults, key=lambda f: f.time)
    injected_at: dict[int, float] = {}
    ranks: Ranks = {}
    acked: dict[str, int] = {}
    late: list[float] = []
    busy: list[float] = []
    cpu0 = time.process_time()
    records = 0
    steps = int(minutes * 60)
    items: list[tuple[str, bytes, float, int]] = []

    def enqueue(batch: Batch) -> Ack:
        wire = shifted(batch, offset)
        items.append((batch.node, encode(wire, JSON), wire.sent, len(batch.records)))
        return Ack(acked.get(batch.node, 0), 0, 0)  # the last ack heard: trims the spool as `deliver` does

    for k in range(steps):
        due = start_mono + k * twin.tick
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        t0 = time.monotonic()
        late.append(t0 - due)
        while back.poll():
            acked.update(back.recv()[1])
        while pending and pending[0].time <= twin.time:
            f = pending.pop(0)
            injected_at[f.id] = time.time()
            note_ranks(twin, f, ranks)
        twin.step()
        fleet.deliver(fleet.collect(), enqueue)
        records += sum(n for *_, n in items)
        busy.append(time.monotonic() - t0)
        out.send(("step", k, items))
        items.clear()
    result = AgentsResult(
        setup.faults, injected_at, ranks, offset, steps, twin.time, late, busy, time.process_time() - cpu0, records
    )
    out.send(("done", result))


# --- the parent: senders, poller, CPU monitor ----------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def proc_cpu(pid: int) -> float:
    """utime + stime of a process, in seconds."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_cpu() -> tuple[float, float]:
    """(busy, all) CPU seconds of the whole machine since boot."""
    with open("/proc/stat", encoding="ascii") as fh:
        values = [int(v) for v in fh.readline().split()[1:]]
    idle = values[3] + values[4]
    return (sum(values[:8]) - idle) / os.sysconf("SC_CLK_TCK"), sum(values[:8]) / os.sysconf("SC_CLK_TCK")


class Server:
    """One `gpufleet server` process with a fresh data directory."""

    def __init__(self) -> None:
        self.home = Path(tempfile.mkdtemp(prefix="gpufleet-ingest-"))
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
        env["GPUFLEET_HOME"] = str(self.home)
        cmd = [sys.executable, "-m", "gpufleet.cli.main", "server", "--backend", "none", "--remediate", "dry-run"]
        self.log = (self.home / "server.log").open("w")
        self.proc = subprocess.Popen(
            [*cmd, "--port", str(self.port)], env=env, stdout=self.log, stderr=subprocess.STDOUT
        )
        self.warnings: list[str] = []
        self.token = self._wait()

    def _wait(self) -> str:
        deadline = time.monotonic() + 60.0
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"the server exited: {(self.home / 'server.log').read_text()[-2000:]}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                conn.request("GET", "/healthz")
                conn.getresponse().read()
                conn.close()
                return (self.home / "token").read_text().strip()
            except OSError:
                time.sleep(0.2)
        raise SystemExit("the server did not answer within 60 s")

    def get(self, path: str) -> Any:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        conn.request("GET", path)
        body = conn.getresponse().read()
        conn.close()
        return json.loads(body)

    def stop(self, keep: bool = False) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        text = (self.home / "server.log").read_text(errors="replace")
        # what an operator would look for in its log: slow turns of the control loop, errors
        self.warnings = [line for line in text.splitlines() if "turn took" in line or " ERROR " in line]
        if not keep:
            shutil.rmtree(self.home, ignore_errors=True)


@dataclass
class Push:
    node: str
    body: bytes
    sent: float  # wall time the batch carries
    records: int
    due: float = 0.0  # wall time to push at (--spread), 0: at once


@dataclass
class SenderStats:
    done: list[float] = field(default_factory=list)  # wall time of each acknowledgement
    rtt: list[float] = field(default_factory=list)
    lag: list[float] = field(default_factory=list)  # ack wall time - batch `sent`
    urgent_lag: list[float] = field(default_factory=list)  # the same, batches carrying records
    errors: Counter[str] = field(default_factory=Counter)


class Pushes:
    """The push queue: batches with records first, then the rest in arrival order; a node's queued push is
    replaced by a newer one."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.latest: dict[str, Push] = {}
        self.queue: queue.PriorityQueue[tuple[int, int, str]] = queue.PriorityQueue()
        self.order = 0
        self.coalesced = 0
        self.acked: dict[str, int] = {}

    def put(self, push: Push) -> None:
        with self.lock:
            if push.node in self.latest:
                self.coalesced += 1
                self.latest[push.node] = push
                if push.records:  # may jump the queue now
                    self.order += 1
                    self.queue.put((0, self.order, push.node))
                return
            self.latest[push.node] = push
            self.order += 1
            self.queue.put((0 if push.records else 1, push.due or self.order, push.node))

    def take(self) -> Push | None:
        node = self.queue.get()[2]
        if node == "":
            return None
        with self.lock:
            return self.latest.pop(node, Push("", b"", 0.0, 0))

    def stop(self, senders: int) -> None:
        for _ in range(senders):
            self.queue.put((2, 0, ""))

    def ack(self, node: str, acked: int) -> None:
        with self.lock:
            self.acked[node] = max(self.acked.get(node, 0), acked)

    def drain_acks(self) -> dict[str, int]:
        with self.lock:
            out, self.acked = self.acked, {}
        return out

    def idle(self) -> bool:
        with self.lock:
            return not self.latest


def sender(pushes: Pushes, port: int, token: str, stats: SenderStats) -> None:
    headers = {"Content-Type": JSON, "Authorization": f"Bearer {token}"}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    while (push := pushes.take()) is not None:
        if not push.node:
            continue  # an entry whose push an earlier one already carried
        if push.due > (now := time.time()):
            time.sleep(push.due - now)
        t0 = time.perf_counter()
        try:
            conn.request("POST", "/api/v1/ingest", push.body, headers)
            resp = conn.getresponse()
            data = resp.read()
        except (OSError, http.client.HTTPException) as exc:
            stats.errors[type(exc).__name__] += 1
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            continue  # its records stay in the agent's spool and go with the next push
        rtt = time.perf_counter() - t0
        now = time.time()
        if resp.status != 200:
            stats.errors[f"HTTP {resp.status}"] += 1
            continue
        pushes.ack(push.node, decode_ack(data).acked)
        stats.done.append(now)
        stats.rtt.append(rtt)
        stats.lag.append(now - max(push.sent, push.due))
        if push.records:
            stats.urgent_lag.append(now - push.sent)
    conn.close()


class Poller(threading.Thread):
    """When each incident first shows in `GET /api/v1/incidents`."""

    def __init__(self, port: int) -> None:
        super().__init__(name="poller", daemon=True)
        self.port = port
        self.first: dict[str, float] = {}
        self.stopping = threading.Event()
        self.errors = 0
        self.refused: Counter[int] = Counter()  # answers other than 200, by status
        self.latency: list[float] = []  # each answer's round trip, refusals too: the API as a reader sees it
        self.refused_at: list[float] = []  # wall times of the refusals
        self.polls = 0

    def run(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        while not self.stopping.is_set():
            t0 = time.monotonic()
            try:
                conn.request("GET", "/api/v1/incidents?limit=100000")
                resp = conn.getresponse()
                body = resp.read()
                seen = time.time()
                self.latency.append(time.monotonic() - t0)
                rows = json.loads(body)
                if resp.status != 200 or not isinstance(rows, list):  # shed under load: counted, polled again
                    self.errors += 1
                    self.refused[resp.status] += 1
                    self.refused_at.append(seen)
                else:
                    for inc in rows:
                        self.first.setdefault(inc["id"], seen)
                    self.polls += 1
            except (OSError, http.client.HTTPException, ValueError):
                self.errors += 1
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            self.stopping.wait(max(0.0, POLL_S - (time.monotonic() - t0)))
        conn.close()


class Monitor(threading.Thread):
    """CPU seconds of the server, the agents' process, this process and the whole machine, once a second."""

    def __init__(self, pids: dict[str, int]) -> None:
        super().__init__(name="monitor", daemon=True)
        self.pids = pids
        self.samples: list[tuple[float, dict[str, float]]] = []
        self.stopping = threading.Event()

    def sample(self) -> None:
        values = {name: proc_cpu(pid) for name, pid in self.pids.items()}
        values["machine"], values["machine_all"] = machine_cpu()
        self.samples.append((time.monotonic(), values))

    def run(self) -> None:
        while not self.stopping.is_set():
            self.sample()
            self.stopping.wait(1.0)

    def cores(self, name: str, start: float, end: float) -> tuple[float, float]:
        """(median over 10 s windows, whole window) in cores, between two monotonic times."""
        s = [(t, v[name]) for t, v in self.samples if start - 0.5 <= t <= end + 0.5]
        if len(s) < 2:
            return math.nan, math.nan
        whole = (s[-1][1] - s[0][1]) / (s[-1][0] - s[0][0])
        windows = []
        i = 0
        for j in range(1, len(s)):
            if s[j][0] - s[i][0] >= CPU_WINDOW_S:
                windows.append((s[j][1] - s[i][1]) / (s[j][0] - s[i][0]))
                i = j
        return (float(np.median(windows)) if windows else whole), whole


IDLE_LEAVES = ("Condition.wait (", "Event.wait (", "Runner.run (asyncio/runners.py", "select (", "sleep (")
PROFILE_PARTS = (
    ("ingest: plane.ingest (store, fleet state, correlation)", "ControlPlane.ingest ("),
    ("ingest: decode_batch (msgspec)", "decode_batch ("),
    ("ingest: sync token dependency -> thread pool hop", "run_sync ("),
    ("control loop: plane.tick", "ControlPlane.tick ("),
    ("GET /api/v1/incidents (the poller)", "ControlPlane.incidents ("),
    ("HTTP: uvicorn, Starlette, FastAPI around the handlers", "RequestResponseCycle.run_asgi ("),
    ("HTTP: uvicorn protocol (parse, read, write)", "httptools_impl.py"),
)


def profile_summary(path: Path, top: int = 15) -> dict[str, Any]:
    """Where the server's busy samples fall: by part of the request path, and the functions with most own time.
    py-spy cannot tell idle threads apart here, so samples that end in a wait (or in the event loop's own native
    code, mostly epoll) are set aside as idle."""
    own: Counter[str] = Counter()
    parts: Counter[str] = Counter()
    total = idle = 0
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        stack, _, count = line.rpartition(" ")
        n = int(count)
        total += n
        frames = stack.split(";")
        if frames[-1].startswith(IDLE_LEAVES):
            idle += n
            continue
        own[frames[-1]] += n
        for label, marker in PROFILE_PARTS:
            if marker in stack:
                parts[label] += n
                break
        else:
            parts["other (metric store flush, threads, ...)"] += n
    busy = max(1, total - idle)
    return {
        "samples": total,
        "idle": idle,
        "parts": [(label, n / busy) for label, n in parts.most_common()],
        "own": [(name, n / busy) for name, n in own.most_common(top)],
    }


@dataclass
class RowResult:
    nodes: int
    minutes: float
    per_type: int
    notes: list[str]
    spread: bool = False
    agents: int = 0
    wall_s: float = 0.0
    server_cores: tuple[float, float] = (math.nan, math.nan)
    agents_cores: float = math.nan
    parent_cores: float = math.nan
    others_cores: float = math.nan
    requests: int = 0
    rps: float = 0.0
    rtt: tuple[float, float] = (math.nan, math.nan)
    lag: tuple[float, float] = (math.nan, math.nan)
    urgent_lag: tuple[float, float] = (math.nan, math.nan)
    errors: dict[str, int] = field(default_factory=dict)
    coalesced: int = 0
    late: tuple[float, float] = (math.nan, math.nan)  # p50, max of how late the twin's steps started
    busy_p50: float = math.nan
    latency: dict[str, list[float]] = field(default_factory=dict)  # class -> V - W of found faults
    server_latency: dict[str, list[float]] = field(default_factory=dict)  # class -> first_seen - injection
    missed: list[str] = field(default_factory=list)
    faults: int = 0
    found: int = 0
    incidents: int = 0
    unmatched: list[str] = field(default_factory=list)
    after_stop: list[str] = field(default_factory=list)  # opened once the agents had stopped: not scored
    incident_list: list[dict[str, Any]] = field(default_factory=list)
    server_batches: int = 0
    polls: int = 0
    api: tuple[float, float] = (math.nan, math.nan)  # GET /api/v1/incidents round trip, p50 / p99
    elapsed_s: float = 0.0  # the whole row: twin build and fast-forward, server start, run, tail
    profile: dict[str, Any] | None = None

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> RowResult:
        known = set(cls.__dataclass_fields__)
        row = cls(**{k: v for k, v in body.items() if k in known})
        for name in ("server_cores", "rtt", "lag", "urgent_lag", "late", "api"):
            setattr(row, name, tuple(float("nan") if v is None else v for v in getattr(row, name)))
        return row

    @property
    def recall(self) -> float:
        return self.found / self.faults if self.faults else 1.0

    @property
    def precision(self) -> float:
        return 1.0 - len(self.unmatched) / self.incidents if self.incidents else 1.0


def p50_p99(values: list[float]) -> tuple[float, float]:
    return percentile(values, 50), percentile(values, 99)


def run_size(
    nodes: int,
    minutes: float,
    per_type: int,
    seed: int,
    types: list[str] | None,
    senders: int,
    profile_s: float,
    console: Console,
    spread: bool = False,
) -> RowResult:
    began = time.monotonic()
    _, used, notes = plan(nodes, minutes, per_type, seed, [FaultType(t) for t in types] if types else None)
    row = RowResult(nodes, minutes, used, notes, spread=spread)
    server = Server()
    ctx = mp.get_context("spawn")
    out_recv, out_send = ctx.Pipe(duplex=False)
    back_recv, back_send = ctx.Pipe(duplex=False)
    agents = ctx.Process(
        target=agents_main, args=(nodes, minutes, per_type, seed, types, out_send, back_recv), name="agents"
    )
    agents.start()
    try:
        _, row.agents = out_recv.recv()
        pushes = Pushes()
        stats = [SenderStats() for _ in range(senders)]
        threads = [
            threading.Thread(target=sender, args=(pushes, server.port, server.token, s), daemon=True) for s in stats
        ]
        for t in threads:
            t.start()
        poller = Poller(server.port)
        monitor = Monitor({"server": server.proc.pid, "agents": agents.pid or 0, "parent": os.getpid()})
        monitor.sample()
        start_mono = time.monotonic() + 1.0
        start_wall = time.time() + (start_mono - time.monotonic())
        back_send.send(("go", start_wall, start_mono))
        monitor.start()
        poller.start()
        spy: subprocess.Popen[bytes] | None = None
        spy_at = minutes * 60.0 / 2 - profile_s / 2
        console.log(f"{nodes} nodes: {row.agents} agents pushing for {minutes:g} min to {server.home}")
        result: AgentsResult | None = None
        while result is None:
            while not out_recv.poll(5.0):
                if not agents.is_alive():  # killed (the OOM killer says so only in the kernel log): stop, say why
                    raise RuntimeError(f"the agents' process (the twin) ended with exit code {agents.exitcode}")
            msg = out_recv.recv()
            if msg[0] == "done":
                result = msg[1]
                break
            _, k, items = msg
            for i, (node, body, sent, records) in enumerate(items):
                # --spread: agents out of step with each other, each pushing at its own moment of the second
                due = sent + SPREAD_OVER_S * i / len(items) if spread and not records else 0.0
                pushes.put(Push(node, body, sent, records, due))
            back_send.send(("acks", pushes.drain_acks()))
            if profile_s > 0 and spy is None and k >= spy_at:
                spy = start_profile(server, profile_s)
            if k % 60 == 0 and k:
                console.log(f"  {nodes} nodes: {k // 60} min, {len(poller.first)} incidents so far")
        end_mono = start_mono + result.steps
        while not pushes.idle() and time.monotonic() < end_mono + 60:
            time.sleep(0.05)
        time.sleep(TAIL_S)
        poller.stopping.set()
        monitor.stopping.set()
        poller.join()
        monitor.join()
        pushes.stop(senders)
        for t in threads:
            t.join(timeout=30)
        final = server.get("/api/v1/incidents?limit=100000")
        health = server.get("/healthz")
        if spy is not None:
            spy.wait(timeout=profile_s + 60)
            row.profile = profile_summary(server.home / "profile.txt")
            if os.environ.get("FLEET_INGEST_PROFILE_OUT"):  # the raw stacks, for a flame graph or a closer look
                shutil.copy(server.home / "profile.txt", os.environ["FLEET_INGEST_PROFILE_OUT"])
    finally:
        agents.join(timeout=60)
        if agents.is_alive():
            agents.terminate()
        server.stop()
    assert result is not None
    if server.warnings:
        row.notes.append(f"server log: {len(server.warnings)} warnings, e.g. " + "; ".join(server.warnings[:3]))
    row.wall_s = result.steps
    row.server_cores = monitor.cores("server", start_mono, end_mono)
    row.agents_cores = monitor.cores("agents", start_mono, end_mono)[1]
    row.parent_cores = monitor.cores("parent", start_mono, end_mono)[1]
    machine = monitor.cores("machine", start_mono, end_mono)[1]
    row.others_cores = machine - row.server_cores[1] - row.agents_cores - row.parent_cores
    done = sorted(t for s in stats for t in s.done)
    in_run = [t for t in done if start_wall <= t <= start_wall + result.steps]
    row.requests = len(done)
    row.rps = len(in_run) / result.steps
    row.rtt = p50_p99([x for s in stats for x in s.rtt])
    row.lag = p50_p99([x for s in stats for x in s.lag])
    row.urgent_lag = p50_p99([x for s in stats for x in s.urgent_lag])
    row.errors = dict(sum((s.errors for s in stats), Counter()))
    row.errors.update({f"incidents poll HTTP {code}": n for code, n in poller.refused.items()})
    if poller.errors - sum(poller.refused.values()):
        row.errors["incidents poll failed"] = poller.errors - sum(poller.refused.values())
    row.coalesced = pushes.coalesced
    row.late = (percentile(result.late, 50), max(result.late))
    row.busy_p50 = percentile(result.busy, 50)
    row.server_batches = int(health.get("batches", 0))
    if health.get("loop_gap_max_s") is not None:
        row.notes.append(
            f"control loop: a turn every {health.get('loop_gap_p99_s')} s at p99, longest gap "
            f"{health['loop_gap_max_s']} s (its last 600 turns)"
        )
    row.polls = poller.polls
    row.api = p50_p99(poller.latency)
    if poller.refused_at:
        spans = [round(t - start_wall) for t in poller.refused_at]
        row.notes.append(f"reads refused from {min(spans)} s to {max(spans)} s of the run ({len(spans)} polls)")
    score(row, result, final, poller.first)
    row.elapsed_s = time.monotonic() - began
    return row


def start_profile(server: Server, seconds: float) -> subprocess.Popen[bytes]:
    spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or "py-spy"
    cmd = [spy, "record", "-p", str(server.proc.pid), "-d", str(int(seconds)), "-r", "50", "-f", "raw"]
    cmd += ["-o", str(server.home / "profile.txt"), "--nonblocking"]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def score(row: RowResult, result: AgentsResult, final: list[dict[str, Any]], first: dict[str, float]) -> None:
    """bench/faults.py's matching on the server's incidents; latency from injection (W) to first visibility (V)."""
    origin = EPOCH + result.offset
    incidents = [incident_row(b, origin) for b in final]
    # Once the agents stop, the server rightly sees their nodes go silent and their jobs stall: not scored.
    late = [i for i in incidents if float(i["first_seen"]) > result.end + 0.5]
    incidents = [i for i in incidents if float(i["first_seen"]) <= result.end + 0.5]
    injected = [f for f in result.faults if f.id in result.injected_at]
    matching = match(injected, incidents, result.ranks)
    row.faults, row.incidents = len(injected), len(incidents)
    fault_of = {str(h["id"]): f.id for f in injected for h in matching.hits[f.id]}
    row.incident_list = [
        {
            "id": i["id"],
            "cause": i["cause"].value,
            "node": i["node"],
            "first_seen": i["first_seen"],
            "visible": first.get(str(i["id"]), math.nan) - origin,
            "fault": fault_of.get(str(i["id"])),
            "summary": i["summary"],
        }
        for i in incidents
    ]
    for f in injected:
        hits = matching.hits[f.id]
        if not hits:
            row.missed.append(f"{f.type.value} at {f.time:.0f} s on {f.target}")
            continue
        row.found += 1
        seen = min(first.get(str(h["id"]), math.inf) for h in hits)
        if seen == math.inf:  # opened after the last poll: visible at the final read at the latest
            seen = time.time()
        row.latency.setdefault(f.type.value, []).append(seen - result.injected_at[f.id])
        row.server_latency.setdefault(f.type.value, []).append(float(hits[0]["first_seen"]) - f.time)
    row.unmatched = [
        f"{i['id']} t={i['first_seen']:.0f} {i['cause'].value} {i['node']} {i['summary']}" for i in matching.unmatched
    ]
    row.after_stop = [f"{i['id']} t={i['first_seen']:.0f} {i['cause'].value} {i['summary']}" for i in late]


# --- in-process rows ---------------------------------------------------------------------------------------------


def faults_bench(seed: int, console: Console) -> dict[str, Any]:
    path = Path(tempfile.mkdtemp(prefix="gpufleet-faults-")) / "faults.json"
    console.log("running bench/faults.py (256 nodes, 24 h campaign and 24 h fault-free, in process)")
    subprocess.run([sys.executable, str(BENCH / "faults.py"), "--seed", str(seed), "--json", str(path)], check=True)
    return dict(json.loads(path.read_text()))


# --- output ------------------------------------------------------------------------------------------------------


def fmt_pair(pair: tuple[float, float], scale: float = 1.0, digits: int = 0) -> str:
    a, b = pair
    if a != a:
        return "-"
    return f"{a * scale:.{digits}f} / {b * scale:.{digits}f}"


def mark(ok: bool, text: str) -> str:
    return f"[green]{text}[/green]" if ok else f"[red]{text}[/red]"


def tables(rows: list[RowResult], direct: dict[str, Any] | None) -> list[Table]:
    main = Table(title="Fleet ingest: simulated agents -> HTTP -> one gpufleet server (1 s collection, 8 GPUs/node)")
    for col in (
        "nodes",
        "door",
        "control plane\nCPU (cores)\nmedian 10 s / run",
        "requests/s\n(agents)",
        "push RTT (ms)\np50 / p99",
        "sent -> ack (ms)\np50 / p99",
        "API read (ms)\np50 / p99",
        *(f"{c.value} (s)\np50 / p99" for c in KEY_CLASSES),
        "recall",
        "precision",
    ):
        main.add_column(col, justify="right")
    for r in rows:
        big = r.nodes >= 1024
        cores = fmt_pair(r.server_cores, digits=2)
        lat = []
        for c in KEY_CLASSES:
            values = r.latency.get(c.value, [])
            text = fmt_pair(p50_p99(values), digits=2) if values else "-"
            p99 = p50_p99(values)[1] if values else math.inf
            lat.append(mark(p99 <= TARGET_P99_S, text) if big else text)
        main.add_row(
            f"{r.nodes:,}",
            "HTTP, real time" + (",\nagents spread" if r.spread else ""),
            mark(r.server_cores[0] <= TARGET_CORES, cores) if big else cores,
            f"{r.rps:,.0f} ({r.agents:,})",
            fmt_pair(r.rtt, 1000.0, 1),
            fmt_pair(r.lag, 1000.0),
            fmt_pair(r.api, 1000.0),
            *lat,
            mark(r.recall >= 1.0, f"{100 * r.recall:.0f}% of {r.faults}"),
            mark(r.precision >= 1.0, f"{100 * r.precision:.0f}% of {r.incidents}"),
        )
    if direct is not None:
        camp, quiet = direct["campaign"], direct["fault_free"]
        lat = []
        for c in KEY_CLASSES:
            values = direct["classes"].get(c.value, {}).get("latency", [])
            lat.append(fmt_pair(p50_p99(values), digits=0) + "\nsimulated s" if values else "-")
        main.add_row(
            f"{direct['nodes']:,}",
            f"in process, campaign\n({direct['hours']:g} h simulated)",
            f"{camp['plane_cores']:.3f}\n(ingest + tick)",
            f"- ({direct['nodes']:,})",
            "-",
            "-",
            "-",
            *lat,
            f"{100 * direct['recall']:.0f}% of {direct['faults']}",
            f"{100 * direct['precision']:.0f}% of {direct['incidents']}",
        )
        main.add_row(
            f"{direct['nodes']:,}",
            f"in process, healthy\nday ({direct['hours']:g} h, no fault)",
            f"{quiet['plane_cores']:.3f}\n(ingest + tick)",
            f"- ({direct['nodes']:,})",
            "-",
            "-",
            "-",
            *(["-"] * len(KEY_CLASSES)),
            "-",
            mark(quiet["incidents"] == 0, f"{quiet['incidents']} incidents\n(0 expected)"),
        )
    out = [main]

    per = Table(title="Fault -> incident latency per class, p50 / p99 (s): HTTP rows in wall seconds (W -> V)")
    per.add_column("fault class", justify="left")
    for r in rows:
        per.add_column(f"{r.nodes:,} nodes HTTP", justify="right")
    if direct is not None:
        per.add_column(f"{direct['nodes']} twin-direct (sim s)", justify="right")
    for c in FaultType:
        cells = []
        for r in rows:
            values = r.latency.get(c.value, [])
            n = len(values) + sum(1 for m in r.missed if m.startswith(c.value + " "))
            cells.append(f"{fmt_pair(p50_p99(values), digits=2)} ({len(values)}/{n})" if n else "")
        if direct is not None:
            d = direct["classes"].get(c.value)
            cells.append(f"{fmt_pair(p50_p99(d['latency']), digits=0)}" if d and d["latency"] else "")
        if any(cells):
            per.add_row(c.value, *cells)
    out.append(per)

    side = Table(title="Load and contention (cores: CPU seconds per wall second over the run)")
    for col in (
        "nodes",
        "faults\n(per class)",
        "requests",
        "server\nbatches",
        "errors",
        "coalesced",
        "records-first\nsent -> ack (ms)\np50 / p99",
        "twin step late (s)\np50 / max",
        "twin + collect\n+ encode (s) p50",
        "agents / senders /\nother processes\n(cores)",
    ):
        side.add_column(col, justify="right")
    for r in rows:
        side.add_row(
            f"{r.nodes:,}",
            f"{r.faults} ({r.per_type})",
            f"{r.requests:,}",
            f"{r.server_batches:,}",
            ", ".join(f"{k} x{v}" for k, v in r.errors.items()) or "0",
            f"{r.coalesced:,}",
            fmt_pair(r.urgent_lag, 1000.0),
            fmt_pair(r.late, digits=2),
            f"{r.busy_p50:.2f}",
            f"{r.agents_cores:.2f} / {r.parent_cores:.2f} / {r.others_cores:.2f}",
        )
    out.append(side)
    return out


def as_json(rows: list[RowResult], direct: dict[str, Any] | None) -> dict[str, Any]:
    out = []
    for r in rows:
        body = {k: v for k, v in r.__dict__.items()}
        body["recall"], body["precision"] = r.recall, r.precision
        body["latency_p50_p99"] = {k: p50_p99(v) for k, v in r.latency.items()}
        out.append(body)
    return {"http": out, "in_process": direct}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", default="64,256,1024", help="cluster sizes, comma-separated")
    parser.add_argument("--minutes", default="", help="real-time minutes per size (one value or one per size); "
                        "default 25 at 1,024 nodes and more, 15 below")  # fmt: skip
    parser.add_argument("--per-type", type=int, default=3, help="faults per class (fewer where they do not fit)")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--types", default="all", help="fault classes, comma-separated (default all)")
    parser.add_argument("--senders", type=int, default=16, help="sender threads, one keep-alive connection each")
    parser.add_argument("--with-faults-bench", action="store_true", help="run bench/faults.py for the in-process rows")
    parser.add_argument("--faults-json", metavar="PATH", help="in-process rows from `bench/faults.py --json PATH`")
    parser.add_argument("--profile", type=float, default=0.0, metavar="S", help="py-spy the largest run's server")
    parser.add_argument(
        "--spread", action="store_true", help="agents push at their own moments of the second (default: together)"
    )
    parser.add_argument("--save", metavar="PATH", help="write the figures as JSON here as well")
    parser.add_argument("--load", metavar="PATH", help="print the tables of a run saved with --save, run nothing")
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    args = parser.parse_args()
    console = Console(width=200, stderr=args.output == "json")
    sizes = [int(n) for n in args.nodes.split(",")]
    if args.minutes:
        given = [float(m) for m in args.minutes.split(",")]
        minutes = given * len(sizes) if len(given) == 1 else given
        if len(minutes) != len(sizes):
            parser.error("--minutes takes one value or one per size")
    else:
        minutes = [25.0 if n >= 1024 else 15.0 for n in sizes]
    types = None if args.types == "all" else [FaultType(t).value for t in args.types.split(",")]
    direct: dict[str, Any] | None = None
    if args.faults_json:
        direct = json.loads(Path(args.faults_json).read_text())
    elif args.with_faults_bench:
        direct = faults_bench(args.seed, console)
    rows: list[RowResult] = []
    if args.load:
        saved = json.loads(Path(args.load).read_text())
        rows = [RowResult.from_json(body) for body in saved["http"]]
        direct = direct or saved.get("in_process")
        sizes, minutes = [], []
    biggest = max(sizes, default=0)
    for nodes, mins in zip(sizes, minutes, strict=True):
        profile = args.profile if nodes == biggest else 0.0
        rows.append(run_size(nodes, mins, args.per_type, args.seed, types, args.senders, profile, console, args.spread))
        if args.save:
            Path(args.save).write_text(json.dumps(as_json(rows, direct), indent=1, default=str))
    if args.output == "json":
        print(json.dumps(as_json(rows, direct), indent=1, default=str))
        return
    for table in tables(rows, direct):
        console.print(table)
    for r in rows:
        what = [
            f"{r.nodes:,} nodes: {r.minutes:g} min in real time ({r.elapsed_s / 60:.1f} min wall for the row), "
            f"{r.faults} faults ({r.per_type} per class), {r.polls} incident polls",
            *r.notes,
        ]
        console.print("; ".join(what))
        for m in r.missed:
            console.print(f"  missed {m}")
        for u in r.unmatched:
            console.print(f"  unmatched {u}")
        if r.after_stop:
            console.print(f"  {len(r.after_stop)} incident(s) opened after the agents stopped (not scored), e.g.")
            console.print(f"    {r.after_stop[0]}")
        if r.profile:
            busy = r.profile["samples"] - r.profile["idle"]
            console.print(
                f"  server profile: {r.profile['samples']} py-spy samples at 50 Hz mid-run, {busy} busy; "
                "shares of the busy ones:"
            )
            for label, share in r.profile["parts"]:
                console.print(f"    {100 * share:5.1f}%  {label}")
            console.print("    functions with most own time:")
            for name, share in r.profile["own"]:
                console.print(f"    {100 * share:5.1f}%  {name}")
    console.print(
        f"targets at 1,024 nodes: {', '.join(c.value for c in KEY_CLASSES)} p99 <= {TARGET_P99_S:g} s, control "
        f"plane <= {TARGET_CORES:g} core, recall and precision 100%; {os.cpu_count()} cores shared with the agents, "
        "the senders and other work"
    )


if __name__ == "__main__":
    main()
