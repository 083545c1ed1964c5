"""The vendor-neutral gpufleet_accelerator_* series: one per accelerator of every vendor, NVIDIA included, with the
same labels and units whoever made it, so one dashboard or alert covers a mixed fleet.

Labels: vendor, model, hostname, gpu, uuid, and partition for a partition of a physical device (an NVIDIA MIG
instance's GPU_I_ID, an AMD partition's index). Units are base units (ratio, bytes, watts, joules). What each family
is derived from is data (the fleet section of data/vendor_metrics.yaml); its type and help text are the field
catalog's (scope fleet), so switching a family off in the catalog leaves it out. gpufleet_accelerator_pod_info
carries the workload with the same identity labels, one series per pod holding the accelerator.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpufleet.telemetry.dcgm_blanks import valid_mask
from gpufleet.telemetry.exposition.text_format import family_header
from gpufleet.telemetry.exposition.text_format import label_pairs as _pairs
from gpufleet.telemetry.exposition.vendor import catalog_model
from gpufleet.telemetry.exposition.workload import pod_holders, workload_labels
from gpufleet.telemetry.fields import FLEET
from gpufleet.telemetry.frame import GpuEntity, MetricFrame
from gpufleet.telemetry.vendor_metrics import FleetSeries, load_vendor_metrics, scaled


def fleet_labels(entity: GpuEntity) -> list[tuple[str, str]]:
    items = [
        ("vendor", entity.vendor),
        ("model", entity.model_name),
        ("hostname", entity.hostname),
        ("gpu", str(entity.gpu)),
        ("uuid", entity.uuid),
    ]
    if entity.mig_profile:
        items.append(("partition", "" if entity.gpu_instance_id is None else str(entity.gpu_instance_id)))
    elif entity.partition or entity.partition_id is not None:
        items.append(("partition", str(entity.partition_id or 0)))
    return items


@dataclass(slots=True)
class _Family:
    series: FleetSeries
    header: str
    prefixes: list[str]
    rows: list[int]  # all must have a value
    optional: list[int]  # added where they have one
    fallback: np.ndarray | None  # per entity, from the model catalog (NaN: unknown)


class FleetLayout:
    """Label strings and sources of every fleet family, precomputed per entity set."""

    def __init__(self, frame: MetricFrame) -> None:
        fields = {f.name: f for f in frame.catalog.fields if f.scope == FLEET}
        row_of = {f.name: k for k, f in enumerate(frame.gpu_fields)}
        bodies = [_pairs(fleet_labels(e)) for e in frame.entities]
        self.families: list[_Family] = []
        self.pod_lines: list[str] = []
        self.pod_header = ""
        for series in load_vendor_metrics().fleet:
            field = fields.get(series.name)
            if field is None:
                continue  # switched off in the field catalog
            header = family_header(field.name, field.help, field.prom_type)
            if series.derive == "pod_info":
                self.pod_header = header
                self.pod_lines = _pod_lines(frame, series.name, bodies)
                continue
            sources = [s for s in (series.field, *series.fields) if s]
            rows = [row_of.get(s, -1) for s in sources]
            fallback = _catalog_values(frame.entities, series.catalog) if series.catalog else None
            if min(rows, default=0) < 0:
                if fallback is None:
                    continue  # the frame does not carry the field
                rows = []
            optional = [row_of[s] for s in series.optional if s in row_of]
            prefixes = [f"{series.name}{{{body}}} " for body in bodies]
            self.families.append(_Family(series, header, prefixes, rows, optional, fallback))

    def render(self, frame: MetricFrame, out: list[str]) -> None:
        values = frame.values
        ok = valid_mask(values)  # once for every family: most of a family's cost is numpy call overhead
        clean = np.where(ok, values, np.nan)
        up = ok.any(axis=0).astype(np.float64)
        rows = [up if f.series.derive == "up" else _derive(clean, f) for f in self.families]
        for family, row in zip(self.families, np.vstack(rows).tolist() if rows else [], strict=True):
            # format_float inlined (integers as integers, others as repr); v != v skips NaN, "no value"
            lines = [
                f"{prefix}{int(v) if v.is_integer() and -1e15 < v < 1e15 else repr(v)}\n"
                for prefix, v in zip(family.prefixes, row, strict=True)
                if v == v
            ]
            if lines:
                out.append(family.header)
                out.extend(lines)
        if self.pod_lines:
            out.append(self.pod_header)
            out.extend(self.pod_lines)


def _derive(clean: np.ndarray, family: _Family) -> np.ndarray:
    """The family's value per entity (NaN: none this tick); `clean` has NaN for every invalid value."""
    if family.rows:
        result = clean[family.rows[0]] if len(family.rows) == 1 else clean[family.rows].sum(axis=0)
        for row in family.optional:
            result = result + np.nan_to_num(clean[row])
        result = scaled(result, family.series.scale)
    else:
        result = np.full(clean.shape[1], np.nan)
    if family.fallback is not None:
        result = np.where(np.isnan(result), family.fallback, result)
    return result


def _catalog_values(entities: Sequence[GpuEntity], attribute: str) -> np.ndarray:
    out = []
    for entity in entities:
        model = catalog_model(entity.model_name)
        value = getattr(model, attribute, None) if model is not None else None
        out.append(np.nan if value is None else float(value))
    return np.array(out, dtype=np.float64)


def _pod_lines(frame: MetricFrame, name: str, bodies: list[str]) -> list[str]:
    """One series per pod holding each accelerator (several where pods share it)."""
    lines = []
    for i in range(len(frame.entities)):
        for attr in pod_holders(frame, i):
            lines.append(f"{name}{{{bodies[i]},{_pairs(workload_labels(attr))}}} 1\n")
    return lines
