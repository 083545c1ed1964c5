"""Control-plane replicas on one real PostgreSQL: every replica ingests and answers, exactly one leads (correlation
and remediation), each sees what the others took in, people's changes through any replica stand, and when the
leader goes another takes over and goes on where it stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gpufleet.control import service
from gpufleet.control.replicas import Replication
from gpufleet.control.service import ControlPlane
from gpufleet.model import IncidentState
from gpufleet.model.observe import Record
from gpufleet.remediate.backends.observe import ObserveOnlyBackend
from gpufleet.state import leadership as leadership_module
from gpufleet.state import open_state
from gpufleet.state.leadership import PostgresLeadership
from tests.apiclient import free_port
from tests.control.helpers import T0, Clock, batch, inventory, lost_gpu

pytestmark = pytest.mark.real


@pytest.fixture(autouse=True)
def at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replicas check the lock and reload incidents every tick here, instead of once a second or two."""
    monkeypatch.setattr(leadership_module, "CHECK_EVERY_S", 0.0)
    monkeypatch.setattr(service, "SYNC_EVERY_S", 0.0)


def replica(url: str, tmp: Path, name: str, clock: Clock) -> ControlPlane:
    db = open_state(tmp / name, url)
    holder: dict[str, ControlPlane] = {}
    backend = ObserveOnlyBackend(lambda: sorted(holder["p"].fleet.nodes))
    replication = Replication(db, PostgresLeadership(url, name), shared=True, name=name)
    plane = ControlPlane(db, backend, clock=clock, replication=replication)
    holder["p"] = plane
    return plane


@pytest.fixture
def pair(pg_url: str, tmp_path: Path) -> Iterator[tuple[ControlPlane, ControlPlane, Clock]]:
    clock = Clock()
    a = replica(pg_url, tmp_path, "a", clock)
    b = replica(pg_url, tmp_path, "b", clock)
    yield a, b, clock
    for plane in (a, b):
        plane.close()
        plane.db.close()


def test_one_leads_and_findings_taken_anywhere_open_incidents_there(pair: tuple[ControlPlane, ...]) -> None:
    a, b, _ = pair
    assert (a.leader, b.leader) == (True, False)
    ack = b.ingest(batch("n1", [Record(1, lost_gpu("n1", T0))], inventory=inventory("n1")))
    assert ack.stored == 1
    assert b.book.incidents == {}  # a replica that does not lead opens nothing
    a.tick()
    assert [i.cause.value for i in a.book.open_incidents()] == ["gpu-lost"]
    b.tick()
    assert [i.id for i in b.book.open_incidents()] == ["INC-000001"]  # and shows what the leader decided
    assert set(a.fleet.nodes) == set(b.fleet.nodes) == {"n1"}


def test_a_batch_sent_to_two_replicas_is_stored_once(pair: tuple[ControlPlane, ...]) -> None:
    a, b, _ = pair
    records = [Record(1, lost_gpu("n1", T0)), Record(2, lost_gpu("n1", T0, gpu=4))]
    first = a.ingest(batch("n1", records))
    again = b.ingest(batch("n1", records))  # the agent's retry went through the other replica
    assert (first.stored, again.stored, again.duplicates) == (2, 0, 2)
    assert a.store.count_events(agent="n1") == 2
    a.tick()
    assert sorted(i.entity.index for i in a.book.open_incidents()) == [3, 4]


def test_each_replica_sees_the_whole_fleet(pair: tuple[ControlPlane, ...]) -> None:
    a, b, _ = pair
    a.ingest(batch("n1", [], inventory=inventory("n1")))
    b.ingest(batch("n2", [], inventory=inventory("n2")))
    a.tick()
    b.tick()
    assert set(a.fleet.nodes) == set(b.fleet.nodes) == {"n1", "n2"}


def test_an_acknowledgement_through_any_replica_stands(pair: tuple[ControlPlane, ...]) -> None:
    a, b, clock = pair
    a.ingest(batch("n1", [Record(1, lost_gpu("n1", T0))]))
    b.tick()
    b.transition("INC-000001", IncidentState.acknowledged, "alice")
    clock.now += 5
    a.ingest(batch("n1", [Record(2, lost_gpu("n1", T0 + 5))]))  # the leader updates the count meanwhile
    assert a.store.incidents.get("INC-000001")["state"] == "acknowledged"  # type: ignore[index]
    a.tick()
    assert a.book.incidents["INC-000001"].state is IncidentState.acknowledged
    assert a.book.incidents["INC-000001"].count == 2


def test_when_the_leader_goes_another_takes_over_where_it_stopped(pair: tuple[ControlPlane, ...]) -> None:
    a, b, _ = pair
    a.ingest(batch("n1", [Record(1, lost_gpu("n1", T0))]))
    a.tick()
    a.replication.close()  # its session ends, as when the process dies
    # the server ends the old session (and frees its lock) on its own time: b takes over on a tick after that
    assert _wait(lambda: _leads_after_a_tick(b), 60), "b did not take the lead within 60 s"
    assert [i.id for i in b.book.open_incidents()] == ["INC-000001"]
    b.ingest(batch("n2", [Record(1, lost_gpu("n2", T0))]))
    assert sorted(b.book.incidents) == ["INC-000001", "INC-000002"]  # ids go on; none given twice
    a.tick()
    assert not a.leader


def _server(url: str, home: Path, port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "GPUFLEET_HOME": str(home)}
    command = [sys.executable, "-m", "gpufleet.cli.main", "server", "--state", url, "--port", str(port)]
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _said(servers: list[subprocess.Popen[bytes]]) -> str:
    """What each replica wrote to stderr, for a failure's message (a replica still running is stopped first)."""
    out = []
    for k, server in enumerate(servers):
        if server.poll() is None:
            server.terminate()
        try:
            _, err = server.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            _, err = server.communicate()
        out.append(f"replica {k} (exit {server.returncode}): {err.decode(errors='replace')[-1500:]}")
    return " | ".join(out)


def _health(port: int) -> dict[str, object] | None:
    try:
        return dict(httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).json())
    except (httpx.HTTPError, ValueError):
        return None


def _leads_after_a_tick(plane: ControlPlane) -> bool:
    plane.tick()
    return plane.leader


def _wait(condition: object, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.1)
    return False


def test_killing_the_leader_process_hands_over_within_seconds(pg_url: str, tmp_path: Path) -> None:
    ports = [free_port(), free_port()]
    servers = [_server(pg_url, tmp_path / f"r{k}", port) for k, port in enumerate(ports)]
    try:
        assert _wait(lambda: all(_health(p) for p in ports), 60), "the replicas did not start: " + _said(servers)
        assert _wait(lambda: sum(bool(_health(p)["leader"]) for p in ports) == 1, 15)  # type: ignore[index]
        leader = next(k for k, p in enumerate(ports) if _health(p)["leader"])  # type: ignore[index]
        other = ports[1 - leader]
        servers[leader].send_signal(signal.SIGKILL)
        servers[leader].wait(timeout=10)
        assert _wait(lambda: bool((_health(other) or {}).get("leader")), 60), "no replica took over within 60 s"
    finally:
        for server in servers:
            if server.poll() is None:
                server.terminate()
                server.wait(timeout=10)


def test_the_leader_knows_what_an_agent_pushing_to_another_replica_carries_out(
    pair: tuple[ControlPlane, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Remediation runs on the leader; the node's agent may push to any replica. The leader learns what the agent
    carries out through the feed, queues the action, and the other replica hands it over with its next ack."""
    from gpufleet.control import node_actions
    from gpufleet.model.actions import NodeAction, NodeActionKind

    monkeypatch.setattr(node_actions, "REFRESH_S", 0.0)  # a replica re-reads the nodes with waiting actions at once
    a, b, clock = pair
    assert a.node_actions.serves("n1", NodeActionKind.reset_gpu) is not None  # never heard of it
    b.ingest(batch("n1", [], inventory=inventory("n1"), can=[NodeActionKind.reset_gpu]))
    a.tick()  # the leader reads the feed
    assert a.node_actions.serves("n1", NodeActionKind.reset_gpu) is None
    a.node_actions.request(NodeAction("x1", NodeActionKind.reset_gpu, "n1", clock.now + 900, gpu=3), "remediation")
    ack = b.ingest(batch("n1", [], can=[NodeActionKind.reset_gpu]))
    assert [x.id for x in ack.actions] == ["x1"]
