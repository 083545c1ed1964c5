"""A node action from the control plane to a real agent and back over HTTP, with both sides restarted in between:
the command runs exactly once, its result (with its output) reaches the control plane once, and is audited."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import uvicorn

from gpufleet.agent.actions import Commands, NodeActionRunner, NodeFacts
from gpufleet.agent.pusher import BatchPusher, NodeState
from gpufleet.agent.spool import RecordSpool
from gpufleet.control.service import ControlPlane
from gpufleet.model.actions import NodeAction, NodeActionKind
from gpufleet.remediate.backends.observe import ObserveOnlyBackend
from gpufleet.state import Database
from gpufleet.state.tokens import TokenStore
from tests import apiclient

NODE = "gpu-07"


class Door:
    """A control plane on a state file, served on one port; stopped and started again as a restart would."""

    def __init__(self, path: Path) -> None:
        self.path, self.port = path, apiclient.free_port()
        self.server: uvicorn.Server | None = None
        self.thread: threading.Thread | None = None
        self.plane: ControlPlane | None = None

    def start(self) -> ControlPlane:
        db = Database(self.path)
        plane = ControlPlane(db, ObserveOnlyBackend(lambda: [NODE]))
        app = apiclient.app(plane)
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="error"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        while not self.server.started:
            time.sleep(0.05)
        self.plane = plane
        return plane

    def stop(self) -> None:
        assert self.server is not None and self.thread is not None and self.plane is not None
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.plane.db.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def agent(data: Path, url: str, token: str, marks: Path) -> tuple[BatchPusher, NodeActionRunner]:
    command = f"sh -c 'echo resetting GPU {{gpu}}; echo {{gpu}} >> {marks}'"
    runner = NodeActionRunner(data / "actions", NODE, NodeFacts(), Commands({NodeActionKind.reset_gpu: command}, None))
    spool = RecordSpool(data / "spool.db")
    pusher = BatchPusher(spool, NodeState(), url, lambda: token, agent=NODE, node=NODE, interval=1.0, actions=runner)
    return pusher, runner


def test_a_reset_runs_once_across_restarts_of_both_sides(tmp_path: Path) -> None:
    door = Door(tmp_path / "state.db")
    plane = door.start()
    token = TokenStore(plane.db).create("agent-gpu-07", "agent", "test", node=NODE)[1]
    marks = tmp_path / "ran"
    action = NodeAction("INC-000009.reset", NodeActionKind.reset_gpu, NODE, time.time() + 900, "INC-000009", gpu=3)
    plane.node_actions.request(action, "remediation")

    pusher, runner = agent(tmp_path / "agent", door.url, token, marks)
    assert pusher.push_once()  # the ack hands the reset over; the agent runs it
    runner.join(10)
    assert marks.read_text() == "3\n"

    door.stop()  # the control plane goes before the result reaches it
    assert not pusher.push_once()
    pusher.stop()
    pusher.spool.close()
    plane = door.start()
    # a new agent process on the same data directory: the reset is handed to it again, and not run again
    pusher, runner = agent(tmp_path / "agent", door.url, token, marks)
    assert pusher.push_once()
    runner.join(10)
    assert marks.read_text() == "3\n"
    row = plane.node_actions.status(action.id)
    assert row is not None and row.state == "done" and "resetting GPU 3" in row.result.output
    assert runner.results() == []  # acknowledged
    assert pusher.push_once() and marks.read_text() == "3\n"
    audit = [(e.actor, e.decision) for e in plane.store.audit_log.entries(incident="INC-000009")]
    assert audit == [(f"agent/{NODE}", "done")]  # the runbook step that asked for it records the queueing
    pusher.stop()
    door.stop()
