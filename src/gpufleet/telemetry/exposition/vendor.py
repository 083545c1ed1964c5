"""/metrics for AMD and Intel Gaudi devices under their own exporters' names and labels.

An AMD GPU's series read as the AMD Device Metrics Exporter writes them (gpu_gfx_activity{serial_number, gpu_id,
gpu_partition_id, ...}), a Gaudi's as the Gaudi metric exporter does (habanalabs_utilization{Serial, UUID, device,
id, ...}); data/vendor_metrics.yaml says which canonical field feeds which series and how its unit converts. Labels
are written in the Go client's order (sorted by name) and values in its float format, and every label the exporter
always sets is present, empty where it has no value, so dashboards and recording rules written for the exporter
work unchanged.

Pod attribution follows the exporter configuration (ExpositionConfig.attribution): by default the pod labels stay
empty and gpufleet_gpu_pod_info carries the device's identity labels (AMD: serial_number, gpu_id,
gpu_partition_id, gpu_uuid, hostname; Gaudi: Serial, UUID, device, id; see identity_labels for the joins); in
compat mode the series carry the pod (and, on AMD, one series per Slurm job in job_id), as the exporters do, except
on a device several workloads share, whose series render once without them (series_labels).

Label strings are built once per entity set, like the NVIDIA renderer's; a render formats values only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import cast

import numpy as np

from gpufleet.catalog.gpus import GpuModelSpec, model_for_product_name
from gpufleet.telemetry.dcgm_blanks import valid_mask
from gpufleet.telemetry.exposition.config import ExpositionConfig
from gpufleet.telemetry.exposition.text_format import family_header
from gpufleet.telemetry.exposition.text_format import label_pairs as _pairs
from gpufleet.telemetry.exposition.workload import splits
from gpufleet.telemetry.frame import GpuEntity, MetricFrame
from gpufleet.telemetry.vendor_metrics import VendorExporter, divisor, go_float, load_vendor_metrics

AMD = "amd"
INTEL = "intel"
DEPLOYMENT_MODE = "baremetal"  # DME's value unless the GPU is virtualised (an entity label field says otherwise)
Labels = list[tuple[str, str]]


def own_exporter(entity: GpuEntity) -> bool:
    """Whether the entity renders under its vendor's exporter names (AMD, Intel) rather than dcgm-exporter's."""
    return entity.vendor in load_vendor_metrics().vendors


@lru_cache(maxsize=256)
def catalog_model(model_name: str) -> GpuModelSpec | None:
    return model_for_product_name(model_name) if model_name else None


def partition_types(entity: GpuEntity) -> tuple[str, str]:
    """DME's gpu_compute_partition_type and gpu_memory_partition_type ("cpx", "nps4"): from the entity's mode, else
    the model's default mode for a partitionable model, else "none" (an MI2xx has no modes)."""
    compute = memory = ""
    for token in re.split(r"[^A-Za-z0-9]+", entity.partition):
        if token.upper().startswith("NPS"):
            memory = token.lower()
        elif token:
            compute = token.lower()
    model = catalog_model(entity.model_name)
    if model is not None and model.compute_partitions:
        compute = compute or model.compute_partitions[0].lower()
        memory = memory or (model.memory_partitions[0].lower() if model.memory_partitions else "none")
    return compute or "none", memory or "none"


def _overrides(entity: GpuEntity, spec: VendorExporter) -> dict[str, str]:
    """Exporter labels a source supplies itself as label fields (a board part number as card_model, Gaudi
    firmware versions as fit and spi)."""
    return {k: v for k, v in entity.label_fields if k in spec.labels}


def amd_labels(entity: GpuEntity, pod: tuple[str, str, str] = ("", "", ""), job: str = "") -> dict[str, str]:
    """Every label DME always sets, for one series of the entity; pod is (container, namespace, pod)."""
    spec = load_vendor_metrics().exporter(AMD)
    compute, memory = partition_types(entity)
    labels = {
        "card_model": entity.model_name,
        "container": pod[0],
        "deployment_mode": DEPLOYMENT_MODE,
        "gpu_compute_partition_type": compute,
        "gpu_id": str(entity.gpu),
        "gpu_memory_partition_type": memory,
        "gpu_partition_id": str(entity.partition_id or 0),
        "gpu_uuid": entity.uuid,
        "hostname": entity.hostname,
        "job_id": job,
        "job_partition": "",
        "job_user": "",
        "namespace": pod[1],
        "pod": pod[2],
        "serial_number": entity.serial,
    }
    labels.update(_overrides(entity, spec))
    return labels


def gaudi_labels(entity: GpuEntity, pod: tuple[str, str] = ("", "")) -> dict[str, str]:
    """Every label the Gaudi exporter sets, for one series of the entity; pod is (namespace, name)."""
    spec = load_vendor_metrics().exporter(INTEL)
    driver = dict(entity.label_fields).get("DCGM_FI_DRIVER_VERSION", "")
    labels = {
        "Serial": entity.serial,
        "UUID": entity.uuid,
        "device": entity.serial,
        "driver": driver,
        "fit": "",
        "id": str(entity.gpu),
        "pod_name": pod[1],
        "pod_namespace": pod[0],
        "spi": "",
    }
    labels.update(_overrides(entity, spec))
    return labels


def base_labels(entity: GpuEntity) -> dict[str, str]:
    return amd_labels(entity) if entity.vendor == AMD else gaudi_labels(entity)


def identity_labels(entity: GpuEntity, uuid_label: str = "UUID") -> Labels:
    """What gpufleet_gpu_pod_info and gpufleet_gpu_job_info carry for the entity: its exporter's identity labels,
    and dcgm-exporter's UUID label (named as the config names it) with the device's UUID.

    The UUID keeps a mixed fleet's info series unique under dcgm-exporter's join key (UUID, GPU_I_ID, hostname):
    without it every AMD or Gaudi info series of a host would share that key and Prometheus would refuse the NVIDIA
    joins (many-to-many). A Gaudi's own UUID label is that key already, so Gaudi series join on(UUID, GPU_I_ID) as
    NVIDIA's do; DME has gpu_uuid, so AMD series join on(gpu_uuid), selecting gpufleet_gpu_pod_info{gpu_uuid!=""}.
    """
    labels = base_labels(entity)
    own = [(k, labels[k]) for k in load_vendor_metrics().exporter(entity.vendor).identity]
    if uuid_label in labels:
        return own
    return [(uuid_label, entity.uuid), *own]


def series_labels(frame: MetricFrame, index: int, config: ExpositionConfig) -> list[dict[str, str]]:
    """The label sets of one entity's series: one, with empty pod labels, unless the config puts attribution on
    the series (compat mode), where an AMD GPU shared by Slurm jobs gets one per job, as DME's job_id does. A device
    whose shares (MetricFrame.shares) split it among workloads renders once with empty pod labels even then: its
    temperature or power is the device's, and gpufleet_workload_gpu_* says what each workload used."""
    entity = frame.entities[index]
    labelled = config.attribution == "labels" and not splits(frame.shares[index])
    attr = frame.attribution[index] if labelled else None
    if entity.vendor == AMD:
        pod = (attr.container, attr.namespace, attr.pod) if attr else ("", "", "")
        jobs = frame.jobs[index] if labelled else ()
        return [amd_labels(entity, pod, job) for job in jobs] or [amd_labels(entity, pod)]
    return [gaudi_labels(entity, (attr.namespace, attr.pod) if attr else ("", ""))]


@dataclass(slots=True)
class _Part:
    """One canonical source of a family: its rows in the frame, and per series the entity and label prefix."""

    rows: list[int]  # summed; all must have a value
    cols: list[int]  # per series: the entity's position among the vendor entities
    prefixes: list[str]
    zero: list[bool] | None  # per series: a partition other than 0 of a series DME reads as 0 there
    table: dict[int, float] | None
    multiply: float
    divide: float  # a scale of 1/N divides by N (exact: 41 / 100 prints 0.41)

    def convert(self, value: float) -> float:
        if self.table is not None:
            value = self.table.get(int(value), float("nan"))
        return value / self.divide if self.divide != 1 else value * self.multiply


@dataclass(slots=True)
class _Family:
    header: str
    parts: list[_Part]


@dataclass(slots=True)
class _NicPorts:
    name: str
    header: str
    rows: tuple[int, int, int]  # present, external, up mask rows
    entities: list[tuple[int, list[dict[str, str]]]]  # entity index, its label sets
    prefixes: dict[tuple[int, int, int], list[tuple[int, str]]]  # (entity, present, external) -> (port, prefix)


class VendorLayout:
    """The AMD and Gaudi part of a frame's /metrics, precomputed per entity set."""

    def __init__(self, frame: MetricFrame, config: ExpositionConfig) -> None:
        data = load_vendor_metrics()
        self.tables = data.tables
        self.families: list[_Family] = []
        self.nic: list[_NicPorts] = []
        self.entities = [i for i, e in enumerate(frame.entities) if own_exporter(e)]
        self._cols = np.array(self.entities, dtype=np.intp)
        self._position = {i: k for k, i in enumerate(self.entities)}
        row_of = {f.name: k for k, f in enumerate(frame.gpu_fields)}
        for vendor, spec in data.vendors.items():
            members = [i for i in self.entities if frame.entities[i].vendor == vendor]
            if not members:
                continue
            label_sets = {i: series_labels(frame, i, config) for i in members}
            self._families(frame, spec, members, label_sets, row_of)
            if spec.nic_ports is not None:
                ports = spec.nic_ports
                rows = tuple(row_of.get(f, -1) for f in (ports.present, ports.external, ports.up))
                if min(rows) >= 0:
                    header = family_header(ports.name, ports.help, "gauge")
                    sets = [(i, label_sets[i]) for i in members]
                    self.nic.append(_NicPorts(ports.name, header, (rows[0], rows[1], rows[2]), sets, {}))

    def _families(
        self,
        frame: MetricFrame,
        spec: VendorExporter,
        members: list[int],
        label_sets: dict[int, list[dict[str, str]]],
        row_of: dict[str, int],
    ) -> None:
        by_name: dict[str, _Family] = {}
        for metric in spec.metrics:
            rows = [row_of.get(f, -1) for f in metric.sources]
            if min(rows) < 0:
                continue  # the frame's catalog leaves the field out
            cols: list[int] = []
            prefixes: list[str] = []
            zero: list[bool] = []
            for i in members:
                entity = frame.entities[i]
                model = catalog_model(entity.model_name)
                if not metric.applies_to(model.arch if model else None):
                    continue
                secondary = bool(entity.partition_id)
                if secondary and metric.partition == "primary":
                    continue  # DME exports the physical GPU's sensors on partition 0 only
                for labels in label_sets[i]:
                    items = sorted({**labels, **metric.labels}.items())
                    cols.append(self._position[i])
                    prefixes.append(f"{metric.name}{{{_pairs(items)}}} ")
                    zero.append(secondary and metric.partition == "zero")
            if not cols:
                continue
            family = by_name.get(metric.name)
            if family is None:
                family = by_name[metric.name] = _Family(family_header(metric.name, metric.help, "gauge"), [])
                self.families.append(family)
            divide = float(divisor(metric.scale) or 1)
            table = self.tables[metric.table] if metric.table else None
            family.parts.append(_Part(rows, cols, prefixes, zero if any(zero) else None, table, metric.scale, divide))

    def render(self, frame: MetricFrame, out: list[str]) -> None:
        # One numpy pass over the vendor devices' columns, then plain Python per series: a handful of devices
        # and a few dozen series would otherwise cost a numpy call or two per series.
        sub = frame.values[:, self._cols]
        ok = valid_mask(sub)
        clean: list[list[float]] = np.where(ok, sub, np.nan).tolist()
        up = cast(list[bool], ok.any(axis=0).tolist())
        for family in self.families:
            lines: list[str] = []
            for part in family.parts:
                _part_lines(clean, up, part, lines)
            if lines:
                out.append(family.header)
                out.extend(lines)
        for nic in self.nic:
            self._nic_lines(clean, nic, out)

    def _nic_lines(self, clean: list[list[float]], nic: _NicPorts, out: list[str]) -> None:
        present_row, external_row, up_row = (clean[r] for r in nic.rows)
        lines: list[str] = []
        for i, label_sets in nic.entities:
            k = self._position[i]
            masks = (present_row[k], external_row[k], up_row[k])
            if not all(m == m and 0 <= m < 2**53 for m in masks):
                continue  # the device did not report its ports this tick
            present, external, up = (int(m) for m in masks)
            ports = nic.prefixes.get((i, present, external))
            if ports is None:
                ports = nic.prefixes[(i, present, external)] = _ports(nic.name, label_sets, present, external)
            lines.extend([f"{prefix}{up >> port & 1}\n" for port, prefix in ports])
        if lines:
            out.append(nic.header)
            out.extend(lines)


def _part_lines(clean: list[list[float]], up: list[bool], part: _Part, lines: list[str]) -> None:
    rows = [clean[r] for r in part.rows]
    first, more = rows[0], rows[1:]
    for j, (col, prefix) in enumerate(zip(part.cols, part.prefixes, strict=True)):
        if part.zero is not None and part.zero[j]:
            if up[col]:  # DME shows 0 for a partition other than 0 while the GPU reports
                lines.append(f"{prefix}0\n")
            continue
        value = first[col]
        for row in more:
            value += row[col]
        if value == value:
            value = part.convert(value)
            if value == value:
                lines.append(f"{prefix}{go_float(value)}\n")


def _ports(name: str, label_sets: list[dict[str, str]], present: int, external: int) -> list[tuple[int, str]]:
    """(port, series prefix) for every port bit set in `present`, typed by `external`: the per-device label strings
    of habanalabs_nic_port_status, built once per mask pair."""
    out = []
    for port in range(present.bit_length()):
        if present >> port & 1:
            kind = "external" if external >> port & 1 else "internal"
            for labels in label_sets:
                items = sorted({**labels, "port": str(port), "port_type": kind}.items())
                out.append((port, f"{name}{{{_pairs(items)}}} "))
    return out


def vendor_layout(frame: MetricFrame, config: ExpositionConfig) -> VendorLayout | None:
    """None when every entity renders as dcgm-exporter does (the all-NVIDIA fast path)."""
    if not any(own_exporter(e) for e in frame.entities):
        return None
    return VendorLayout(frame, config)
