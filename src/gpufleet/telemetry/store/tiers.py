"""Time-slotted value tiers: the in-memory ring (current and previous chunk) in front of durable chunks.

A tier has a resolution (seconds per slot) and a chunk length (slots per chunk). Values live in a dense
(series, slots) float64 matrix per chunk, NaN where nothing was written. Writing a whole tick is one
fancy-indexed assignment, which is what makes ingest cheap. A flush stores the open chunk's new slots as one delta
for all series; sealing a chunk writes one compressed blob per series that had data, at the next flush.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gpufleet.telemetry.store.history import History


@dataclass(slots=True)
class FlushWork:
    """What one flush of a tier writes, taken under the store's lock and written outside it."""

    tier: Tier
    delta: tuple[int, int, np.ndarray, np.ndarray] | None = None  # chunk, first slot, series ids, their values
    sealed: tuple[int, np.ndarray] | None = None  # a sealed chunk and its matrix, written series by series

    def write(self) -> None:
        self.tier.write_flush(self)


class Tier:
    def __init__(self, index: int, resolution_s: float, chunk_slots: int, retention_s: float, history: History) -> None:
        self.index = index
        self.resolution_s = resolution_s
        self.chunk_slots = chunk_slots
        self.retention_chunks = max(1, math.ceil(retention_s / (resolution_s * chunk_slots)))
        self.history = history
        self.capacity = 0
        self.cur_chunk: int | None = None
        self.cur = np.empty((0, chunk_slots))
        self.prev_chunk: int | None = None
        self.prev = np.empty((0, chunk_slots))
        self.prev_unwritten = False  # the previous chunk holds values its stored series chunks do not
        self.dropped = 0  # samples older than the ring that could not be placed
        self._since: tuple[int, int] | None = None  # offsets of the open chunk written since its last delta
        self._prev_held = False  # a flush is writing `prev` outside the lock: a seal must not reuse its array
        for chunk in self.history.pending_chunks(index):  # deltas a stop left: into their chunks
            self._fold(chunk)

    def grow(self, capacity: int) -> None:
        if capacity <= self.capacity:
            return
        for name in ("cur", "prev"):
            old = getattr(self, name)
            new = np.full((capacity, self.chunk_slots), np.nan)
            new[: old.shape[0]] = old
            setattr(self, name, new)
        self._prev_held = False  # `prev` is a new array now; the flush keeps the old one
        self.capacity = capacity

    def slot_of(self, timestamp: float) -> int:
        return math.floor(timestamp / self.resolution_s)

    def _open(self, chunk: int) -> None:
        self.cur_chunk = chunk
        self.cur.fill(np.nan)
        # After a restart the chunk may already hold data on disk: start from it so a rewrite loses nothing.
        for sid, row in self.history.read_chunk_rows(self.index, chunk, self.chunk_slots).items():
            if sid < self.capacity:
                self.cur[sid] = row

    def _fold(self, chunk: int) -> None:
        """A chunk's stored series with its deltas applied, written back as series chunks; the deltas dropped."""
        rows = {
            sid: row.copy() for sid, row in self.history.read_chunk_rows(self.index, chunk, self.chunk_slots).items()
        }
        for first, ids, block in self.history.read_deltas(self.index, chunk):
            width = min(block.shape[1], self.chunk_slots - first)
            for k, sid in enumerate(ids.tolist()):
                row = rows.get(sid)
                if row is None:
                    row = rows[sid] = np.full(self.chunk_slots, np.nan)
                row[first : first + width] = block[k, :width]
        if rows:
            order = sorted(rows)
            self.history.write_chunks(self.index, chunk, order, np.stack([rows[sid] for sid in order]))
        self.history.drop_deltas(self.index, chunk)
        self.history.commit()

    def _write_sealed(self, chunk: int, matrix: np.ndarray) -> None:
        has_data = ~np.isnan(matrix).all(axis=1)
        ids = np.flatnonzero(has_data)
        if ids.size:
            self.history.write_chunks(self.index, chunk, ids.tolist(), matrix[ids])
        self.history.drop_deltas(self.index, chunk)

    def _seal(self) -> None:
        """The open chunk becomes the previous one; its series are written at the next flush (once, whole)."""
        assert self.cur_chunk is not None
        if self.prev_unwritten and self.prev_chunk is not None:
            self._write_sealed(self.prev_chunk, self.prev)  # no flush came round in a whole chunk: write it now
        spare = np.full_like(self.prev, np.nan) if self._prev_held else self.prev
        self.prev, self.cur = self.cur, spare
        self.prev_chunk, self.prev_unwritten, self._prev_held = self.cur_chunk, True, False
        self._since = None  # its last slots are written with it
        self.history.drop_before(self.index, self.cur_chunk - self.retention_chunks + 1)
        self.history.commit()

    def write(self, ids: np.ndarray, slot: int, values: np.ndarray) -> None:
        """Write one slot for several series; NaN values leave the slot as it was."""
        chunk, offset = divmod(slot, self.chunk_slots)
        if self.cur_chunk is None:
            self._open(chunk)
        elif chunk > self.cur_chunk:
            self._seal()
            self._open(chunk)
        if chunk == self.cur_chunk:
            target = self.cur
            since = self._since
            self._since = (offset, offset) if since is None else (min(since[0], offset), max(since[1], offset))
        elif chunk == self.prev_chunk:
            target, self.prev_unwritten = self.prev, True
        else:
            self.dropped += int(np.count_nonzero(~np.isnan(values)))
            return
        present = ~np.isnan(values)
        if present.all():
            target[ids, offset] = values
        else:
            target[ids[present], offset] = values[present]

    def take_flush(self) -> FlushWork:
        """Under the store's lock: the open chunk's slots written since the last flush (a copy), and the previous
        chunk if it is not yet stored whole. `write_flush` then writes them without the lock."""
        work = FlushWork(self)
        if self._since is not None and self.cur_chunk is not None:
            lo, hi = self._since
            block = self.cur[:, lo : hi + 1]
            ids = np.flatnonzero(~np.isnan(block).all(axis=1))
            if ids.size:
                work.delta = (self.cur_chunk, lo, ids, block[ids])
            self._since = None
        if self.prev_unwritten and self.prev_chunk is not None:
            work.sealed = (self.prev_chunk, self.prev)
            self.prev_unwritten, self._prev_held = False, True
        return work

    def write_flush(self, work: FlushWork) -> None:
        if work.delta is not None:
            self.history.write_delta(self.index, *work.delta)
        if work.sealed is not None:
            self._write_sealed(*work.sealed)
            self._prev_held = False
        self.history.commit()

    def read(self, series_id: int, first_slot: int, last_slot: int) -> np.ndarray:
        """Dense values of one series for slots first..last inclusive (NaN where nothing is stored)."""
        out = np.full(last_slot - first_slot + 1, np.nan)
        cs = self.chunk_slots
        first_chunk, last_chunk = first_slot // cs, last_slot // cs
        from_disk = self.history.read_series_chunks(self.index, series_id, first_chunk, last_chunk, cs)
        for chunk in range(first_chunk, last_chunk + 1):
            if chunk == self.cur_chunk and series_id < self.capacity:
                row = self.cur[series_id]
            elif chunk == self.prev_chunk and series_id < self.capacity:
                row = self.prev[series_id]
            else:
                stored = from_disk.get(chunk)
                if stored is None:
                    continue
                row = stored
            lo = max(first_slot, chunk * cs)
            hi = min(last_slot, chunk * cs + cs - 1)
            out[lo - first_slot : hi - first_slot + 1] = row[lo - chunk * cs : hi - chunk * cs + 1]
        return out

    def memory_bytes(self) -> int:
        return int(self.cur.nbytes + self.prev.nbytes)


class Rollup:
    """Downsamples raw writes into a coarser tier: the average for gauges, the last value for counters."""

    def __init__(self, tier: Tier) -> None:
        self.tier = tier
        self.bucket: int | None = None
        self.sum = np.zeros(0)
        self.count = np.zeros(0)
        self.last = np.zeros(0)
        self.is_counter = np.zeros(0, dtype=bool)

    def grow(self, capacity: int, is_counter: np.ndarray) -> None:
        old = self.sum.size
        if capacity > old:
            self.sum = np.concatenate([self.sum, np.zeros(capacity - old)])
            self.count = np.concatenate([self.count, np.zeros(capacity - old)])
            self.last = np.concatenate([self.last, np.full(capacity - old, np.nan)])
        self.is_counter = is_counter
        self.tier.grow(capacity)

    def _emit(self) -> None:
        if self.bucket is None:
            return
        ids = np.flatnonzero(self.count > 0)
        if ids.size == 0:
            return
        avg = self.sum[ids] / self.count[ids]
        values = np.where(self.is_counter[ids], self.last[ids], avg)
        self.tier.write(ids, self.bucket, values)

    def add(self, ids: np.ndarray, timestamp: float, values: np.ndarray) -> None:
        bucket = self.tier.slot_of(timestamp)
        if self.bucket is not None and bucket < self.bucket:
            self.tier.write(ids, bucket, values)  # late sample: best effort, straight into its bucket
            return
        if bucket != self.bucket:
            self._emit()
            self.sum.fill(0.0)
            self.count.fill(0.0)
            self.bucket = bucket
        present = ~np.isnan(values)
        if not present.all():
            ids, values = ids[present], values[present]
        self.sum[ids] += values
        self.count[ids] += 1
        self.last[ids] = values

    def take_flush(self) -> FlushWork:
        self._emit()  # the open bucket's partial value; replaced when the bucket completes
        return self.tier.take_flush()
