"""The agent's pusher when the control plane acknowledges records this agent never wrote: something else pushes
under its stream. It says so once, loudly, and keeps the records it has not sent."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest

from gpufleet.agent.pusher import BatchPusher, NodeState
from gpufleet.agent.spool import RecordSpool
from gpufleet.model.observe import Ack
from gpufleet.model.wire import JSON, encode
from tests.control.helpers import T0, lost_gpu


def test_an_ack_past_what_the_agent_wrote_is_said_and_keeps_the_unsent(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spool = RecordSpool(tmp_path / "spool-n1.db")
    spool.append([lost_gpu("n1", T0 + k) for k in range(5)])
    pusher = BatchPusher(
        spool, NodeState(), "http://cp:8470", lambda: None, agent="n1", node="n1", interval=1.0, batch=3
    )
    pusher._client = httpx.Client(  # the control plane says it holds up to 9,000 of this stream
        transport=httpx.MockTransport(
            lambda request: httpx.Response(200, content=encode(Ack(9_000, 0, 3)), headers={"Content-Type": JSON})
        )
    )
    try:
        with caplog.at_level(logging.ERROR, logger="gpufleet.agent"):
            assert pusher.push_once()
            assert len(spool) == 2  # records 4 and 5 were not sent: an ack of 9,000 does not drop them
            assert pusher.push_once()
        said = [r.getMessage() for r in caplog.records if "something else pushes under this stream" in r.getMessage()]
        assert len(said) == 1 and "records up to 9000" in said[0] and "written only 5" in said[0]
        assert len(spool) == 0  # each push let go of what it had sent
    finally:
        pusher.stop()
