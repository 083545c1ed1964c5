"""The node agent: collection on its own clock, /metrics and /healthz, a failing source, the durable event spool."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn

from gpufleet.agent.collector import Collector
from gpufleet.agent.pusher import EventPusher
from gpufleet.agent.runtime import sim_agent
from gpufleet.agent.spool import EventSpool
from gpufleet.control.runner import TwinRunner
from gpufleet.control.store import StateStore
from gpufleet.server.app import create_app
from gpufleet.sources.twin import TwinEvents, TwinSource
from gpufleet.telemetry.frame import MetricFrame
from tests.twins import small_twin

EXAMPLES = Path(__file__).resolve().parents[2] / "src" / "gpufleet" / "examples"
TOKEN = "agent-test-token"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
    collector = Collector(source.new_frame(), [source, broken], [], None)
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
    collector = Collector(source.new_frame(), [source], [], None)
    collector.collect_once()
    temps = [ln for ln in collector.body.decode().splitlines() if ln.startswith("DCGM_FI_DEV_GPU_TEMP{")]
    assert len(temps) == 7 and not any('gpu="3"' in ln for ln in temps)
    xid = [ln for ln in collector.body.decode().splitlines() if ln.startswith("DCGM_EXP_XID_ERRORS_COUNT{")]
    assert len(xid) == 1 and 'xid="79"' in xid[0] and 'gpu="3"' in xid[0]


def test_spool_survives_reopen_and_acks_in_order(tmp_path: Path) -> None:
    spool = EventSpool(tmp_path / "spool.db")
    spool.append([{"kind": "kmsg", "message": f"line {i}"} for i in range(5)])
    spool.close()
    spool = EventSpool(tmp_path / "spool.db")
    rows = spool.peek(3)
    assert [r[1]["message"] for r in rows] == ["line 0", "line 1", "line 2"]
    spool.ack(rows[-1][0])
    assert len(spool) == 2 and spool.peek()[0][1]["message"] == "line 3"


@pytest.fixture
def control_plane(tmp_path: Path) -> Iterator[tuple[str, StateStore, uvicorn.Server]]:
    store = StateStore(tmp_path / "cp.db")
    runner = TwinRunner(small_twin(), store)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(runner, TOKEN), host="127.0.0.1", port=port, log_level="error"))
    yield f"http://127.0.0.1:{port}", store, server
    server.should_exit = True


def _serve(server: uvicorn.Server) -> threading.Thread:
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(100):
        if server.started:
            break
        time.sleep(0.05)
    return thread


def test_nothing_is_lost_while_the_control_plane_is_down(
    tmp_path: Path, control_plane: tuple[str, StateStore, uvicorn.Server]
) -> None:
    url, store, server = control_plane
    spool = EventSpool(tmp_path / "spool.db")
    pusher = EventPusher(spool, url, lambda: TOKEN, "node-a")
    spool.append([{"time": float(i), "kind": "kmsg", "entity": "gpu/node-a/0", "message": f"e{i}"} for i in range(7)])
    assert not pusher.push_once()  # down: nothing acknowledged, nothing dropped
    assert len(spool) == 7
    _serve(server)
    assert pusher.push_once()
    assert len(spool) == 0
    got = store.agent_events("node-a")
    assert [e["message"] for e in got] == [f"e{i}" for i in range(7)]
    # A batch re-sent after a lost acknowledgement is stored once.
    assert store.add_agent_events("node-a", [{"seq": 1, "time": 0.0, "kind": "kmsg", "message": "e0"}]) == 0


def test_events_need_the_token(tmp_path: Path, control_plane: tuple[str, StateStore, uvicorn.Server]) -> None:
    url, store, server = control_plane
    _serve(server)
    spool = EventSpool(tmp_path / "spool.db")
    spool.append([{"time": 1.0, "kind": "kmsg", "entity": "x", "message": "m"}])
    assert not EventPusher(spool, url, lambda: "wrong", "node-b").push_once()
    assert len(spool) == 1 and store.agent_events("node-b") == []
    res = httpx.post(
        f"{url}/api/v1/events",
        json={"agent": "x", "events": [{"bad": 1}]},
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    assert res.status_code == 422 and "invalid request" in res.json()["error"]


def test_sim_agent_end_to_end(tmp_path: Path, control_plane: tuple[str, StateStore, uvicorn.Server]) -> None:
    url, store, server = control_plane
    _serve(server)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        f"""apiVersion: gpufleet.io/v1
kind: Scenario
metadata: {{name: a}}
spec:
  cluster: {EXAMPLES / "clusters" / "dgx-h100-su.yaml"}
  duration: 1h
  workload: {{autoTrainingNodesPerJob: 8}}
  faults:
  - {{at: 20s, type: xid, node: dgx-001, gpu: 5, code: 31}}
"""
    )
    agent = sim_agent(
        scenario,
        node="dgx-001",
        host="127.0.0.1",
        port=0,
        interval=0.2,
        speed=20.0,
        data_dir=tmp_path / "agent",
        control_plane=url,
        token=lambda: TOKEN,
    )
    agent.start()
    try:
        base = f"http://127.0.0.1:{agent.port}"
        deadline = time.time() + 20
        while time.time() < deadline and not store.agent_events("dgx-001"):
            time.sleep(0.2)
        metrics = httpx.get(f"{base}/metrics").text
        health = httpx.get(f"{base}/healthz").json()
    finally:
        agent.stop()
    assert health["status"] == "ok" and health["sources"] == {"twin": True, "twin-events": True}
    assert metrics.count("DCGM_FI_DEV_GPU_TEMP{") == 8
    assert 'hostname="dgx-001"' in metrics and "dgx-000" not in metrics
    lines = [e["message"] for e in store.agent_events("dgx-001")]
    assert any("NVRM: Xid (PCI:0000:ab:00): 31," in ln for ln in lines)


def test_twin_events_for_one_node_only() -> None:
    from gpufleet.sim.faults import InjectedFault
    from gpufleet.spec.scenario_spec import FaultType

    twin = small_twin(
        faults=[
            InjectedFault(0, FaultType.xid, 5.0, node="n-000", gpu=0, code=13),
            InjectedFault(1, FaultType.xid, 6.0, node="n-001", gpu=0, code=13),
        ]
    )
    events = TwinEvents(twin, "n-001")
    twin.run(10)
    got = events.poll()
    assert {e["node"] for e in got} == {"n-001"}
    assert events.poll() == []
