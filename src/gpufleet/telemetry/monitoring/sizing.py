"""How big a deployment gets: series, samples per second and storage from the field catalog (what the agent
exports per GPU, per InfiniBand port and per node), and control-plane replicas from the measured ingest capacity
of one `gpufleet server` (bench/fleet_ingest.py).

Given the node's sources (telemetry/field_sources.py: the NVIDIA agent's, or the twin's), only what they fill is
counted, as only a value is exported; without them, every switched-on field, an upper bound no node reaches."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gpufleet.errors import UserError
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
# takes: bench/fleet_ingest.py measured 0.53 cores for 1,024 nodes x 8 GPUs pushing 893 times a second (about
# 1,700 nodes a core); 40% kept in hand.
NODES_PER_CORE = 1024
MIN_REPLICAS = 2  # one leads, one stands by: failover within seconds


@dataclass(frozen=True, slots=True)
class BmcSensors:
    """The sensors a node's BMC reports, for its per-sensor series (agent/bmc.py: a speed and a state per fan, a state
    per power supply, a reading and a state per temperature sensor, one series per power reading). The default is an
    assumption, not a measurement: a 2U GPU server (4 GPUs) with 6 system fans, 2 power supplies, 20 temperature
    sensors (inlet, exhaust, CPUs, DIMM banks, voltage regulators, supplies, the PCIe/GPU zone) and 3 power readings
    (each supply's output and the system's consumption); an 8-GPU HGX chassis has several times the fans and supplies,
    so give its own with `deploy size --bmc-sensors`."""

    fans: int = 6
    psus: int = 2
    temperatures: int = 20
    power_readings: int = 3

    def series(self, field: str) -> int:
        """How many series of one BMC field the node exports (a BMC reads its fans in RPM or, as HPE's iLO, in
        percent: counted once, under RPM)."""
        return {
            "gpufleet_node_fan_speed_rpm": self.fans,
            "gpufleet_node_fan_speed_ratio": 0,
            "gpufleet_node_temperature_celsius": self.temperatures,
            "gpufleet_node_power_watts": self.power_readings,
            "gpufleet_node_sensor_state": self.fans + self.psus + self.temperatures,
        }.get(field, 1)

    @classmethod
    def parse(cls, text: str) -> BmcSensors:
        """`FANS,PSUS,TEMPERATURES,POWER` (e.g. `6,2,20,3`), as `deploy size --bmc-sensors` takes it."""
        parts = [p.strip() for p in text.split(",")]
        if len(parts) != 4 or not all(p.isdigit() for p in parts):
            raise UserError(
                f"--bmc-sensors {text!r} is not four counts",
                fix="give fans, power supplies, temperature sensors and power readings, e.g. --bmc-sensors 6,2,20,3",
            )
        fans, psus, temperatures, power = (int(p) for p in parts)
        return cls(fans, psus, temperatures, power)


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
    catalog: FieldCatalog | None = None,
    sources: Sequence[SourceFields] | None = None,
    bmc: BmcSensors | None = None,
) -> tuple[int, int, int]:
    """(series per GPU, per IB port, per node besides those) the agent exports: with `sources`, the switched-on
    fields they fill (still an upper bound: a GPU without NVLink has no NVLink counters); without, every
    switched-on field. A BMC field counts one series per sensor of `bmc` (default: BmcSensors' assumption)."""
    bmc = bmc or BmcSensors()
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
        elif "sensor" in f.labels:  # the BMC's, one per sensor
            other += bmc.series(f.name)
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
    bmc: BmcSensors | None = None,
) -> Sizing:
    per_gpu, per_port, other = series_counts(catalog, sources, bmc)
    return Sizing(nodes, gpus_per_node, ib_ports_per_node, scrape_interval_s, retention_days, per_gpu, per_port, other)
