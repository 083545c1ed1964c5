"""The node agent: collection on its own clock, /metrics and /healthz, a failing source, the durable record spool
with its incarnation, the pusher speaking the contract, the kernel-log follower, and agents (real and simulated)
reporting to a real control plane over HTTP."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from gpufleet.agent.collector import Collector
from gpufleet.agent.pusher import BatchPusher, NodeState
from gpufleet.agent.spool import RecordSpool
from gpufleet.control.service import ControlPlane
from gpufleet.model import Entity, EntityKind, RootCause, Severity
from gpufleet.model.observe import Finding, KernelReport
from gpufleet.remediate.backends.observe import ObserveOnlyBackend
from gpufleet.sim.source import TwinSource
from gpufleet.state import Database
from gpufleet.telemetry.frame import MetricFrame
from tests import apiclient
from tests.apiclient import free_port
from tests.twins import small_twin, su_scenario

TOKEN = "agent-test-token"
XID_79 = "[ 1234.567890] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.\n"
UNLISTED_XID_79 = (
    'DCGM_EXP_XID_ERRORS_COUNT{pci_bus_id="00000000:3B:00.0",hostname="node-x",window_size_in_ms="300000",xid="79"} 1\n'
)


class BrokenSource:
    name = "sysfs-ib"

    def __init__(self) -> None:
        self.calls = 0

    def collect(self, frame: MetricFrame) -> None:
        self.calls += 1
        raise OSError("[Errno 5] Input/output error: '/sys/class/infiniband/mlx5_3/ports/1/counters/symbol_error'")


def test_a_failing_source_is_marked_down_logged_once_and_the_rest_served(caplog: pytest.LogCaptureFixture) -> None:
    twin = small_twin()
    twin.run(30)
    source = TwinSource(twin, node="n-000")
    broken = BrokenSource()
    collector = Collector(source.new_frame(), [source, broken])
    with caplog.at_level(logging.ERROR, logger="gpufleet.agent"):
        for _ in range(5):
            collector.collect_once()
    body = collector.body.decode()
    assert 'gpufleet_source_up{source="sysfs-ib"} 0' in body
    assert 'gpufleet_source_up{source="twin"} 1' in body
    assert body.count("DCGM_FI_DEV_GPU_TEMP{") == 8
    assert broken.calls == 5
    assert len([r for r in caplog.records if "sysfs-ib" in r.message]) == 1


def test_a_lost_gpu_is_not_exported_but_its_neighbours_are() -> None:
    from gpufleet.sim.faults import InjectedFault
    from gpufleet.spec.scenario_spec import FaultType

    twin = small_twin(faults=[InjectedFault(0, FaultType.gpu_off_bus, 10.0, node="n-000", gpu=3)])
    twin.run(20)
    source = TwinSource(twin, node="n-000")
    collector = Collector(source.new_frame(), [source])
    collector.collect_once()
    temps = [ln for ln in collector.body.decode().splitlines() if ln.startswith("DCGM_FI_DEV_GPU_TEMP{")]
    assert len(temps) == 7 and not any('gpu="3"' in ln for ln in temps)
    xid = [ln for ln in collector.body.decode().splitlines() if ln.startswith("DCGM_EXP_XID_ERRORS_COUNT{")]
    assert len(xid) == 1 and 'xid="79"' in xid[0] and 'gpu="3"' in xid[0]


def finding(k: int) -> Finding:
    return Finding(
        1.8e9 + k, RootCause.pcie, Entity(EntityKind.gpu, "node-a", k % 8), Severity.warning, f"finding {k}", "e",
        "telemetry",
    )  # fmt: skip


def test_spool_survives_reopen_acks_in_order_and_a_new_file_is_a_new_incarnation(tmp_path: Path) -> None:
    spool = RecordSpool(tmp_path / "spool.db")
    incarnation = spool.incarnation
    spool.append([finding(k) for k in range(5)])
    spool.close()
    spool = RecordSpool(tmp_path / "spool.db")
    assert spool.incarnation == incarnation
    records = spool.peek(3)
    assert [r.seq for r in records] == [1, 2, 3] and records[0].body == finding(0)
    spool.ack(records[-1].seq)
    assert len(spool) == 2 and spool.peek()[0].seq == 4
    assert RecordSpool(tmp_path / "other.db").incarnation != incarnation


@pytest.fixture
def control_plane(tmp_path: Path) -> Iterator[tuple[str, ControlPlane, uvicorn.Server]]:
    holder: dict[str, ControlPlane] = {}
    plane = ControlPlane(Database(tmp_path / "cp.db"), ObserveOnlyBackend(lambda: sorted(holder["p"].fleet.nodes)))
    holder["p"] = plane
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(apiclient.app(plane, secret=TOKEN), host="127.0.0.1", port=port, log_level="error")
    )
    yield f"http://127.0.0.1:{port}", plane, server
    server.should_exit = True


def _serve(server: uvicorn.Server) -> threading.Thread:
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(100):
        if server.started:
            break
        time.sleep(0.05)
    return thread


def _pusher(spool: RecordSpool, url: str, token: str = TOKEN) -> BatchPusher:
    return BatchPusher(spool, NodeState(), url, lambda: token, agent="node-a", node="node-a", interval=1.0)


def test_nothing_is_lost_while_the_control_plane_is_down_and_nothing_is_stored_twice(
    tmp_path: Path, control_plane: tuple[str, ControlPlane, uvicorn.Server]
) -> None:
    url, plane, server = control_plane
    spool = RecordSpool(tmp_path / "spool.db")
    pusher = _pusher(spool, url)
    spool.append([finding(k) for k in range(7)])
    assert not pusher.push_once()  # down: nothing acknowledged, nothing dropped
    assert len(spool) == 7
    _serve(server)
    assert pusher.push_once()
    assert len(spool) == 0 and pusher.acked == 7
    stored = plane.store.events(agent="node-a", limit=100)
    assert sorted(e["seq"] for e in stored) == list(range(1, 8))
    spool.close()
    # the acknowledgement was lost and the agent sends the same records again: stored once
    again = RecordSpool(tmp_path / "spool.db")
    again._db.execute("DELETE FROM sqlite_sequence")
    again.append([finding(k) for k in range(7)])
    assert _pusher(again, url).push_once()
    assert plane.store.count_events(agent="node-a") == 7


def test_pushes_need_the_token(tmp_path: Path, control_plane: tuple[str, ControlPlane, uvicorn.Server]) -> None:
    url, plane, server = control_plane
    _serve(server)
    spool = RecordSpool(tmp_path / "spool.db")
    spool.append([finding(1)])
    assert not _pusher(spool, url, "wrong").push_once()
    assert len(spool) == 1 and plane.store.count_events() == 0
    res = httpx.post(f"{url}/api/v1/ingest", json={"agent": "x"}, headers={"Authorization": f"Bearer {TOKEN}"})
    assert res.status_code == 400 and "schema" in res.json()["error"]


def _wait(condition: Any, seconds: float = 20.0) -> bool:
    deadline = time.time() + seconds
    while time.time() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return False


def test_a_host_agent_without_nvml_still_turns_a_kernel_line_into_an_incident(
    tmp_path: Path, control_plane: tuple[str, ControlPlane, uvicorn.Server], caplog: pytest.LogCaptureFixture
) -> None:
    from gpufleet.agent.host import host_agent

    url, plane, server = control_plane
    _serve(server)
    kern = tmp_path / "kern.log"
    kern.write_text("Nov 23 10:00:00 node-x kernel: [    1.000000] Linux version 6.1.0\n")
    with caplog.at_level(logging.ERROR, logger="gpufleet.agent"):
        agent = host_agent(
            host="127.0.0.1", port=0, interval=0.2, data_dir=tmp_path / "agent", control_plane=url,
            token=lambda: TOKEN, node="node-x", kmsg_file=kern, ib_sysfs=tmp_path / "no-ib",
        )  # fmt: skip
        agent.start()
        try:
            assert _wait(lambda: "node-x" in plane.fleet.nodes)
            with kern.open("a") as fh:
                fh.write(f"Nov 23 10:00:05 node-x kernel: {XID_79}")
            assert _wait(lambda: bool(plane.book.incidents))
            # the same line on /metrics: no NVML, so no GPU is listed and the Xid is counted by its PCI address
            assert _wait(lambda: UNLISTED_XID_79 in httpx.get(f"http://127.0.0.1:{agent.port}/metrics").text)
            metrics = httpx.get(f"http://127.0.0.1:{agent.port}/metrics").text
            health = httpx.get(f"http://127.0.0.1:{agent.port}/healthz").json()
        finally:
            agent.stop()
    (inc,) = plane.book.incidents.values()
    assert inc.cause is RootCause.gpu_lost and inc.node == "node-x" and inc.xid == 79
    assert str(inc.entity) == "gpu/node-x/0000:3b:00"  # no NVML here: the GPU named by its PCI address
    assert 'gpufleet_source_up{source="nvml"} 0' in metrics
    assert health["control_plane"]["connected"] is True and health["sources"]["nvml"] is False
    assert 'gpufleet_source_up{source="kmsg"} 1' in metrics
    assert len([r for r in caplog.records if "nvml" in r.message]) == 1  # said once
    kernel = [e for e in plane.store.events(kind="kmsg") if e["node"] == "node-x"]
    assert len(kernel) == 1 and "fallen off the bus" in kernel[0]["message"]


def test_a_restarted_agent_neither_misses_nor_repeats_a_kernel_line(tmp_path: Path) -> None:
    from gpufleet.agent.kernel import KernelLog

    kern = tmp_path / "kern.log"
    kern.write_text(XID_79)
    spool = RecordSpool(tmp_path / "spool.db")
    seen: list[int | None] = []

    def run() -> None:
        follower = KernelLog(lambda events: seen.extend(e.xid for e in events), spool, path=kern, poll_s=0.02)
        follower.start()
        time.sleep(0.3)
        follower.stop()

    run()
    with kern.open("a") as fh:
        fh.write(XID_79.replace(": 79,", ": 48,").replace("fallen off the bus", "Double Bit ECC Error"))
    run()
    assert seen == [79, 48]


def _xid(code: int, second: int) -> str:
    return f"[ {second}.000000] NVRM: Xid (PCI:0000:3b:00): {code}, pid={second}, name=python, Xid {code} here\n"


def _kernel_log(spool: RecordSpool, log: Path, seen: list[int | None], said: list[tuple[bool, str]]) -> Any:
    from gpufleet.agent.kernel import KernelLog

    follower = KernelLog(
        lambda events: seen.extend(e.xid for e in events),
        spool,
        path=log,
        poll_s=0.01,
        status=lambda ok, why: said.append((ok, why)),
    )
    follower.start()
    return follower


def test_a_restarted_agent_reads_what_was_written_and_rotated_while_it_was_down(tmp_path: Path) -> None:
    from gpufleet.sources.node.kernel_log import FilePosition

    log = tmp_path / "kern.log"
    log.write_text(_xid(31, 1))
    spool = RecordSpool(tmp_path / "spool.db")
    seen: list[int | None] = []
    follower = _kernel_log(spool, log, seen, [])
    assert _wait(lambda: seen == [31])
    follower.stop()
    with log.open("a") as fh:
        fh.write(_xid(13, 2))
    log.rename(tmp_path / "kern.log.1")
    log.write_text(_xid(79, 3))
    follower = _kernel_log(spool, log, seen, [])
    assert _wait(lambda: seen == [31, 13, 79])
    with log.open("a") as fh:
        fh.write(_xid(48, 4))
    assert _wait(lambda: seen == [31, 13, 79, 48])
    follower.stop()
    stat = log.stat()  # the spool says which file was read, and how far
    assert FilePosition.parse(spool.get("kmsg_file")) == FilePosition(stat.st_dev, stat.st_ino, stat.st_size)


def test_a_kernel_log_position_stored_by_an_older_agent_is_resumed(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text(_xid(31, 1))
    spool = RecordSpool(tmp_path / "spool.db")
    spool.set("kmsg_file", f"{log.stat().st_ino}:{log.stat().st_size}")  # `inode:offset`, as older agents kept it
    with log.open("a") as fh:
        fh.write(_xid(13, 2))
    seen: list[int | None] = []
    follower = _kernel_log(spool, log, seen, [])
    assert _wait(lambda: seen == [13])
    follower.stop()
    assert seen == [13]


def test_an_unreadable_kernel_log_is_said_and_tried_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpufleet.agent import kernel

    monkeypatch.setattr(kernel, "RETRY_S", 0.05)
    log = tmp_path / "kern.log"
    log.mkdir()  # not a file it can read
    seen: list[int | None] = []
    said: list[tuple[bool, str]] = []
    follower = _kernel_log(RecordSpool(tmp_path / "spool.db"), log, seen, said)
    assert _wait(lambda: any(not ok and "cannot read" in why for ok, why in said))
    log.rmdir()
    log.write_text(_xid(79, 1))
    assert _wait(lambda: seen == [79])
    follower.stop()
    assert said[-1] == (True, "") and not follower.alive


def test_sim_agent_reports_to_a_control_plane_over_http(
    tmp_path: Path, control_plane: tuple[str, ControlPlane, uvicorn.Server]
) -> None:
    from gpufleet.sim.agent import sim_agent

    url, plane, server = control_plane
    _serve(server)
    scenario = su_scenario(tmp_path / "a.yaml", ["{at: 20s, type: xid, node: dgx-001, gpu: 5, code: 31}"])
    agent = sim_agent(
        scenario, node="dgx-001", host="127.0.0.1", port=0, interval=0.2, speed=20.0,
        data_dir=tmp_path / "agent", control_plane=url, token=lambda: TOKEN,
    )  # fmt: skip
    agent.start()
    try:
        assert _wait(lambda: any(i.xid == 31 for i in plane.book.incidents.values()))
        # the twin node's clock, as its chrony reports it, and its pushes' send stamps against the receive times
        assert _wait(lambda: plane.clocks.clock("dgx-001", plane.clock()).source == "chrony")
        metrics = httpx.get(f"http://127.0.0.1:{agent.port}/metrics").text
        health = httpx.get(f"http://127.0.0.1:{agent.port}/healthz").json()
    finally:
        agent.stop()
    assert health["status"] == "ok" and health["sources"]["twin"] is True
    assert metrics.count("DCGM_FI_DEV_GPU_TEMP{") == 8
    assert 'hostname="dgx-001"' in metrics and "dgx-000" not in metrics
    assert 'gpufleet_clock_synchronized{source="chrony"} 1' in metrics
    seen = plane.clocks.clock("dgx-001", plane.clock())
    assert seen.synchronised is True and seen.received_s is not None and abs(seen.received_s) < 5.0
    inc = next(i for i in plane.book.incidents.values() if i.xid == 31)
    assert (inc.entity.node, inc.entity.index) == ("dgx-001", 5)
    kernel = [e for e in plane.store.events(kind="kmsg", limit=100) if e["node"] == "dgx-001"]
    assert any("NVRM: Xid (PCI:0000:ab:00): 31," in e["message"] for e in kernel)
    assert plane.fleet.nodes["dgx-001"].inventory is not None
    assert isinstance(plane.fleet.nodes["dgx-001"].kernel_log[-1], KernelReport)
