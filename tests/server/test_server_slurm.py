"""The control plane and two node agents as separate processes, started as an operator would, against a real Slurm
cluster: an Xid 79 appended to a node's kernel log drains that node in Slurm within seconds, and a kill -9 of the
control plane in the middle of a steady stream of kernel reports neither loses nor duplicates one of them."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from gpufleet.integrations.slurm.client import SlurmNode
from tests.apiclient import free_port
from tests.slurm_cluster import SlurmCluster, slurm_cluster  # noqa: F401

pytestmark = pytest.mark.real

T = TypeVar("T")

NODES = ("gpu-01", "gpu-02")
LOST_PCI = "0000:3b:00"
XID_79_PID = 1234
XID_79 = f"[ 1234.567890] NVRM: Xid (PCI:{LOST_PCI}): 79, pid={XID_79_PID}, name=python, GPU has fallen off the bus."
DETECT_WITHIN_S = 5.0  # from the line in kern.log to the incident, the node drained in Slurm and the step audited
START_WITHIN_S = 60.0
SETTLE_WITHIN_S = 120.0  # after a kill -9 the agents back off (up to 30 s) between retries
STREAM_S = 30.0
LINES_PER_S = 4.0
PID = re.compile(r"\bpid=(\d+)")

# Xids an application causes: each line is one kernel report (and a finding), none takes a node out of Slurm.
STREAM_XIDS = (
    (13, "Graphics SM Warp Exception on (GPC 9, TPC 1, SM 1): Out Of Range Address"),
    (
        31,
        "Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f1a_2c000000. "
        "Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
    ),
    (43, "Ch 00000010"),
)
STREAM_PCI = {"gpu-01": ("0000:86:00", "0000:af:00"), "gpu-02": ("0000:18:00", "0000:3b:00")}
STREAM_FIRST_PID = {"gpu-01": 10_000, "gpu-02": 20_000}  # every line's pid is unique across both nodes


def _append(path: Path, line: str) -> None:
    with path.open("a", encoding="utf-8") as f:  # one write per line, as syslog appends
        f.write(line + "\n")


class Proc:
    """One gpufleet process. Its output goes to files: a pipe nobody reads would stall it."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], logs: Path) -> None:
        self.name = name
        self.stderr = logs / f"{name}.stderr"
        with (logs / f"{name}.stdout").open("ab") as out, self.stderr.open("ab") as err:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "gpufleet.cli.main", *args], env=env, cwd=logs, stdout=out, stderr=err
            )

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 25) -> str:
        text = self.stderr.read_text(errors="replace").splitlines()[-lines:] if self.stderr.exists() else []
        state = "running" if self.alive else f"exited {self.popen.returncode}"
        return f"--- {self.name} ({state}), stderr tail ---\n" + "\n".join(text)

    def kill(self) -> None:
        if self.alive:
            self.popen.kill()
        self.popen.wait(timeout=30)

    def stop(self) -> None:
        if self.alive:
            self.popen.terminate()
            try:
                self.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()


class Fleet:
    """`gpufleet server --backend slurm --remediate on` and one `gpufleet agent` per node, each its own process."""

    def __init__(self, root: Path, slurm_conf: str) -> None:
        self.root = root
        self.home = root / "home"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {k: v for k, v in os.environ.items() if k not in ("GPUFLEET_TOKEN", "GPUFLEET_SERVER")}
        self.env.update(GPUFLEET_HOME=str(self.home), SLURM_CONF=slurm_conf, PYTHONUNBUFFERED="1")
        self.kmsg = {node: root / node / "kern.log" for node in NODES}
        self.data = {node: root / node / "agent" for node in NODES}
        self.servers: list[Proc] = []
        self.agents: dict[str, Proc] = {}
        self.http = httpx.Client(base_url=self.url, timeout=10.0)

    @property
    def server(self) -> Proc:
        return self.servers[-1]

    def start_server(self) -> None:
        args = ["server", "--backend", "slurm", "--remediate", "on", "--port", str(self.port)]
        self.servers.append(Proc(f"server-{len(self.servers) + 1}", args, self.env, self.root))
        self.wait_for(
            lambda: self.http.get("/healthz").json()["status"] == "ok", "the control plane's /healthz", START_WITHIN_S
        )

    def start_agent(self, node: str) -> None:
        self.kmsg[node].parent.mkdir(parents=True, exist_ok=True)
        self.kmsg[node].touch()
        args = ["agent", "--node", node, "--kmsg-file", str(self.kmsg[node]), "--control-plane", self.url]
        args += ["--port", "0", "--data-dir", str(self.data[node]), "--interval", "1s"]
        self.agents[node] = Proc(f"agent-{node}", args, self.env, self.root)

    def get(self, path: str, **params: Any) -> Any:
        """As the admin (the token the server wrote in its home): /api/v1/agents shows incarnations to admins only."""
        admin = (self.home / "token").read_text().strip()
        resp = self.http.get(path, params=params, headers={"Authorization": f"Bearer {admin}"})
        resp.raise_for_status()
        return resp.json()

    def diagnose(self) -> str:
        procs = [*self.servers[-1:], *self.agents.values()]
        return "\n".join(p.tail() for p in procs)

    def wait_for(
        self, check: Callable[[], T], what: str, within_s: float, explain: Callable[[], str] | None = None
    ) -> T:
        """Poll `check` until it returns something truthy (a read that fails meanwhile counts as not yet); fail
        with the processes' stderr if `within_s` passes or one of them dies."""
        deadline = time.monotonic() + within_s
        while True:
            dead = [p.name for p in [*self.servers[-1:], *self.agents.values()] if not p.alive]
            if dead:
                pytest.fail(f"{', '.join(dead)} exited while waiting for {what}\n{self.diagnose()}")
            try:
                result = check()
            except (httpx.HTTPError, sqlite3.Error):
                result = None  # type: ignore[assignment]
            if result:
                return result
            if time.monotonic() >= deadline:
                seen = f"\nlast seen: {explain()}" if explain else ""
                pytest.fail(f"timed out after {within_s:.1f} s waiting for {what}{seen}\n{self.diagnose()}")
            time.sleep(0.1)

    def close(self) -> None:
        self.http.close()
        for proc in [*self.servers, *self.agents.values()]:  # the server first: nothing acts on Slurm after this
            proc.stop()


@pytest.fixture
def fleet(slurm_cluster: SlurmCluster, tmp_path: Path) -> Iterator[Fleet]:  # noqa: F811
    fleet = Fleet(tmp_path, slurm_cluster.conf)
    try:
        yield fleet
    finally:
        fleet.close()
        # the session's other tests expect every node back in service
        for node in NODES:
            if not slurm_cluster.runner.node(node).state.available:
                slurm_cluster.scontrol("update", f"NodeName={node}", "State=RESUME")
        slurm_cluster.wait_for(
            lambda: all(slurm_cluster.runner.node(n).state.available for n in NODES), f"{', '.join(NODES)} resumed"
        )


# --- reading what the control plane, Slurm and the agents hold -------------------------------------------------------


def _lost_gpu_incident(fleet: Fleet) -> dict[str, Any] | None:
    entity = {"kind": "gpu", "node": "gpu-01", "index": None, "name": LOST_PCI}  # no NVML: named by its PCI address
    return next(
        (
            i
            for i in fleet.get("/api/v1/incidents", node="gpu-01")
            if entity.items() <= i["entity"].items() and i["entity"].get("text") == f"gpu/gpu-01/{LOST_PCI}"
        ),
        None,
    )


def _drained_for(cluster: SlurmCluster, node: str, incident_id: str) -> SlurmNode | None:
    found = cluster.runner.node(node)
    return found if found.state.drained and incident_id in found.reason else None


def _audit(fleet: Fleet, incident_id: str) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = fleet.get("/api/v1/audit", incident=incident_id, limit=1000)
    return entries


def _node_taken_out(fleet: Fleet, incident_id: str) -> dict[str, Any] | None:
    return next(
        (
            e
            for e in _audit(fleet, incident_id)
            if e["action"] in ("cordon", "drain") and e["decision"] == "done" and e["target"] == "node/gpu-01"
        ),
        None,
    )


def _kmsg_pids(fleet: Fleet, node: str) -> Counter[int]:
    """The pid of every kernel report the control plane stored for `node`: each line written carries its own."""
    events = fleet.get("/api/v1/events", kind="kmsg", node=node, limit=10_000)
    return Counter(int(m.group(1)) for e in events if (m := PID.search(e["message"])))


def _spool(fleet: Fleet, node: str) -> tuple[str, int, int]:
    """(incarnation, last seq the agent assigned, records still waiting) from the agent's own spool file."""
    uri = f"file:{fleet.data[node] / f'spool-{node}.db'}?mode=ro"
    with closing(sqlite3.connect(uri, uri=True)) as db:
        incarnation = db.execute("SELECT value FROM meta WHERE key = 'incarnation'").fetchone()[0]
        last = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'spool'").fetchone()
        waiting = db.execute("SELECT COUNT(*) FROM spool").fetchone()[0]
    return str(incarnation), int(last[0]) if last else 0, int(waiting)


def _describe_streams(fleet: Fleet, expected: dict[str, Counter[int]]) -> str:
    parts = []
    for node in NODES:
        try:
            _, sent, waiting = _spool(fleet, node)
            parts.append(f"{node}: agent sent {sent}, {waiting} waiting; {expected[node].total()} lines written")
            parts.append(f"{node}: control plane has {_kmsg_pids(fleet, node).total()} kernel reports")
        except (httpx.HTTPError, sqlite3.Error) as exc:
            parts.append(f"{node}: cannot read: {exc}")
    try:
        parts.append(f"streams: {fleet.get('/api/v1/agents')}")
    except httpx.HTTPError as exc:
        parts.append(f"streams: cannot read: {exc}")
    return "; ".join(parts)


class LineWriter(threading.Thread):
    """Appends distinct, real-format application Xid lines to one node's kernel log at a steady pace."""

    def __init__(self, node: str, path: Path, count: int) -> None:
        super().__init__(name=f"kmsg-writer-{node}", daemon=True)
        self.node, self.path, self.count = node, path, count
        self.pids: list[int] = []
        self.error: BaseException | None = None
        self.halt = threading.Event()

    def line(self, k: int) -> str:
        xid, message = STREAM_XIDS[k % len(STREAM_XIDS)]
        pci = STREAM_PCI[self.node][k % 2]
        pid = STREAM_FIRST_PID[self.node] + k
        text = f"[ {2000 + k * 0.25:11.6f}] NVRM: Xid (PCI:{pci}): {xid}, pid={pid}, name=python, {message}"
        if k % 2:  # kern.log as rsyslog writes it
            text = f"Nov 23 10:{k // 60 % 60:02d}:{k % 60:02d} {self.node} kernel: {text}"
        return text

    def run(self) -> None:
        try:
            for k in range(self.count):
                if self.halt.is_set():
                    return
                _append(self.path, self.line(k))
                self.pids.append(STREAM_FIRST_PID[self.node] + k)
                self.halt.wait(1.0 / LINES_PER_S)  # pacing: a steady stream, not a wait for anything
        except BaseException as exc:  # reported by the test, not lost in the thread
            self.error = exc


# --- the test ---------------------------------------------------------------------------------------------------------


def test_xid79_drains_in_slurm_and_a_control_plane_crash_loses_no_event(
    fleet: Fleet,
    slurm_cluster: SlurmCluster,  # noqa: F811
) -> None:
    fleet.start_server()
    for node in NODES:
        fleet.start_agent(node)
    fleet.wait_for(
        lambda: {n["name"] for n in fleet.get("/api/v1/nodes")} >= set(NODES), "both agents' nodes", START_WITHIN_S
    )

    incident_id = _xid79_drains_the_node(fleet, slurm_cluster)
    expected = _crash_in_the_middle_of_a_stream(fleet)
    expected["gpu-01"][XID_79_PID] += 1
    _every_kernel_report_arrived_exactly_once(fleet, expected)
    # neither the stream nor the restart took a node out again (the restart goes on with the paused runbook)
    out = {n.name: str(n.state) for n in slurm_cluster.runner.nodes() if n.name in NODES and not n.state.available}
    assert not out, f"after {incident_id} and the restart, nodes out of service: {out}"


def _xid79_drains_the_node(fleet: Fleet, cluster: SlurmCluster) -> str:
    _append(fleet.kmsg["gpu-01"], XID_79)
    written = time.monotonic()

    def within() -> float:  # what is left of the one budget all three share
        return max(0.0, written + DETECT_WITHIN_S - time.monotonic())

    incident = fleet.wait_for(lambda: _lost_gpu_incident(fleet), "an incident for gpu-01's GPU at 0000:3b:00", within())
    detected = time.monotonic() - written
    assert incident["cause"] == "gpu-lost" and incident["xid"] == 79, incident
    node = fleet.wait_for(
        lambda: _drained_for(cluster, "gpu-01", incident["id"]),
        f"Slurm to drain gpu-01 with a Reason naming {incident['id']}",
        within(),
        explain=lambda: str(cluster.scontrol("show", "node", "gpu-01")),
    )
    drained = time.monotonic() - written
    fleet.wait_for(
        lambda: _node_taken_out(fleet, incident["id"]),
        f"a remediation audit entry 'done' for {incident['id']}'s cordon/drain step",
        within(),
        explain=lambda: str(_audit(fleet, incident["id"])),
    )
    audited = time.monotonic() - written
    print(
        f"\nXid 79 on gpu-01: {incident['id']} after {detected:.2f} s, {node.state} in Slurm after {drained:.2f} s "
        f"(Reason={node.reason!r}), audited after {audited:.2f} s"
    )

    # The runbook reboots the node and then waits for it to come back: resume only once it is paused, so no step
    # of it lands after the resume.
    fleet.wait_for(
        lambda: any(e["decision"] == "waiting" for e in _audit(fleet, incident["id"])),
        f"{incident['id']}'s runbook to pause until gpu-01 is back",
        START_WITHIN_S,
        explain=lambda: str(_audit(fleet, incident["id"])),
    )
    cluster.scontrol("update", "NodeName=gpu-01", "State=RESUME")
    cluster.wait_for(lambda: cluster.runner.node("gpu-01").state.available, "gpu-01 back in service")
    return str(incident["id"])


def _crash_in_the_middle_of_a_stream(fleet: Fleet) -> dict[str, Counter[int]]:
    """Both agents get a steady stream of kernel reports for STREAM_S seconds; a third of the way in the control
    plane is killed with SIGKILL and started again on the same home. Returns the pids written, per node."""
    count = int(STREAM_S * LINES_PER_S)
    writers = [LineWriter(node, fleet.kmsg[node], count) for node in NODES]
    for writer in writers:
        writer.start()
    try:
        fleet.wait_for(
            lambda: all(len(w.pids) >= count // 3 and _kmsg_pids(fleet, w.node) for w in writers),
            "a third of the stream written and some of it stored",
            STREAM_S,
        )
        before = {node: _kmsg_pids(fleet, node).total() for node in NODES}
        assert all(before[node] < count for node in NODES), f"the kill must land mid-stream: {before} of {count}"
        fleet.server.kill()
        assert fleet.server.popen.returncode == -9, fleet.diagnose()
        killed_at = time.monotonic()
        fleet.start_server()
        up_after = time.monotonic() - killed_at
        print(f"control plane killed with {before} kernel reports stored; up again after {up_after:.1f} s")
        for writer in writers:
            writer.join(timeout=STREAM_S * 2)
    finally:
        for writer in writers:
            writer.halt.set()
            writer.join(timeout=10)
    for writer in writers:
        assert writer.error is None, f"writing {writer.path} failed: {writer.error!r}"
        assert len(writer.pids) == count, f"{writer.node}: wrote {len(writer.pids)} of {count} lines"
    return {w.node: Counter(w.pids) for w in writers}


def _every_kernel_report_arrived_exactly_once(fleet: Fleet, expected: dict[str, Counter[int]]) -> None:
    def settled() -> bool:
        streams = {s["agent"]: s for s in fleet.get("/api/v1/agents")}
        for node in NODES:
            _, sent, waiting = _spool(fleet, node)
            if waiting or node not in streams or streams[node]["last_seq"] != sent:
                return False
        return all(_kmsg_pids(fleet, n).total() >= expected[n].total() for n in NODES)

    fleet.wait_for(
        settled,
        "both agents' spools to drain into the restarted control plane",
        SETTLE_WITHIN_S,
        explain=lambda: _describe_streams(fleet, expected),
    )

    streams = fleet.get("/api/v1/agents")
    for node in NODES:
        got = _kmsg_pids(fleet, node)
        missing, twice = expected[node] - got, got - expected[node]
        assert not missing and not twice, (
            f"{node}: {got.total()} kernel reports stored for {expected[node].total()} lines written; "
            f"missing pids {sorted(missing)}, extra or repeated pids {sorted(twice.elements())}\n{fleet.diagnose()}"
        )
        incarnation, sent, _ = _spool(fleet, node)
        mine = [s for s in streams if s["agent"] == node]
        assert [(s["incarnation"], s["last_seq"]) for s in mine] == [(incarnation, sent)], (streams, fleet.diagnose())

    # Every record of each stream, whatever its kind, is stored once: seqs 1..last, none twice, none missing.
    with closing(sqlite3.connect(f"file:{fleet.home / 'state.db'}?mode=ro", uri=True)) as db:
        twice = db.execute(
            "SELECT agent, incarnation, seq, COUNT(*) FROM events WHERE seq > 0 "
            "GROUP BY agent, incarnation, seq HAVING COUNT(*) > 1"
        ).fetchall()
        per_stream = db.execute(
            "SELECT agent, COUNT(*), COUNT(DISTINCT seq), MIN(seq), MAX(seq) FROM events WHERE seq > 0 "
            "GROUP BY agent, incarnation ORDER BY agent"
        ).fetchall()
    assert twice == [], f"records stored more than once: {twice}"
    sent = {node: _spool(fleet, node)[1] for node in NODES}
    assert per_stream == [(node, sent[node], sent[node], 1, sent[node]) for node in NODES], (per_stream, sent)
    print(
        "after the crash: "
        + ", ".join(f"{n}: {expected[n].total()} kernel reports, {sent[n]} records, 0 duplicates" for n in NODES)
    )
