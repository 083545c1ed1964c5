"""The shared read views: built once per moment however many ask, dropped by any change made through the API."""

from __future__ import annotations

import threading
import time

from gpufleet.server.cache import ReadCache


def test_one_build_serves_every_caller_within_the_moment() -> None:
    cache = ReadCache(ttl_s=60.0)
    builds: list[int] = []

    def build() -> dict[str, int]:
        builds.append(1)
        time.sleep(0.05)  # slow enough that the callers overlap
        return {"n": len(builds)}

    answers: list[bytes] = []
    threads = [threading.Thread(target=lambda: answers.append(cache.get("v", build))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(builds) == 1 and set(answers) == {b'{"n":1}'}


def test_a_change_drops_every_view() -> None:
    cache = ReadCache(ttl_s=60.0)
    count = iter(range(10))
    assert cache.get("a", lambda: next(count)) == b"0"
    assert cache.get("a", lambda: next(count)) == b"0"
    cache.clear()
    assert cache.get("a", lambda: next(count)) == b"1"


def test_a_view_past_its_moment_is_served_while_one_background_build_replaces_it() -> None:
    cache = ReadCache(ttl_s=0.0, stale_limit_s=60.0)
    count = iter(range(10))
    release = threading.Event()

    def build() -> int:
        n = next(count)
        if n == 1:
            release.wait(5)  # the rebuild is slow: readers must not wait for it
        return n

    assert cache.get("a", build) == b"0"
    assert [cache.get("a", build) for _ in range(5)] == [b"0"] * 5  # one rebuild started, nobody waited
    release.set()
    deadline = time.monotonic() + 5
    while cache.get("a", build) == b"0" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert cache.get("a", build) in (b"1", b"2") and cache.builds >= 2


def test_a_view_too_old_to_serve_is_built_in_the_request() -> None:
    cache = ReadCache(ttl_s=0.0, stale_limit_s=0.0)
    count = iter(range(10))
    assert cache.get("a", lambda: next(count)) == b"0"
    assert cache.get("a", lambda: next(count)) == b"1"


def test_views_that_are_no_longer_asked_for_do_not_pile_up() -> None:
    from gpufleet.server.cache import MAX_ENTRIES

    cache = ReadCache(ttl_s=0.0)  # every entry is stale at once
    for k in range(5 * MAX_ENTRIES):
        cache.get(f"incidents/since={k}", lambda: [])
    assert len(cache._entries) <= MAX_ENTRIES and not cache._building
