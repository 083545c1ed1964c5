"""Vendor exporters' metric names as data (data/vendor_metrics.yaml): which canonical field each AMD Device Metrics
Exporter and Intel Gaudi metric exporter series comes from, in which unit, with which labels, and how the
vendor-neutral gpufleet_accelerator_* series are derived.

The renderers (exposition/vendor.py, exposition/fleet.py) and `gpufleet telemetry fields --vendor` read it from here.
"""

from __future__ import annotations

from functools import cache
from typing import Literal

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gpufleet.errors import ManifestError, NotFoundError
from gpufleet.telemetry.fields import read_data

DATA_FILE = "vendor_metrics.yaml"
Partition = Literal["all", "primary", "zero"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class VendorMetric(_Strict):
    """One exporter series fed from one canonical field (or the sum of several)."""

    name: str
    help: str
    unit: str
    field: str = ""
    fields: tuple[str, ...] = ()
    scale: float = 1.0
    table: str = ""
    labels: dict[str, str] = Field(default_factory=dict)
    partition: Partition = "all"
    arch: tuple[str, ...] = ()
    not_arch: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _one_source(self) -> VendorMetric:
        if bool(self.field) == bool(self.fields):
            raise ValueError(f"{self.name}: give either field or fields")
        return self

    @property
    def sources(self) -> tuple[str, ...]:
        return self.fields or (self.field,)

    def applies_to(self, arch: str | None) -> bool:
        """Whether a device of this architecture (None: not in the catalog) exports this series."""
        if self.arch:
            return arch in self.arch
        return arch is None or arch not in self.not_arch

    def conversion(self) -> str:
        """How the exporter's value comes from the canonical one, for people: "x1000", "table pcie_gen_to_gts"."""
        parts = []
        if self.fields:
            parts.append("sum")
        if self.table:
            parts.append(f"table {self.table}")
        if self.scale != 1:
            parts.append(f"x{_number(self.scale)}")
        return ", ".join(parts) or "as is"

    def selector(self) -> str:
        """The series as a PromQL selector: gpu_clock{clock_type="system"}."""
        if not self.labels:
            return self.name
        return self.name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(self.labels.items())) + "}"


class NicPorts(_Strict):
    """Per-port series from three bit masks over the device's built-in network ports."""

    name: str
    help: str
    present: str
    external: str
    up: str


class VendorExporter(_Strict):
    exporter: str
    port: int
    labels: tuple[str, ...]
    identity: tuple[str, ...]
    metrics: tuple[VendorMetric, ...]
    nic_ports: NicPorts | None = None


class FleetSeries(_Strict):
    """How one gpufleet_accelerator_* family is derived from the canonical fields."""

    name: str
    derive: Literal["value", "up", "pod_info"] = "value"
    field: str = ""
    fields: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()  # added when they have a value
    scale: float = 1.0
    catalog: str = ""  # a GpuModelSpec attribute used where the field has no value


class VendorMetrics(_Strict):
    tables: dict[str, dict[int, float]]
    vendors: dict[str, VendorExporter]
    fleet: tuple[FleetSeries, ...]

    def exporter(self, vendor: str) -> VendorExporter:
        found = self.vendors.get(vendor)
        if found is None:
            raise NotFoundError(
                f"no exporter naming is defined for vendor {vendor!r}",
                fix=f"use one of: {', '.join(sorted(self.vendors))}",
            )
        return found

    def metrics_for(self, vendor: str, field: str) -> list[VendorMetric]:
        """The vendor's series a canonical field feeds (several where the name depends on the model)."""
        return [m for m in self.exporter(vendor).metrics if field in m.sources]


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


def _check(data: VendorMetrics) -> None:
    """Every field the file names must be in the field catalog, and every table must exist: a typo in the data
    would otherwise silently drop a series."""
    from gpufleet.telemetry.fields import load_field_catalog

    known = set(load_field_catalog().names())
    problems = []
    for vendor, spec in data.vendors.items():
        for metric in spec.metrics:
            problems += [f"{vendor} {metric.name}: unknown field {f}" for f in metric.sources if f not in known]
            if metric.table and metric.table not in data.tables:
                problems.append(f"{vendor} {metric.name}: unknown table {metric.table}")
        if spec.nic_ports is not None:
            ports = spec.nic_ports
            problems += [
                f"{vendor} {ports.name}: unknown field {f}"
                for f in (ports.present, ports.external, ports.up)
                if f not in known
            ]
    for series in data.fleet:
        sources = [series.field, *series.fields, *series.optional]
        problems += [f"fleet {series.name}: unknown field {f}" for f in sources if f and f not in known]
        if series.name not in known:
            problems.append(f"fleet {series.name}: not in fields.csv")
    if problems:
        raise ManifestError(DATA_FILE, "; ".join(problems), fix="name fields as fields.csv and the DCGM catalog do")


@cache
def load_vendor_metrics() -> VendorMetrics:
    raw = yaml.safe_load(read_data(DATA_FILE))
    try:
        data = VendorMetrics.model_validate(raw)
    except ValidationError as exc:
        raise ManifestError(DATA_FILE, str(exc).splitlines()[0], fix="see the file's header for its format") from None
    _check(data)
    return data


def divisor(scale: float) -> int | None:
    """N when scale is 1/N: dividing by N is exact where multiplying by 1/N is not (41 * 0.01 reads
    0.41000000000000003, 41 / 100 reads 0.41)."""
    if 0 < scale < 1:
        inverse = round(1 / scale)
        if abs(1 / scale - inverse) < 1e-9:
            return inverse
    return None


def scaled(values: np.ndarray, scale: float) -> np.ndarray:
    if scale == 1:
        return values
    n = divisor(scale)
    return values / n if n else values * scale


def go_float(value: float) -> str:
    """A float as Prometheus' Go client writes it (strconv 'g', shortest): exponent form from 1e6 up and below
    1e-4 ("1.37438953472e+11", "1.234e-05"), plain otherwise ("39", "61.5")."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "0"
    magnitude = abs(value)
    if magnitude < 1e6:
        if value.is_integer():
            return str(int(value))
        return repr(value)  # Python's shortest digits; its exponent form starts below 1e-4, as Go's does
    text = repr(value)
    if "e" in text:  # from 1e16 Python writes the exponent form itself, as Go does
        return text
    # 1e6 to 1e16: Python writes 68719476736.0 where Go writes 6.8719476736e+10
    whole, _, fraction = text.lstrip("-").partition(".")
    digits = (whole + ("" if fraction == "0" else fraction)).rstrip("0")
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    return f"{'-' if value < 0 else ''}{mantissa}e+{len(whole) - 1:02d}"


PARTITION_NOTE = {"all": "every partition", "primary": "partition 0 only", "zero": "0 on other partitions"}


def field_names(vendor: str) -> list[dict[str, str]]:
    """One row per vendor series and the canonical field(s) feeding it, in the data file's order (for
    `gpufleet telemetry fields --vendor`)."""
    spec = load_vendor_metrics().exporter(vendor)
    rows = []
    for metric in spec.metrics:
        row = {
            "field": " + ".join(metric.sources),
            "metric": metric.selector(),
            "unit": metric.unit,
            "conversion": metric.conversion(),
        }
        if metric.arch or metric.not_arch:
            row["models"] = ("only " + ", ".join(metric.arch)) if metric.arch else ("not " + ", ".join(metric.not_arch))
        if vendor == "amd":
            row["partitions"] = PARTITION_NOTE[metric.partition]
        rows.append(row)
    if spec.nic_ports is not None:
        ports = spec.nic_ports
        rows.append(
            {
                "field": f"{ports.present} + {ports.external} + {ports.up}",
                "metric": f"{ports.name}{{port,port_type}}",
                "unit": "1/0",
                "conversion": "one series per bit of the port mask",
            }
        )
    return rows
