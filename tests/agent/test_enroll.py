"""An agent started with the fleet's shared agent token enrolls its node over the real API: it gets a token bound
to its node (kept 0600 in its data directory), pushes with it, and is then handed its node's actions; a second agent
claiming the same node gets no second token."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from gpufleet.agent.enroll import NodeToken
from gpufleet.agent.pusher import BatchPusher, NodeState
from gpufleet.agent.spool import RecordSpool
from gpufleet.control.service import ControlPlane
from gpufleet.model.actions import NodeAction, NodeActionKind
from gpufleet.remediate.backends.observe import ObserveOnlyBackend
from gpufleet.state import Database
from gpufleet.state.tokens import TokenStore
from tests import apiclient


def test_an_agent_enrolls_its_node_and_is_then_given_its_actions(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    plane = ControlPlane(Database(tmp_path / "cp.db"), ObserveOnlyBackend(lambda: ["gpu-3"]))
    shared = TokenStore(plane.db).create("daemonset", "agent", "test")[1]
    with apiclient.serving(apiclient.app(plane)) as url:
        token = NodeToken(tmp_path / "agent" / "token-gpu-3", lambda: shared, url, "gpu-3")
        own = token()
        assert own is not None and own != shared
        assert (tmp_path / "agent" / "token-gpu-3").stat().st_mode & 0o777 == 0o600
        bound = TokenStore(plane.db).authenticate(own)
        assert bound is not None and bound.node == "gpu-3" and bound.created_by == "enrolled with daemonset"
        plane.node_actions.request(NodeAction("a1", NodeActionKind.diag, "gpu-3", time.time() + 600, level=1), "test")
        pusher = BatchPusher(RecordSpool(tmp_path / "s.db"), NodeState(), url, token, agent="gpu-3", node="gpu-3",
                             interval=1.0)  # fmt: skip
        pusher.push_once()
        assert plane.node_actions.status("a1").state == "unsupported"  # heard with its own token: no kinds listed
        assert token() == own  # read back from the file, no second request
        # another agent claiming gpu-3 with the shared token gets nothing, and says why
        caplog.set_level(logging.INFO, "gpufleet.agent")
        other = NodeToken(tmp_path / "other" / "token-gpu-3", lambda: shared, url, "gpu-3")
        assert other() == shared and not other.enroll
        assert "has a token of its own (agent-gpu-3)" in other.said and "gpufleet token revoke" in other.said
        pusher.stop()
    actions = [(e.actor, e.action, e.decision) for e in plane.store.audit_log.entries() if e.action == "enroll"]
    assert actions == [("daemonset", "enroll", "token agent-gpu-3 bound to gpu-3")]


def test_a_bound_token_is_not_enrolled_again(tmp_path: Path) -> None:
    plane = ControlPlane(Database(tmp_path / "cp.db"), ObserveOnlyBackend(lambda: ["gpu-3"]))
    bound = TokenStore(plane.db).create("agent-gpu-3", "agent", "test", node="gpu-3")[1]
    with apiclient.serving(apiclient.app(plane)) as url:
        token = NodeToken(tmp_path / "token", lambda: bound, url, "gpu-3")
        assert token() == bound and not token.enroll and "only a shared agent token enrolls" in token.said


def test_an_unreachable_control_plane_is_asked_again_later(tmp_path: Path) -> None:
    now = [0.0]
    token = NodeToken(
        tmp_path / "token", lambda: "gf_x", f"http://127.0.0.1:{apiclient.free_port()}", "n", clock=lambda: now[0]
    )
    assert token() == "gf_x" and token.enroll
    assert token._next_try == 60.0
