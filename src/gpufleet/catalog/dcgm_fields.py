"""dcgm-exporter's counter files: field name, Prometheus type, help text, and whether it ships switched on."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from functools import cache

from gpufleet.catalog._files import read_text

COUNTER_FILES = ("default-counters.csv", "dcp-metrics-included.csv", "1.x-compatibility-metrics.csv")


@dataclass(frozen=True, slots=True)
class DcgmField:
    name: str
    prom_type: str  # gauge, counter or label
    help: str
    enabled_by_default: bool


def parse_counter_file(text: str) -> list[DcgmField]:
    """Parse a dcgm-exporter counters CSV. Commented-out field lines are kept as disabled fields."""
    fields: list[DcgmField] = []
    for raw in text.splitlines():
        line = raw.strip()
        enabled = True
        if line.startswith("#"):
            line = line.lstrip("#").strip()
            enabled = False
        parts = [p.strip() for p in line.split(",", 2)]
        if len(parts) != 3 or not parts[0].startswith(("DCGM_", "dcgm_")):
            continue
        if parts[1] not in ("gauge", "counter", "label"):
            continue
        fields.append(DcgmField(parts[0], parts[1], parts[2], enabled))
    return fields


@cache
def load_dcgm_fields(counter_file: str = "default-counters.csv") -> tuple[DcgmField, ...]:
    return tuple(parse_counter_file(read_text(f"dcgm_exporter/{counter_file}")))


@cache
def field_ids() -> dict[str, int]:
    """DCGM field name -> id (both the names before and after DCGM 4.6's renaming): data/dcgm_field_ids.csv."""
    lines = [line for line in read_text("dcgm_field_ids.csv").splitlines(True) if not line.startswith("#")]
    return {row["name"]: int(row["id"]) for row in csv.DictReader(io.StringIO("".join(lines)))}
