from __future__ import annotations

import logging

import numpy as np
import pytest

from gpufleet.agent.collector import Collector
from gpufleet.telemetry.frame import MetricFrame
from gpufleet.telemetry.store import EmbeddedStore
from tests.telemetry.conftest import make_entities


class Temperatures:
    name = "twin"

    def collect(self, frame: MetricFrame) -> None:
        frame.gpu("DCGM_FI_DEV_GPU_TEMP")[:] = 50 + np.arange(len(frame.entities))


class BrokenCounters:
    """A source whose input went bad (a corrupted counters file) until it is repaired."""

    name = "sysfs"

    def __init__(self) -> None:
        self.broken = True

    def collect(self, frame: MetricFrame) -> None:
        if self.broken:
            raise ValueError("counters file: invalid literal for int()")
        frame.gpu("DCGM_FI_DEV_PCIE_REPLAY_COUNTER")[:] = 7


def test_failing_source_is_marked_stored_and_recovers(caplog: pytest.LogCaptureFixture) -> None:
    broken = BrokenCounters()
    store = EmbeddedStore()
    frame = MetricFrame(tuple(make_entities(2)))
    collector = Collector(frame, [Temperatures(), broken], [], None, sinks=[store])
    with caplog.at_level(logging.ERROR, logger="gpufleet.agent"):
        frame.timestamp = 100.0
        collector.collect_once()
        frame.timestamp = 101.0
        collector.collect_once()
    text = collector.body.decode()
    assert 'DCGM_FI_DEV_GPU_TEMP{gpu="1"' in text
    assert 'gpufleet_source_up{source="sysfs"} 0' in text and 'gpufleet_source_up{source="twin"} 1' in text
    assert "DCGM_FI_DEV_PCIE_REPLAY_COUNTER{" not in text
    assert len([r for r in caplog.records if "sysfs" in r.getMessage()]) == 1  # one line per failure streak
    broken.broken = False
    frame.timestamp = 102.0
    collector.collect_once()
    assert 'gpufleet_source_up{source="sysfs"} 1' in collector.body.decode()
    assert store.instant('gpufleet_source_up{source="sysfs"}')[0].value == 1
    assert store.instant('DCGM_FI_DEV_GPU_TEMP{gpu="1"}')[0].value == 51


def test_a_source_down_and_why_travel_in_the_nodes_snapshot() -> None:
    """What gpufleet_source_up says reaches the control plane: the snapshot an agent pushes names each source down
    and why, and forgets it when the source recovers."""
    from gpufleet.agent.edge import snapshot
    from gpufleet.model.observe import SCHEMA_VERSION, Batch
    from gpufleet.model.wire import MSGPACK, decode_batch, encode

    broken = BrokenCounters()
    frame = MetricFrame(tuple(make_entities(2)))
    collector = Collector(frame, [Temperatures(), broken], [], None)
    frame.timestamp = 100.0
    collector.collect_once()
    shot = snapshot(frame, 100.0)
    assert shot.sources_down == {"sysfs": "ValueError: counters file: invalid literal for int()"}
    for kind in ("application/json", MSGPACK):  # on the wire both ways
        sent = Batch(v=SCHEMA_VERSION, agent="n-0", incarnation="i", node="n-0", sent=100.0, metrics=shot)
        assert decode_batch(encode(sent, kind), kind).metrics.sources_down == shot.sources_down  # type: ignore[union-attr]
    broken.broken = False
    frame.timestamp = 101.0
    collector.collect_once()
    assert snapshot(frame, 101.0).sources_down == {}
