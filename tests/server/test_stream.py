"""What every stream reads is read once per poll for all of them."""

from __future__ import annotations

import threading
import time

from gpufleet.server.routes.stream import Shared


def test_many_streams_share_one_read_per_poll() -> None:
    calls: list[float] = []

    def read() -> int:
        calls.append(time.monotonic())
        time.sleep(0.05)  # a database read: the others wait for it rather than reading too
        return len(calls)

    shared = Shared(read, ttl_s=60.0)
    seen: list[int] = []
    threads = [threading.Thread(target=lambda: seen.append(shared.get())) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == [1] * 16 and shared.reads == 1


def test_a_stale_read_is_made_again() -> None:
    values = iter(range(10))
    shared = Shared(lambda: next(values), ttl_s=0.0)
    assert [shared.get(), shared.get()] == [0, 1]
