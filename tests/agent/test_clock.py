"""The agent's clock: read in its own thread by the real reader (a `chronyc` on PATH printing a real capture),
served on /metrics, and carried in the agent's pushes; a reader that fails is the source down with its reason."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from gpufleet.agent.clock import ClockWatch
from gpufleet.agent.collector import Collector
from gpufleet.agent.pusher import BatchPusher, NodeState
from gpufleet.agent.spool import RecordSpool
from gpufleet.errors import GpufleetError
from gpufleet.model.observe import Ack, Batch, ClockFact
from gpufleet.model.wire import JSON, decode_batch, encode
from gpufleet.sources.node.clock import ClockReader
from gpufleet.telemetry.exposition.dcgm import render
from gpufleet.telemetry.frame import MetricFrame

DATA = Path(__file__).parents[1] / "parsers" / "clock" / "data"


@pytest.fixture
def chronyc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "chronyc"
    path.write_text(f"#!/bin/sh\n/bin/cat '{DATA / 'chrony_tracking_scale_network121.txt'}'\n")
    path.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))


def test_the_clock_is_served_and_pushed(chronyc: None, tmp_path: Path) -> None:
    watch = ClockWatch(ClockReader().read)
    frame = MetricFrame((), ())
    collector = Collector(frame, [watch])
    collector.collect_once()
    assert watch.latest is None and "clock" in collector.source_up  # nothing read yet: no series
    watch.read_once()
    collector.collect_once()
    body = render(frame)
    assert 'gpufleet_clock_offset_seconds{source="chrony"} 0.000260112' in body
    assert 'gpufleet_clock_synchronized{source="chrony"} 1' in body
    assert "# HELP gpufleet_clock_error_seconds" in body

    sent: list[Batch] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(decode_batch(request.content, JSON))
        return httpx.Response(200, content=encode(Ack(0, 0, 0)), headers={"Content-Type": JSON})

    state = NodeState()
    state.read_clock = lambda: watch.latest
    pusher = BatchPusher(RecordSpool(tmp_path / "spool-n1.db"), state, "http://cp:8470", lambda: None,
                         agent="n1", node="n1", interval=1.0)  # fmt: skip
    pusher._client = httpx.Client(transport=httpx.MockTransport(answer))
    try:
        assert pusher.push_once()
    finally:
        pusher.stop()
    clock = sent[0].clock
    assert clock is not None and clock.source == "chrony" and clock.offset_s == pytest.approx(0.000260112)


def test_a_failed_read_is_the_source_down_and_the_last_reading_stays() -> None:
    fact = ClockFact(time=1.0, source="kernel", synchronised=False, error_s=16.0)
    answers: list[ClockFact | None] = [fact, None]

    def read() -> ClockFact:
        got = answers.pop(0)
        if got is None:
            raise GpufleetError("no C library to call adjtimex through", fix="run the agent on Linux")
        return got

    watch = ClockWatch(read)
    frame = MetricFrame((), ())
    collector = Collector(frame, [watch])
    watch.read_once()
    collector.collect_once()
    assert collector.source_up["clock"] is True
    assert frame.gauges[("gpufleet_clock_synchronized", (("source", "kernel"),))] == 0.0
    watch.read_once()
    collector.collect_once()
    assert collector.source_up["clock"] is False and "adjtimex" in frame.sources_down["clock"]
    assert watch.latest == fact


def test_a_reading_the_contract_refuses_is_kept_off_the_push() -> None:
    watch = ClockWatch(lambda: ClockFact(time=1.0, source="chrony", stratum=99))  # past NTP's 16
    watch.read_once()
    frame = MetricFrame((), ())
    collector = Collector(frame, [watch])
    collector.collect_once()
    assert watch.latest is None and "out of range" in frame.sources_down["clock"]
