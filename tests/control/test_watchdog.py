"""The control loop's watchdog: a stall logs every thread's stack once, and the loop turning again is said."""

from __future__ import annotations

import logging
import threading

import pytest

from gpufleet.control.watchdog import LoopWatchdog, thread_stacks


def test_a_stall_logs_every_threads_stack_once(caplog: pytest.LogCaptureFixture) -> None:
    turned: list[float | None] = [None]
    watchdog = LoopWatchdog(lambda: turned[0], stall_s=30.0)
    release = threading.Event()
    waiting = threading.Thread(target=release.wait, name="blocked-in-transition", daemon=True)
    waiting.start()
    try:
        with caplog.at_level(logging.INFO, logger="gpufleet.control"):
            assert not watchdog.check(now=1_000.0)  # before the first turn there is nothing to judge
            turned[0] = 1_000.0
            assert not watchdog.check(now=1_029.0)
            assert watchdog.check(now=1_031.0) and watchdog.check(now=1_100.0)
            stalls = [r for r in caplog.records if "has not turned" in r.getMessage()]
            assert len(stalls) == 1 and watchdog.stalls == 1
            assert "has not turned for 31 s" in stalls[0].getMessage()
            assert 'thread "blocked-in-transition"' in stalls[0].getMessage()
            turned[0] = 1_101.0
            assert not watchdog.check(now=1_102.0)
            assert any("turns again after a stall of 101 s" in r.getMessage() for r in caplog.records)
            turned[0] = 1_102.0
            assert watchdog.check(now=1_200.0) and watchdog.stalls == 2  # a new stall is logged again
    finally:
        release.set()


def test_the_stacks_name_each_thread_and_where_it_waits() -> None:
    stacks = thread_stacks()
    assert 'thread "MainThread"' in stacks and "test_the_stacks_name_each_thread_and_where_it_waits" in stacks
