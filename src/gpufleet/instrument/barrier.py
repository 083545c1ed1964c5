"""A monitored barrier over a torch.distributed key-value store, for any backend: it says which rank never arrived.

torch's own `monitored_barrier` runs on gloo only, so an NCCL job that hangs learns nothing but a collective timeout
much later. This one uses the job's `Store` (TCPStore, FileStore, or the default group's), which every backend has.

Each call is one generation of the barrier `name`: a rank's n-th call meets the other ranks' n-th calls. A rank
marks its arrival and counts itself in; the last to arrive records the verdict "passed". A rank that waits past the
timeout looks at who has arrived and proposes the verdict "timeout, ranks ... missing". The verdict is written once
(compare-and-set), so every rank, late ones included, reads the same one and reports the same missing ranks.

The timeout is counted in `training_barrier_timeouts_total{job, barrier, missing_rank}` once per job: by the
reporting rank of the `TrainingMetrics` passed in, or, when that rank is itself missing, by the rank whose verdict
was written. torch is imported only to find the default group's store when none is given.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from gpufleet.instrument.training import TrainingMetrics

DEFAULT_TIMEOUT = timedelta(minutes=10)  # gloo's default process-group timeout
KEY_PREFIX = "gpufleet/barrier"
_PASSED = "passed"


class Store(Protocol):
    """What the barrier needs of a torch.distributed Store."""

    def set(self, key: str, value: str) -> None: ...
    def get(self, key: str) -> bytes: ...
    def add(self, key: str, value: int) -> int: ...
    def check(self, keys: list[str]) -> bool: ...
    def wait(self, keys: list[str], timeout: timedelta) -> None: ...
    def compare_set(self, key: str, expected_value: str, desired_value: str) -> bytes: ...
    def delete_key(self, key: str) -> bool: ...


class BarrierTimeout(RuntimeError):
    """Some ranks did not reach a monitored barrier in time; `missing_ranks` names them."""

    def __init__(self, message: str, barrier: str, missing_ranks: list[int], timeout: timedelta) -> None:
        super().__init__(message)
        self.barrier = barrier
        self.missing_ranks = missing_ranks
        self.timeout = timeout


def monitored_barrier(
    store: Store | None = None,
    *,
    name: str = "barrier",
    timeout: timedelta | float = DEFAULT_TIMEOUT,
    metrics: TrainingMetrics | None = None,
    rank: int | None = None,
    world_size: int | None = None,
    raise_on_timeout: bool = True,
) -> list[int]:
    """Wait until every rank calls this with the same `name`, or until `timeout` (a timedelta, or seconds).

    Returns [] when all arrived. On a timeout, raises `BarrierTimeout` naming the missing ranks, or with
    `raise_on_timeout=False` returns them. `rank` and `world_size` default to those of `metrics`, else of the
    default process group; `store` defaults to the default process group's.
    """
    if isinstance(timeout, int | float):
        timeout = timedelta(seconds=timeout)
    if rank is None or world_size is None:
        rank, world_size = _rank_and_world(rank, world_size, metrics)
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in a world of {world_size}")
    store = _default_store() if store is None else store

    base = f"{KEY_PREFIX}/{name}"
    generation = store.add(f"{base}/calls/{rank}", 1)
    keys = _Keys(base, generation)
    store.set(keys.arrived(rank), "1")
    if store.add(keys.count, 1) >= world_size:
        verdict = _decide(store, keys, _PASSED)
    else:
        verdict = _wait(store, keys, rank, world_size, timeout)

    if verdict == _PASSED:
        if generation > 1:
            _forget(store, _Keys(base, generation - 1), rank)
        return []
    proposer, missing = _parse_timeout(verdict)
    if metrics is not None and _reports(metrics.reporting_rank, rank, proposer, missing):
        metrics.barrier_timeout(name, missing)
    if not raise_on_timeout:
        return missing
    raise BarrierTimeout(_message(name, generation, missing, rank, timeout, metrics), name, missing, timeout)


class _Keys:
    def __init__(self, base: str, generation: int) -> None:
        self.prefix = f"{base}/{generation}"
        self.count = f"{self.prefix}/count"
        self.verdict = f"{self.prefix}/verdict"

    def arrived(self, rank: int) -> str:
        return f"{self.prefix}/arrived/{rank}"


def _wait(store: Store, keys: _Keys, rank: int, world_size: int, timeout: timedelta) -> str:
    try:
        store.wait([keys.verdict], timeout)
    except RuntimeError:  # every store says a timeout this way (DistStoreError is one); a dead store fails below
        missing = [r for r in range(world_size) if not store.check([keys.arrived(r)])]
        # Everyone is here but the last one has not written the verdict yet: the barrier passed.
        return _decide(store, keys, _PASSED if not missing else _timeout_verdict(rank, missing))
    return store.get(keys.verdict).decode()


def _decide(store: Store, keys: _Keys, proposal: str) -> str:
    """The verdict of this generation: `proposal` if none was written yet, else the one that was."""
    return store.compare_set(keys.verdict, "", proposal).decode()


def _timeout_verdict(proposer: int, missing: list[int]) -> str:
    return f"timeout {proposer} {','.join(map(str, missing))}"


def _parse_timeout(verdict: str) -> tuple[int, list[int]]:
    _, proposer, missing = verdict.split(" ")
    return int(proposer), [int(r) for r in missing.split(",")]


def _reports(reporting_rank: int, rank: int, proposer: int, missing: list[int]) -> bool:
    """One rank counts the timeout: the job's reporting rank if it arrived, else the rank whose verdict stands."""
    return rank == (reporting_rank if reporting_rank not in missing else proposer)


def _forget(store: Store, previous: _Keys, rank: int) -> None:
    """Drop the previous generation's keys, so a barrier called every step does not grow the store: every rank has
    passed it, since all of them reached this one."""
    store.delete_key(previous.arrived(rank))
    if rank == 0:
        store.delete_key(previous.count)
        store.delete_key(previous.verdict)


def _message(
    name: str, generation: int, missing: list[int], rank: int, timeout: timedelta, metrics: TrainingMetrics | None
) -> str:
    who = f"Rank {missing[0]}" if len(missing) == 1 else "Ranks " + ", ".join(map(str, missing))
    job = f"job '{metrics.job}', " if metrics is not None else ""
    text = (
        f"{who} failed to pass monitored barrier '{name}' in {timeout.total_seconds() * 1000:.0f} ms"
        f" ({job}call {generation})"
    )
    if rank in missing:
        text += f"; this rank ({rank}) arrived after the others stopped waiting"
    return text


def _rank_and_world(rank: int | None, world_size: int | None, metrics: TrainingMetrics | None) -> tuple[int, int]:
    if metrics is not None:
        return (metrics.rank if rank is None else rank), (metrics.world_size if world_size is None else world_size)
    import torch.distributed as dist

    if not dist.is_initialized():
        raise ValueError("give rank and world_size (or metrics), or initialize the default process group first")
    return (dist.get_rank() if rank is None else rank), (dist.get_world_size() if world_size is None else world_size)


def _default_store() -> Store:
    import torch.distributed as dist

    if not dist.is_initialized():
        raise ValueError("give the store (a TCPStore or FileStore), or initialize the default process group first")
    store: Store = dist.distributed_c10d._get_default_store()  # torch exposes the group's store only here
    return store
