"""How big a deployment gets: series, samples per second and storage from the field catalog (what the agent
exports per GPU, per InfiniBand port and per node), and control-plane replicas from the measured ingest capacity
of one `gpufleet server` (bench/fleet_ingest.py).

Given the node's sources (telemetry/field_sources.py: the NVIDIA agent's, or the twin's), only what they fill is
counted, as only a value is exported; without them, every switched-on field, an upper bound no node reaches."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gpufleet.telemetry.field_sources import POD_INFO, SOURCE_UP, SourceFields, exported
from gpufleet.telemetry.fields import FLEET, GPU, IB_PORT, NVLINK, PLAIN, FieldCatalog, load_field_catalog

# Prometheus' own figure for its TSDB after compression ("around 1-2 bytes per sample",
# prometheus.io/docs/prometheus/latest/storage/); the upper end, for labels that change.
PROMETHEUS_BYTES_PER_SAMPLE = 2.0
# Labelled GPU counters (clock events by reason, Xids by code) carry one series per value seen in their window:
# a healthy GPU shows a few reasons, a faulty one a few Xids.
LABELLED_SERIES_PER_GPU_FIELD = 3
# Per-node gpufleet series: a source-up gauge per source (nvml, kmsg, ib, host, when the sources are not given), and
# per job on the node its step gauges (one job per node is typical for training).
SOURCES_PER_NODE = 4
JOBS_PER_NODE = 1
# NVLink links of an NVSwitch-system GPU (H100/H200/B200 SXM, GB200: 18), each with its per-link series; a GPU
# without NVLink has none, so this is an upper bound as the NVLink counters are
NVLINKS_PER_GPU = 18
# Agents (one push a second each, with fault correlation and the embedded metric store) one core of `gpufleet server`
# takes: bench/fleet_ingest.py measured 0.20 cores for 256 nodes x 8 GPUs (1,280 nodes a core); 20% kept in hand.
NODES_PER_CORE = 1024
MIN_REPLICAS = 2  # one leads, one stands by: failover within seconds


@dataclass(frozen=True, slots=True)
class Sizing:
    nodes: int
    gpus_per_node: int
    ib_ports_per_node: int
    scrape_interval_s: float
    retention_days: float
    series_per_gpu: int
    series_per_ib_port: int
    series_per_node_other: int

    @property
    def series_per_node(self) -> int:
        return (
            self.gpus_per_node * self.series_per_gpu
            + self.ib_ports_per_node * self.series_per_ib_port
            + self.series_per_node_other
        )

    @property
    def active_series(self) -> int:
        return self.nodes * self.series_per_node

    @property
    def samples_per_s(self) -> float:
        return self.active_series / self.scrape_interval_s

    @property
    def bytes_per_day(self) -> float:
        return self.samples_per_s * 86_400 * PROMETHEUS_BYTES_PER_SAMPLE

    @property
    def retained_bytes(self) -> float:
        return self.bytes_per_day * self.retention_days

    @property
    def control_plane_cores(self) -> float:
        return self.nodes / NODES_PER_CORE

    @property
    def control_plane_replicas(self) -> int:
        """Replicas to run: each takes every agent's pushes it is sent, so enough that the rest carry the load
        when one fails (N+1), and never fewer than two."""
        return max(MIN_REPLICAS, math.ceil(self.control_plane_cores) + 1)

    def to_json(self) -> dict[str, float | int]:
        return {
            "nodes": self.nodes,
            "gpusPerNode": self.gpus_per_node,
            "ibPortsPerNode": self.ib_ports_per_node,
            "scrapeIntervalSeconds": self.scrape_interval_s,
            "seriesPerGpu": self.series_per_gpu,
            "seriesPerIbPort": self.series_per_ib_port,
            "seriesPerNode": self.series_per_node,
            "activeSeries": self.active_series,
            "samplesPerSecond": round(self.samples_per_s, 1),
            "storageBytesPerDay": round(self.bytes_per_day),
            "retentionDays": self.retention_days,
            "storageBytesRetained": round(self.retained_bytes),
            "controlPlaneCores": round(self.control_plane_cores, 2),
            "controlPlaneReplicas": self.control_plane_replicas,
        }


def series_counts(
    catalog: FieldCatalog | None = None, sources: Sequence[SourceFields] | None = None
) -> tuple[int, int, int]:
    """(series per GPU, per IB port, per node besides those) the agent exports: with `sources`, the switched-on
    fields they fill (still an upper bound: a GPU without NVLink has no NVLink counters); without, every
    switched-on field."""
    enabled = (catalog or load_field_catalog()).enabled()
    if sources is None:
        filled = frozenset({*(f.name for f in enabled), POD_INFO})
        sources_up = SOURCES_PER_NODE
    else:
        filled = exported(enabled, sources)
        sources_up = sum(1 for s in sources if s.reports_up)
    fields = FieldCatalog(tuple(f for f in enabled if f.name in filled))
    per_gpu = len(fields.gpu_value_fields()) + int(POD_INFO in filled)  # and the workload info series
    per_gpu += len(fields.scoped(FLEET))  # the vendor-neutral gpufleet_accelerator_* series, on by default
    per_gpu += LABELLED_SERIES_PER_GPU_FIELD * sum(1 for f in fields.scoped(GPU) if f.labels and not f.is_label)
    per_gpu += NVLINKS_PER_GPU * len(fields.scoped(NVLINK))  # one series per link and per-link field
    per_port = len(fields.scoped(IB_PORT))
    other = 0
    for f in fields.scoped(PLAIN):
        if "rank" in f.labels:  # one rank per GPU
            per_gpu += JOBS_PER_NODE
        elif f.name == SOURCE_UP:
            other += sources_up
        elif "job" in f.labels:
            other += JOBS_PER_NODE
        else:
            other += 1
    return per_gpu, per_port, other


def size(
    nodes: int,
    gpus_per_node: int = 8,
    ib_ports_per_node: int = 8,
    scrape_interval_s: float = 15.0,
    retention_days: float = 15.0,
    catalog: FieldCatalog | None = None,
    sources: Sequence[SourceFields] | None = None,
) -> Sizing:
    per_gpu, per_port, other = series_counts(catalog, sources)
    return Sizing(nodes, gpus_per_node, ib_ports_per_node, scrape_interval_s, retention_days, per_gpu, per_port, other)
