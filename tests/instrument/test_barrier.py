from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import textwrap
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from gpufleet.instrument import BarrierTimeout, TrainingMetrics, monitored_barrier, names
from gpufleet.instrument.barrier import KEY_PREFIX, Store
from tests.instrument.conftest import Scrape, require_torch, scrape

TIMEOUTS = names.TRAINING_BARRIER_TIMEOUTS


class MemoryStore:
    """A torch Store's semantics in memory, for the barrier's logic without torch (the real stores are below)."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self._cond = threading.Condition()

    def set(self, key: str, value: str) -> None:
        with self._cond:
            self.data[key] = value.encode()
            self._cond.notify_all()

    def get(self, key: str) -> bytes:
        self.wait([key], timedelta(seconds=10))
        return self.data[key]

    def add(self, key: str, value: int) -> int:
        with self._cond:
            total = int(self.data.get(key, b"0")) + value
            self.data[key] = str(total).encode()
            self._cond.notify_all()
            return total

    def check(self, keys: list[str]) -> bool:
        with self._cond:
            return all(k in self.data for k in keys)

    def wait(self, keys: list[str], timeout: timedelta) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: all(k in self.data for k in keys), timeout.total_seconds()):
                raise RuntimeError("Wait timeout")

    def compare_set(self, key: str, expected_value: str, desired_value: str) -> bytes:
        with self._cond:
            current = self.data.get(key)
            if (current is None and expected_value == "") or current == expected_value.encode():
                self.data[key] = desired_value.encode()
                self._cond.notify_all()
            return self.data[key]

    def delete_key(self, key: str) -> bool:
        with self._cond:
            return self.data.pop(key, None) is not None


def run_ranks(
    world: int, arriving: list[int], store_for: Callable[[int], Store], **kwargs: Any
) -> tuple[dict[int, Any], list[CollectorRegistry]]:
    """The ranks in `arriving` call the barrier at once, each in a thread with its own registry; what each
    returned or raised, by rank."""
    registries = [CollectorRegistry() for _ in range(world)]

    def call(rank: int) -> Any:
        metrics = TrainingMetrics("llm", rank=rank, world_size=world, registry=registries[rank])
        try:
            return monitored_barrier(store_for(rank), metrics=metrics, **kwargs)
        except BarrierTimeout as e:
            return e

    with ThreadPoolExecutor(len(arriving)) as pool:
        futures = {rank: pool.submit(call, rank) for rank in arriving}
        return {rank: f.result() for rank, f in futures.items()}, registries


def timeouts(s: Scrape) -> dict[str, float]:
    return {labels["missing_rank"]: s.value(TIMEOUTS, **labels) or 0.0 for labels in s.label_sets(TIMEOUTS)}


def test_all_ranks_pass_and_old_generations_are_cleared() -> None:
    store = MemoryStore()
    for _ in range(4):
        results, _ = run_ranks(3, [0, 1, 2], lambda r: store, name="step", timeout=5)
        assert results == {0: [], 1: [], 2: []}
    base = f"{KEY_PREFIX}/step"
    assert not [k for k in store.data if k.startswith((f"{base}/1/", f"{base}/2/"))]
    assert store.data[f"{base}/calls/2"] == b"4"


def test_a_rank_that_never_arrives_is_named_and_counted_once() -> None:
    store = MemoryStore()
    results, registries = run_ranks(3, [0, 1], lambda r: store, name="checkpoint", timeout=0.3)
    for rank in (0, 1):
        error = results[rank]
        assert isinstance(error, BarrierTimeout)
        assert error.missing_ranks == [2]
        assert str(error).startswith("Rank 2 failed to pass monitored barrier 'checkpoint' in 300 ms")
        assert "job 'llm'" in str(error)
    s0 = scrape(registries[0])
    assert s0.label_sets(TIMEOUTS) == [{"job": "llm", "barrier": "checkpoint", "missing_rank": "2"}]
    assert timeouts(s0) == {"2": 1.0}
    assert timeouts(scrape(registries[1])) == {}  # the job's reporting rank counted it


def test_several_missing_ranks_and_returning_instead_of_raising() -> None:
    store = MemoryStore()
    results, registries = run_ranks(4, [0, 3], lambda r: store, timeout=0.2, raise_on_timeout=False)
    assert results == {0: [1, 2], 3: [1, 2]}
    assert timeouts(scrape(registries[0])) == {"1": 1.0, "2": 1.0}


def test_when_the_reporting_rank_is_missing_the_rank_whose_verdict_stands_counts_it() -> None:
    store = MemoryStore()
    results, registries = run_ranks(2, [1], lambda r: store, timeout=0.2)
    assert isinstance(results[1], BarrierTimeout)
    assert results[1].missing_ranks == [0]
    assert timeouts(scrape(registries[1])) == {"0": 1.0}


def test_a_late_rank_reads_the_same_verdict_and_is_not_counted_twice() -> None:
    store = MemoryStore()
    results, registries = run_ranks(2, [0], lambda r: store, name="end", timeout=0.2)
    assert isinstance(results[0], BarrierTimeout)
    late, late_registries = run_ranks(2, [1], lambda r: store, name="end", timeout=5)
    error = late[1]
    assert isinstance(error, BarrierTimeout)
    assert error.missing_ranks == [1]
    assert "this rank (1) arrived after the others stopped waiting" in str(error)
    assert timeouts(scrape(registries[0])) == {"1": 1.0}
    assert timeouts(scrape(late_registries[1])) == {}


def test_everyone_arrived_but_the_verdict_was_not_written_yet_is_a_pass() -> None:
    store = MemoryStore()
    # Rank 1 marked its arrival, then stalled before counting itself in.
    store.set(f"{KEY_PREFIX}/barrier/1/arrived/1", "1")
    assert monitored_barrier(store, rank=0, world_size=2, timeout=0.1) == []


def test_rank_and_world_size_come_from_the_metrics_or_the_arguments() -> None:
    store = MemoryStore()
    metrics = TrainingMetrics("solo", registry=CollectorRegistry())
    assert monitored_barrier(store, metrics=metrics, timeout=timedelta(seconds=1)) == []
    assert monitored_barrier(store, rank=0, world_size=1) == []
    with pytest.raises(ValueError, match="rank 3 is not in a world of 2"):
        monitored_barrier(store, rank=3, world_size=2)


@pytest.mark.parametrize("kind", ["hash", "file", "tcp"])
def test_over_torch_stores(kind: str, tmp_path: Path) -> None:
    require_torch()
    import torch.distributed as dist

    stores: list[Any]
    if kind == "hash":
        shared = dist.HashStore()
        stores = [shared, shared]
    elif kind == "file":
        stores = [dist.FileStore(str(tmp_path / "store"), 2) for _ in range(2)]
    else:
        master = dist.TCPStore("127.0.0.1", 0, 2, is_master=True, wait_for_workers=False)
        stores = [master, dist.TCPStore("127.0.0.1", master.port, 2, is_master=False)]
    for _ in range(3):
        results, _ = run_ranks(2, [0, 1], lambda r: stores[r], name="sync", timeout=10)
        assert results == {0: [], 1: []}
    results, registries = run_ranks(2, [0], lambda r: stores[r], name="sync", timeout=0.3)
    assert isinstance(results[0], BarrierTimeout)
    assert results[0].missing_ranks == [1]
    assert timeouts(scrape(registries[0])) == {"1": 1.0}


# Rank 0 hosts a TCPStore and calls the barrier; rank 1 joins the store, stays alive, and never arrives.
TWO_PROCESSES = textwrap.dedent(
    """
    import json, sys
    from datetime import timedelta
    import torch.distributed as dist
    from prometheus_client import CollectorRegistry, generate_latest
    from gpufleet.instrument import BarrierTimeout, TrainingMetrics, monitored_barrier

    rank = int(sys.argv[1])
    if rank == 0:
        store = dist.TCPStore("127.0.0.1", 0, 2, is_master=True, wait_for_workers=False)
        print(store.port, flush=True)
        store.wait(["joined/1"], timedelta(seconds=60))
        registry = CollectorRegistry()
        metrics = TrainingMetrics("two-procs", rank=0, world_size=2, registry=registry)
        try:
            monitored_barrier(store, name="epoch-end", timeout=1.0, metrics=metrics)
            out = {"error": None}
        except BarrierTimeout as e:
            out = {"error": str(e), "missing": e.missing_ranks}
        store.set("done", "1")
        out["metrics"] = generate_latest(registry).decode()
        print(json.dumps(out), flush=True)
    else:
        store = dist.TCPStore("127.0.0.1", int(sys.argv[2]), 2, is_master=False)
        store.set("joined/1", "1")
        store.wait(["done"], timedelta(seconds=60))
    """
)


@pytest.mark.slow
def test_two_processes_rank_one_never_arrives() -> None:
    require_torch()
    cwd = tempfile.mkdtemp()
    rank0 = subprocess.Popen(
        [sys.executable, "-c", TWO_PROCESSES, "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd
    )
    assert rank0.stdout is not None
    try:
        port = rank0.stdout.readline().strip()
        assert port.isdigit(), rank0.stderr.read() if rank0.stderr else ""
        rank1 = subprocess.run(
            [sys.executable, "-c", TWO_PROCESSES, "1", port], capture_output=True, text=True, timeout=120, cwd=cwd
        )
        out, err = rank0.communicate(timeout=60)
    finally:
        rank0.kill()
    assert rank0.returncode == 0, err
    assert rank1.returncode == 0, rank1.stderr
    result = json.loads(out.strip().splitlines()[-1])
    assert result["missing"] == [1]
    assert result["error"].startswith("Rank 1 failed to pass monitored barrier 'epoch-end' in 1000 ms")
    s = Scrape.parse(result["metrics"])
    assert s.value(TIMEOUTS, job="two-procs", barrier="epoch-end", missing_rank="1") == 1.0
