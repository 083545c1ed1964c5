"""The workload watcher on the agent: read in its own thread, the latest report handed to every push, a failing
read said once (and its recovery once) while the last good report stands."""

from __future__ import annotations

import logging
import time

import pytest

from gpufleet.agent.workload import WorkloadWatch
from gpufleet.errors import BackendError
from gpufleet.model.observe import SchedulerReport


class Reader:
    def __init__(self) -> None:
        self.calls = 0
        self.fail: Exception | None = None

    def read(self) -> SchedulerReport:
        self.calls += 1
        if self.fail is not None:
            raise self.fail
        return SchedulerReport(manager="slurm", time=1.8e9 + self.calls)


def test_the_latest_report_stands_through_failures_which_are_said_once(caplog: pytest.LogCaptureFixture) -> None:
    reader = Reader()
    watch = WorkloadWatch(reader.read, "slurm")
    assert watch() is None  # nothing read yet: the push says nothing of the scheduler
    watch.refresh()
    first = watch()
    assert first is not None and first.time == 1.8e9 + 1
    reader.fail = BackendError("`squeue ...` failed: slurm_load_jobs error: Unable to contact slurm controller")
    with caplog.at_level(logging.INFO, logger="gpufleet.agent"):
        for _ in range(3):
            watch.refresh()
        assert watch() is first and watch.failing is not None
        reader.fail = None
        watch.refresh()
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        "reading slurm's queue failed (retrying every 15s): `squeue ...` failed: slurm_load_jobs error: Unable to "
        "contact slurm controller",
        "reading slurm's queue works again",
    ]
    latest = watch()
    assert latest is not None and latest.time == 1.8e9 + 5 and watch.reads == 2


def test_a_bug_in_the_reader_does_not_stop_the_thread() -> None:
    reader = Reader()
    reader.fail = KeyError("Reason")
    watch = WorkloadWatch(reader.read, "kubernetes", every_s=0.05)
    watch.start()
    try:
        deadline = time.monotonic() + 5
        while reader.calls < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert watch.alive and watch.failing == "KeyError: 'Reason'"
        reader.fail = None
        while watch() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert watch() is not None
    finally:
        watch.stop()
    assert not watch.alive
