"""Turn a MetricFrame into stored series: labels computed once per entity set, values taken as whole arrays.

Stored series carry the same names and labels as /metrics (pod attribution as its own info series, never as
GPU
labels, so series stay stable), so a PromQL query reads the same against the embedded store, Prometheus or VM.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from gpufleet.telemetry.blanks import valid_mask
from gpufleet.telemetry.exposition import (
    POD_INFO_METRIC,
    ExpositionConfig,
    attribution_labels,
    gpu_identity_labels,
    gpu_series_labels,
    ib_port_labels,
)
from gpufleet.telemetry.fields import load_clock_events
from gpufleet.telemetry.frame import MetricFrame

Labels = dict[str, str]


@dataclass(slots=True)
class FrameLayout:
    """Labels of every dense value of a frame: GPU matrix rows first, then the IB matrix, both flattened."""

    key: tuple[int, int, int]
    dense_labels: list[Labels]
    dense_kinds: list[str]  # prom type per dense series (counter or gauge)


def _with_name(name: str, items: list[tuple[str, str]]) -> Labels:
    labels = {"__name__": name}
    labels.update(items)
    return labels


class FrameSeries:
    """Maps frames to (labels, value) series; keeps the dense part's labels cached per entity set."""

    def __init__(self, config: ExpositionConfig | None = None) -> None:
        # Stored series never carry pod labels: attribution is the separate info series.
        base = config or ExpositionConfig()
        self.config = base.model_copy(update={"attribution": "info"})
        self._layout: FrameLayout | None = None

    def layout(self, frame: MetricFrame) -> FrameLayout:
        key = (id(frame), frame.labels_version, id(frame.catalog))
        if self._layout is not None and self._layout.key == key:
            return self._layout
        labels: list[Labels] = []
        kinds: list[str] = []
        per_entity = [gpu_series_labels(frame, i, self.config) for i in range(len(frame.entities))]
        for field in frame.gpu_fields:
            for items in per_entity:
                labels.append(_with_name(field.name, items))
                kinds.append(field.prom_type)
        per_port = [ib_port_labels(p) for p in frame.ib_ports]
        for field in frame.ib_fields:
            for items in per_port:
                labels.append(_with_name(field.name, items))
                kinds.append(field.prom_type)
        self._layout = FrameLayout(key, labels, kinds)
        return self._layout

    @staticmethod
    def dense_values(frame: MetricFrame) -> np.ndarray:
        """All dense values in layout order (a new flat array; blanks become NaN)."""
        flat = np.concatenate([frame.values.ravel(), frame.ib_values.ravel()])
        return np.where(valid_mask(flat), flat, np.nan)

    def sparse(self, frame: MetricFrame) -> Iterator[tuple[Labels, float, str]]:
        """The labelled counts, pod info, plain gauges and histograms of this tick: (labels, value, prom
        type)."""
        cfg = self.config
        window = ("window_size_in_ms", str(frame.window_ms))
        names = {f.name for f in frame.catalog.fields}
        if "DCGM_EXP_CLOCK_EVENTS_COUNT" in names:
            for k, event in enumerate(load_clock_events()):
                row = frame.clock_events[k]
                for i in np.flatnonzero(valid_mask(row) & (row != 0)).tolist():
                    extra = [("clock_event", event.name), window]
                    items = gpu_series_labels(frame, i, cfg, extra)
                    yield _with_name("DCGM_EXP_CLOCK_EVENTS_COUNT", items), float(row[i]), "counter"
        if "DCGM_EXP_XID_ERRORS_COUNT" in names:
            for xid, row in sorted(frame.xid_counts.items()):
                for i in np.flatnonzero(valid_mask(row) & (row != 0)).tolist():
                    items = gpu_series_labels(frame, i, cfg, [window, ("xid", str(xid))])
                    yield _with_name("DCGM_EXP_XID_ERRORS_COUNT", items), float(row[i]), "counter"
        for i, entity in enumerate(frame.entities):
            attrs = attribution_labels(frame, i, cfg)
            if attrs:
                info = [*gpu_identity_labels(entity, cfg), *sorted(attrs)]
                yield _with_name(POD_INFO_METRIC, info), 1.0, "gauge"
        for (name, gauge_labels), value in frame.gauges.items():
            if value == value:
                yield _with_name(name, list(gauge_labels)), value, "gauge"
        for (name, hist_labels), hist in frame.histograms.items():
            pairs = list(hist_labels)
            for bound, count in zip(hist.bounds, hist.bucket_counts.tolist(), strict=True):
                yield (
                    _with_name(f"{name}_bucket", [*pairs, ("le", repr(float(bound)))]),
                    float(count),
                    "counter",
                )
            yield _with_name(f"{name}_bucket", [*pairs, ("le", "+Inf")]), float(hist.count), "counter"
            yield _with_name(f"{name}_sum", pairs), hist.sum, "counter"
            yield _with_name(f"{name}_count", pairs), float(hist.count), "counter"

    def all_samples(self, frame: MetricFrame) -> Iterator[tuple[Labels, float]]:
        """Every valid (labels, value) of the frame, dense and sparse."""
        lay = self.layout(frame)
        values = self.dense_values(frame)
        for i in np.flatnonzero(~np.isnan(values)).tolist():
            yield lay.dense_labels[i], float(values[i])
        for labels, value, _kind in self.sparse(frame):
            yield labels, value
