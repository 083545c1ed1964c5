"""Turn a MetricFrame into stored series: labels computed once per entity set, values taken as whole arrays.

Stored series carry the same names and labels as /metrics (pod attribution as its own info series, never as
GPU
labels, so series stay stable: one gpufleet_gpu_pod_info per pod and gpufleet_gpu_job_info per Slurm job using a GPU,
and the per-workload gpufleet_workload_gpu_* series within the same budget), so a PromQL query reads the same against
the embedded store, Prometheus or VM.
The exception is an AMD or Gaudi device: /metrics names it as its vendor's exporter does, the store keeps the
canonical (dcgm-exporter) names for every vendor, which is what the control plane's queries read.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpufleet.catalog.clock_events import load_clock_events
from gpufleet.telemetry.dcgm_blanks import valid_mask
from gpufleet.telemetry.exposition.config import ExpositionConfig
from gpufleet.telemetry.exposition.dcgm import (
    JOB_INFO_METRIC,
    JOB_LABEL,
    POD_INFO_METRIC,
    gpu_identity_labels,
    gpu_series_labels,
    holder_info_labels,
    ib_port_labels,
)
from gpufleet.telemetry.exposition.workload import WorkloadLayout, job_holders, pod_holders, workload_layout
from gpufleet.telemetry.frame import GpuEntity, MetricFrame

Labels = dict[str, str]
SparseKey = tuple[Any, ...]


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
        self._workload: tuple[tuple[int, int, int], WorkloadLayout | None] | None = None

    def _identity(self, entity: GpuEntity) -> list[tuple[str, str]]:
        return gpu_identity_labels(entity, self.config)

    def workload(self, frame: MetricFrame) -> WorkloadLayout | None:
        """The per-workload attribution series' layout for the frame's label set (None: no device has shares)."""
        key = (id(frame), frame.labels_version, id(frame.catalog))
        if self._workload is None or self._workload[0] != key:
            self._workload = (key, workload_layout(frame, self.config, self._identity))
        return self._workload[1]

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

    def sparse_entries(self, frame: MetricFrame) -> list[tuple[SparseKey, float, str]]:
        """The labelled counts, pod info, plain gauges and histograms of this tick as (key, value, prom type).

        A key names a series within the current entity set without building its labels; `sparse_labels` turns
        it into labels, so a store can cache key -> series id and skip label work on every tick.
        """
        out: list[tuple[SparseKey, float, str]] = []
        # the windowed counts are stored as the catalog types them (gauges: they fall as samples leave the window)
        kinds = {f.name: f.prom_type for f in frame.catalog.fields}
        if "DCGM_EXP_CLOCK_EVENTS_COUNT" in kinds:
            kind = kinds["DCGM_EXP_CLOCK_EVENTS_COUNT"]
            events = frame.clock_events
            rows, cols = np.nonzero(valid_mask(events) & (events != 0))
            for k, i in zip(rows.tolist(), cols.tolist(), strict=True):
                out.append((("clock", k, i), float(events[k, i]), kind))
        if "DCGM_EXP_XID_ERRORS_COUNT" in kinds:
            kind = kinds["DCGM_EXP_XID_ERRORS_COUNT"]
            for xid, row in sorted(frame.xid_counts.items()):
                for i in np.flatnonzero(valid_mask(row) & (row != 0)).tolist():
                    out.append((("xid", xid, i), float(row[i]), kind))
        for i in range(len(frame.entities)):
            for attr in pod_holders(frame, i):
                out.append((("pod", i, attr), 1.0, "gauge"))
            for job in job_holders(frame, i):
                out.append((("job", i, job), 1.0, "gauge"))
        workload = self.workload(frame)
        if workload is not None:
            tick = workload.tick(frame)
            for series, value in tick.samples:
                out.append((("workload", workload.generation, series.uid), value, "gauge"))
            for name, count in workload.node_values(tick):
                out.append((("attribution", name), float(count), "gauge"))
        for (name, gauge_labels), value in frame.gauges.items():
            if value == value:
                out.append((("gauge", name, gauge_labels), value, "gauge"))
        for (name, hist_labels), hist in frame.histograms.items():
            for bound, count in zip(hist.bounds, hist.bucket_counts.tolist(), strict=True):
                out.append((("hist", name, hist_labels, "bucket", bound), float(count), "counter"))
            out.append((("hist", name, hist_labels, "inf", 0.0), float(hist.count), "counter"))
            out.append((("hist", name, hist_labels, "sum", 0.0), hist.sum, "counter"))
            out.append((("hist", name, hist_labels, "count", 0.0), float(hist.count), "counter"))
        return out

    def sparse_labels(self, frame: MetricFrame, key: SparseKey) -> Labels:
        cfg = self.config
        window = ("window_size_in_ms", str(frame.window_ms))
        kind = key[0]
        if kind == "clock":
            _, k, i = key
            extra = [("clock_event", load_clock_events()[k].name), window]
            return _with_name("DCGM_EXP_CLOCK_EVENTS_COUNT", gpu_series_labels(frame, i, cfg, extra))
        if kind == "xid":
            _, xid, i = key
            extra = [window, ("xid", str(xid))]
            return _with_name("DCGM_EXP_XID_ERRORS_COUNT", gpu_series_labels(frame, i, cfg, extra))
        if kind == "pod":
            _, i, attr = key
            attrs = sorted(holder_info_labels(attr, cfg))
            return _with_name(POD_INFO_METRIC, [*gpu_identity_labels(frame.entities[i], cfg), *attrs])
        if kind == "job":
            _, i, job = key
            return _with_name(JOB_INFO_METRIC, [*gpu_identity_labels(frame.entities[i], cfg), (JOB_LABEL, job)])
        if kind == "workload":
            _, generation, uid = key
            workload = self.workload(frame)
            if workload is None or workload.generation != generation:
                raise KeyError(f"attribution series {key!r} belongs to an earlier label set")
            series = workload.series[uid]
            return _with_name(series.family, series.labels)
        if kind == "attribution":
            return {"__name__": key[1]}
        if kind == "gauge":
            return _with_name(key[1], list(key[2]))
        _, name, pairs, part, bound = key
        if part == "bucket":
            return _with_name(f"{name}_bucket", [*pairs, ("le", repr(float(bound)))])
        if part == "inf":
            return _with_name(f"{name}_bucket", [*pairs, ("le", "+Inf")])
        return _with_name(f"{name}_{part}", list(pairs))

    def sparse(self, frame: MetricFrame) -> Iterator[tuple[Labels, float, str]]:
        """The sparse part with labels: (labels, value, prom type)."""
        for key, value, kind in self.sparse_entries(frame):
            yield self.sparse_labels(frame, key), value, kind

    def all_samples(self, frame: MetricFrame) -> Iterator[tuple[Labels, float]]:
        """Every valid (labels, value) of the frame, dense and sparse."""
        lay = self.layout(frame)
        values = self.dense_values(frame)
        for i in np.flatnonzero(~np.isnan(values)).tolist():
            yield lay.dense_labels[i], float(values[i])
        for labels, value, _kind in self.sparse(frame):
            yield labels, value
