"""Time-slotted value tiers: the in-memory ring (current and previous chunk) in front of durable chunks.

A tier has a resolution (seconds per slot) and a chunk length (slots per chunk). Values live in a dense
(series, slots) float64 matrix per chunk, NaN where nothing was written. Writing a whole tick is one
fancy-indexed
assignment, which is what makes ingest cheap; sealing a chunk writes one compressed blob per series that had
data.
"""

from __future__ import annotations

import math

import numpy as np

from gpufleet.telemetry.store.history import History


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
        self.prev_dirty = False
        self.dropped = 0  # samples older than the ring that could not be placed

    def grow(self, capacity: int) -> None:
        if capacity <= self.capacity:
            return
        for name in ("cur", "prev"):
            old = getattr(self, name)
            new = np.full((capacity, self.chunk_slots), np.nan)
            new[: old.shape[0]] = old
            setattr(self, name, new)
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

    def _persist(self, chunk: int, matrix: np.ndarray) -> None:
        has_data = ~np.isnan(matrix).all(axis=1)
        ids = np.flatnonzero(has_data)
        if ids.size:
            self.history.write_chunks(self.index, chunk, ids.tolist(), matrix[ids])

    def _seal(self) -> None:
        assert self.cur_chunk is not None
        self._persist(self.cur_chunk, self.cur)
        self.prev, self.cur = self.cur, self.prev
        self.prev_chunk, self.prev_dirty = self.cur_chunk, False
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
        elif chunk == self.prev_chunk:
            target, self.prev_dirty = self.prev, True
        else:
            self.dropped += int(np.count_nonzero(~np.isnan(values)))
            return
        present = ~np.isnan(values)
        if present.all():
            target[ids, offset] = values
        else:
            target[ids[present], offset] = values[present]

    def flush(self) -> None:
        """Persist the open chunk (and the previous one if late samples changed it)."""
        if self.cur_chunk is not None:
            self._persist(self.cur_chunk, self.cur)
        if self.prev_dirty and self.prev_chunk is not None:
            self._persist(self.prev_chunk, self.prev)
            self.prev_dirty = False
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

    def flush(self) -> None:
        self._emit()  # the open bucket's partial value; replaced when the bucket completes
        self.tier.flush()
