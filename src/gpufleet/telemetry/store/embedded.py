"""The embedded metric store: in-memory rings plus durable, downsampled history in one SQLite file.

Tier 0 keeps samples at `resolution_s` (1 s) for `raw_retention_s` (a day); tier 1 keeps `rollup_s` (1 min)
averages
(last value for counters) for `rollup_retention_s` (30 days). The two most recent chunks of each tier stay in
memory;
`flush()` (call it every minute or so, and on shutdown) makes the open chunks durable.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from gpufleet.locks import ordered_lock
from gpufleet.telemetry.exposition.config import ExpositionConfig
from gpufleet.telemetry.frame import MetricFrame
from gpufleet.telemetry.store.frame_series import FrameSeries
from gpufleet.telemetry.store.history import History, labels_key
from gpufleet.telemetry.store.query import (
    AggOp,
    InstantSample,
    RangeSeries,
    Selector,
    aggregate_series,
    as_selector,
    check_op,
)
from gpufleet.telemetry.store.tiers import Rollup, Tier

DB_NAME = "metrics.sqlite"

log = logging.getLogger("gpufleet.telemetry")

F = TypeVar("F", bound=Callable[..., Any])


def _locked(method: F) -> F:
    """The collect loop writes while API handlers read: one re-entrant lock per store serializes them."""

    @functools.wraps(method)
    def wrapper(self: EmbeddedStore, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return method(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


class StoreConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    resolution_s: float = Field(1.0, gt=0)
    chunk_slots: int = Field(600, ge=10)  # 10 min of 1 s samples per chunk
    raw_retention_s: float = Field(86_400, gt=0)
    rollup_s: float = Field(60.0, gt=0)
    rollup_chunk_slots: int = Field(360, ge=10)  # 6 h of 1 min samples per chunk
    rollup_retention_s: float = Field(30 * 86_400, gt=0)
    lookback_s: float = Field(300.0, gt=0)  # how far back a query looks for the latest sample, as in PromQL


LAYOUT = ("resolution_s", "chunk_slots", "rollup_s", "rollup_chunk_slots")  # what stored chunks depend on


class EmbeddedStore:
    """Series registry, tiers and the query API. `data_dir=None` keeps history in memory only."""

    def __init__(
        self,
        data_dir: Path | None = None,
        config: StoreConfig | None = None,
        exposition: ExpositionConfig | None = None,
    ) -> None:
        self._lock = ordered_lock("metrics")
        self._flushing = threading.Lock()  # one flush at a time; taken before the store's lock, never inside it
        self.history = History(data_dir / DB_NAME if data_dir is not None else None)
        self.config = self._layout(config or StoreConfig())
        cfg = self.config
        self.raw = Tier(0, cfg.resolution_s, cfg.chunk_slots, cfg.raw_retention_s, self.history)
        self.rollup = Rollup(Tier(1, cfg.rollup_s, cfg.rollup_chunk_slots, cfg.rollup_retention_s, self.history))
        self.frames = FrameSeries(exposition)
        self._labels: list[dict[str, str]] = []
        self._kinds: list[str] = []
        self._ids: dict[str, int] = {}
        self._by_name: dict[str, list[int]] = {}
        self._dense_ids: tuple[tuple[int, int, int], np.ndarray] | None = None
        self._sparse_ids: dict[tuple[Any, ...], int] = {}
        self.latest: float | None = None
        for sid, labels, kind in self.history.load_series():
            self._register(sid, labels, kind)
        stored_latest = self.history.get_meta("latest")
        self.latest = float(stored_latest) if stored_latest else None
        self._resize()

    def _layout(self, wanted: StoreConfig) -> StoreConfig:
        """Slots and chunks as the data directory was made with: chunk numbers and sizes depend on them, so a
        store opened with another layout reads what is there in its own (and says so); retention is the caller's."""
        stored = self.history.get_meta("layout")
        if stored is None:
            if self.history.has_series():  # made before the layout was kept: the defaults of the time
                legacy = StoreConfig()
                stored = json.dumps({k: getattr(legacy, k) for k in LAYOUT})
            else:
                stored = json.dumps({k: getattr(wanted, k) for k in LAYOUT})
            self.history.set_meta("layout", stored)
            self.history.commit()
        layout = json.loads(stored)
        if any(getattr(wanted, k) != layout[k] for k in LAYOUT):
            log.info("metric history keeps the layout it was made with: %s", stored)
        return wanted.model_copy(update=layout)

    # -- registry --------------------------------------------------------------------------------------------
    def _register(self, sid: int, labels: dict[str, str], kind: str, key: str | None = None) -> None:
        self._labels.append(labels)
        self._kinds.append(kind)
        self._ids[labels_key(labels) if key is None else key] = sid
        self._by_name.setdefault(labels.get("__name__", ""), []).append(sid)

    def _resize(self) -> None:
        need = len(self._labels)
        if need <= self.raw.capacity:
            return
        capacity = max(64, 1 << math.ceil(math.log2(max(need, 1))))
        self.raw.grow(capacity)
        is_counter = np.zeros(capacity, dtype=bool)
        is_counter[:need] = [k == "counter" for k in self._kinds]
        self.rollup.grow(capacity, is_counter)

    @_locked
    def series_id(self, labels: Mapping[str, str], kind: str = "gauge") -> int:
        """The id of a series (labels include __name__), registering it on first sight."""
        key = labels_key(labels)
        sid = self._ids.get(key)
        if sid is None:
            sid = len(self._labels)
            self.history.add_series(sid, labels, kind)
            self._register(sid, dict(labels), kind)
            if sid >= self.raw.capacity:
                self._resize()
            elif kind == "counter":
                self.rollup.is_counter[sid] = True
        return sid

    @_locked
    def series_ids(self, many: Sequence[Mapping[str, str]], kind: str = "gauge") -> list[int]:
        """The ids of many series, registering the new ones in one write (a thousand nodes' first report is
        hundreds of thousands of series: one statement each took seconds of the control loop)."""
        out: list[int] = []
        new: list[tuple[int, str]] = []
        for labels in many:
            key = labels_key(labels)
            sid = self._ids.get(key)
            if sid is None:
                sid = len(self._labels)
                self._register(sid, dict(labels), kind, key)
                new.append((sid, key))
            out.append(sid)
        if new:
            self.history.add_many_series([(sid, key, kind) for sid, key in new])
            self._resize()
            if kind == "counter":
                self.rollup.is_counter[[sid for sid, _ in new]] = True
        return out

    @property
    def series_count(self) -> int:
        return len(self._labels)

    # -- ingest ----------------------------------------------------------------------------------------------
    @_locked
    def write_ids(self, ids: np.ndarray, timestamp: float, values: np.ndarray) -> None:
        """Write one value per series id at one timestamp (NaN = no sample). The fast path."""
        self.raw.write(ids, self.raw.slot_of(timestamp), values)
        self.rollup.add(ids, timestamp, values)
        if self.latest is None or timestamp > self.latest:
            self.latest = timestamp

    @_locked
    def write(self, labels: Mapping[str, str], timestamp: float, value: float, kind: str = "gauge") -> None:
        sid = self.series_id(labels, kind)
        self.write_ids(np.array([sid]), timestamp, np.array([float(value)]))

    @_locked
    def ingest(self, frame: MetricFrame, timestamp: float | None = None) -> int:
        """Store every value of a frame; returns the number of samples written."""
        ts = frame.timestamp if timestamp is None else timestamp
        lay = self.frames.layout(frame)
        if self._dense_ids is None or self._dense_ids[0] != lay.key:
            pairs = zip(lay.dense_labels, lay.dense_kinds, strict=True)
            dense_ids = np.array([self.series_id(lab, kind) for lab, kind in pairs], dtype=np.int64)
            self._dense_ids = (lay.key, dense_ids)
            self._sparse_ids = {}
        dense = self.frames.dense_values(frame)
        sparse = self.frames.sparse_entries(frame)
        if sparse:
            extra_ids = np.empty(len(sparse), dtype=np.int64)
            for n, (key, _value, kind) in enumerate(sparse):
                sid = self._sparse_ids.get(key)
                if sid is None:
                    sid = self._sparse_ids[key] = self.series_id(self.frames.sparse_labels(frame, key), kind)
                extra_ids[n] = sid
            ids = np.concatenate([self._dense_ids[1], extra_ids])
            values = np.concatenate([dense, np.fromiter((v for _k, v, _t in sparse), np.float64, len(sparse))])
        else:
            ids, values = self._dense_ids[1], dense
        self.write_ids(ids, ts, values)
        return int(np.count_nonzero(~np.isnan(values)))

    def flush(self) -> None:
        """Make the ring durable. What to write is taken under the store's lock (a copy of the open chunks' new
        slots), the compressing and writing are done outside it, so writers and readers wait milliseconds, not the
        seconds a sealed chunk of a large fleet takes to write series by series."""
        with self._flushing:
            with self._lock:
                works = [self.rollup.take_flush(), self.raw.take_flush()]
                latest = self.latest
            for work in works:
                work.write()
            if latest is not None:
                self.history.set_meta("latest", repr(latest))
            self.history.commit()

    def close(self) -> None:
        self.flush()
        with self._lock:
            self.history.close()

    # -- queries ---------------------------------------------------------------------------------------------
    def match(self, selector: Selector | str) -> list[int]:
        sel = as_selector(selector)
        return [sid for sid in self._by_name.get(sel.name, []) if sel.matches(self._labels[sid])]

    def labels_of(self, sid: int) -> dict[str, str]:
        return dict(self._labels[sid])

    def _tier_for(self, start: float, step: float) -> Tier:
        raw_horizon = (self.latest or start) - self.config.raw_retention_s
        if step < self.config.rollup_s and start >= raw_horizon:
            return self.raw
        return self.rollup.tier

    def _grid(self, start: float, end: float, step: float) -> np.ndarray:
        if step <= 0:
            raise ValueError("step must be positive")
        n = math.floor((end - start) / step + 1e-9) + 1
        return start + step * np.arange(max(n, 0))

    def _evaluate(self, tier: Tier, sid: int, grid: np.ndarray) -> np.ndarray:
        """The latest value at or before each grid time, within the lookback window (PromQL's rule)."""
        if grid.size == 0:
            return np.empty(0)
        lookback = max(1, math.ceil(self.config.lookback_s / tier.resolution_s))
        slots = np.floor(grid / tier.resolution_s).astype(np.int64)
        first = int(slots[0]) - lookback
        dense = tier.read(sid, first, int(slots[-1]))
        positions = np.where(~np.isnan(dense), np.arange(dense.size), -1)
        latest_pos = np.maximum.accumulate(positions)
        at = slots - first
        found = latest_pos[at]
        ok = (found >= 0) & (at - found < lookback)
        return np.where(ok, dense[np.maximum(found, 0)], np.nan)

    def _range_all(self, selector: Selector | str, start: float, end: float, step: float) -> list[RangeSeries]:
        grid = self._grid(start, end, step)
        tier = self._tier_for(start, step)
        return [RangeSeries(self.labels_of(sid), grid, self._evaluate(tier, sid, grid)) for sid in self.match(selector)]

    @_locked
    def range(self, selector: Selector | str, start: float, end: float, step: float) -> list[RangeSeries]:
        out = []
        for series in self._range_all(selector, start, end, step):
            keep = ~np.isnan(series.values)
            if keep.any():
                out.append(RangeSeries(series.labels, series.timestamps[keep], series.values[keep]))
        return out

    @_locked
    def instant(self, selector: Selector | str, at: float | None = None) -> list[InstantSample]:
        when = self._now(at)
        if when is None:
            return []
        return [
            InstantSample(s.labels, when, float(s.values[-1]))
            for s in self.range(selector, when, when, self.config.resolution_s)
        ]

    def _now(self, at: float | None) -> float | None:
        return at if at is not None else self.latest

    @_locked
    def aggregate_range(
        self, op: AggOp, selector: Selector | str, by: Sequence[str], start: float, end: float, step: float
    ) -> list[RangeSeries]:
        check_op(op)
        return aggregate_series(op, self._range_all(selector, start, end, step), by)

    @_locked
    def aggregate_instant(
        self, op: AggOp, selector: Selector | str, by: Sequence[str], at: float | None = None
    ) -> list[InstantSample]:
        when = self._now(at)
        if when is None:
            return []
        result = self.aggregate_range(op, selector, by, when, when, self.config.resolution_s)
        return [InstantSample(s.labels, when, float(s.values[-1])) for s in result if s.values.size]

    # -- accounting ------------------------------------------------------------------------------------------
    def memory_bytes(self) -> int:
        """Bytes held by the in-memory rings and rollup accumulators (not SQLite's page cache)."""
        roll = self.rollup
        return self.raw.memory_bytes() + roll.tier.memory_bytes() + roll.sum.nbytes * 3
