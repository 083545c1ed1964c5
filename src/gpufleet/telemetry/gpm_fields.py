"""Which NVML GPM metric fills which DCGM profiling field, and how its unit converts: data/gpm_fields.csv (its
header names the sources: DCGM's own mapping, nvml.h's units and DCGM's conversions).

NVML's GPU Performance Monitoring (GPM) gives, on Hopper and later GPUs, the activity DCGM's profiling fields
(DCGM_FI_PROF_*) report: DCGM itself answers those fields through GPM on such GPUs. GPM speaks in percentages
(0-100) and MiB/s where the fields are ratios (0-1) and bytes per second, so each row carries the factor from one
to the other, and whether a GPU instance (MIG) has the field of its own.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from functools import cache

from gpufleet.errors import NotFoundError
from gpufleet.telemetry.fields import GPU, load_field_catalog, read_data


@dataclass(frozen=True, slots=True)
class GpmField:
    """One DCGM profiling field and the GPM metric that fills it."""

    field: str  # the DCGM field, as the catalog (and dcgm-exporter) names it
    metric: str  # nvmlGpmMetricId_t name, NVML_GPM_METRIC_*
    metric_id: int  # its number
    scale: float  # GPM's value times this is the field's (0.01: percent -> ratio; 1048576: MiB/s -> bytes/s)
    per_instance: bool  # a GPU instance has it of its own (nvmlGpmMigSampleGet); else the whole GPU only


@cache
def load_gpm_fields() -> tuple[GpmField, ...]:
    """Every GPM-filled field, in the file's order. A row naming a field the catalog lacks is an error."""
    lines = [line for line in read_data("gpm_fields.csv").splitlines(True) if not line.startswith("#")]
    known = {f.name for f in load_field_catalog() if f.scope == GPU}
    out = []
    for row in csv.DictReader(io.StringIO("".join(lines))):
        if row["field"] not in known:
            raise NotFoundError(f"gpm_fields.csv names {row['field']}, which is not a GPU field of the catalog")
        out.append(
            GpmField(
                row["field"], row["gpm_metric"], int(row["gpm_id"]), float(row["scale"]), row["gpu_instance"] == "1"
            )
        )
    return tuple(out)
