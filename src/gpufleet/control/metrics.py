"""The control plane's own series (per node and for the fleet), written to the configured metric store: the
embedded store by its fast path, or Prometheus / VictoriaMetrics by remote write, one request per turn of the loop.
The dashboard's history reads them back through the store's query API, whichever store it is."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import numpy as np

from gpufleet.errors import BackendError
from gpufleet.telemetry.store import EmbeddedStore, RangeSeries, RemoteStore, StoreConfig

log = logging.getLogger("gpufleet.control")

RESOLUTION_S = 5.0  # the loop records its series every 5 s of cluster time, per-GPU and per-port ones every 30 s
# The control plane's embedded store: slots of RESOLUTION_S, not 1 s (the ring is a dense matrix of series x slots
# in memory, and four fifths of it would stay empty), 10-minute raw chunks and hourly roll-up chunks.
PLANE_STORE = StoreConfig(resolution_s=RESOLUTION_S, chunk_slots=120, rollup_chunk_slots=60)

Sample = tuple[Mapping[str, str], float]


class MetricRecorder:
    def __init__(self, store: EmbeddedStore | RemoteStore) -> None:
        self.store = store
        self._ids: dict[tuple[tuple[str, str], ...], int] = {}
        self._matrix_ids: dict[tuple[str, tuple[str, ...], tuple[str, ...]], np.ndarray] = {}
        self._failing = False

    def record(self, now: float, samples: Sequence[Sample]) -> None:
        if not samples:
            return
        if isinstance(self.store, EmbeddedStore):
            ids = np.empty(len(samples), dtype=np.int64)
            unknown: dict[tuple[tuple[str, str], ...], list[int]] = {}  # new series -> where they go in `ids`
            for k, (labels, _) in enumerate(samples):
                key = tuple(sorted(labels.items()))
                sid = self._ids.get(key)
                if sid is None:
                    unknown.setdefault(key, []).append(k)
                else:
                    ids[k] = sid
            if unknown:  # registered together: a fleet's first turn names thousands
                for key, sid in zip(unknown, self.store.series_ids([dict(key) for key in unknown]), strict=True):
                    self._ids[key] = sid
                    ids[unknown[key]] = sid
            self.store.write_ids(ids, now, np.array([v for _, v in samples], dtype=np.float64))
            return
        try:
            self.store.write_series([(labels, [(value, round(now * 1000))]) for labels, value in samples])
        except BackendError as exc:  # the loop goes on; the history has a gap, said once
            if not self._failing:
                log.warning("%s; the fleet history will have a gap until it answers", exc.message)
            self._failing = True
        else:
            if self._failing:
                log.info("metric store answers again")
            self._failing = False

    def record_matrix(
        self,
        now: float,
        names: Sequence[str],
        node: str,
        gpus: Sequence[str],
        values: np.ndarray,
        label: str = "gpu",
    ) -> None:
        """One node's per-device series at once: `values[i, j]` is series `names[i]` of device `gpus[j]` (a GPU
        index, or a port with `label="port"`); NaN is unknown and not written."""
        values = values[:, : len(gpus)]
        if isinstance(self.store, EmbeddedStore):
            key = (node, tuple(names), tuple(gpus))
            ids = self._matrix_ids.get(key)
            if ids is None:
                many = [{"__name__": n, "node": node, label: g} for n in names for g in gpus]
                ids = np.array(self.store.series_ids(many), dtype=np.int64).reshape(len(names), len(gpus))
                self._matrix_ids[key] = ids
            known = ~np.isnan(values)
            self.store.write_ids(ids[known], now, values[known].astype(np.float64))
            return
        samples = [
            ({"__name__": n, "node": node, label: g}, float(values[i, j]))
            for i, n in enumerate(names)
            for j, g in enumerate(gpus)
            if not np.isnan(values[i, j])
        ]
        self.record(now, samples)

    def range(self, series: str, start: float, end: float, step: float) -> list[RangeSeries]:
        return self.store.range(series, start, end, step)

    def flush(self) -> None:
        self.store.flush()

    def close(self) -> None:
        self.store.close()
