"""The twin's clock in `gpufleet up`: it says so when the host cannot run it as fast as asked."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from gpufleet.sim import runner as runner_module
from gpufleet.sim.runner import SimRunner
from tests.twins import door, small_twin


def test_a_twin_slower_than_asked_says_so_once(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner_module, "SPEED_CHECK_S", 0.3)
    twin = small_twin(nodes=2, job_nodes=0)
    plane, fleet = door(twin)
    runner = SimRunner(twin, fleet, plane.ingest, plane.tick, lock=threading.RLock(), speed=1e9)  # type: ignore[attr-defined]
    with caplog.at_level(logging.WARNING, logger="gpufleet.sim"):
        runner.start()
        try:
            for _ in range(100):
                if any("below the requested" in r.getMessage() for r in caplog.records):
                    break
                time.sleep(0.05)
            time.sleep(0.5)
        finally:
            runner.stop()
    warnings = [r.getMessage() for r in caplog.records if "below the requested" in r.getMessage()]
    assert runner.error is None
    assert len(warnings) == 1 and "1e+09x" in warnings[0]
