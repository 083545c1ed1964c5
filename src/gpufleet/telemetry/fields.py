"""The field catalog: every metric gpufleet exports, in dcgm-exporter's names, types and help texts.

dcgm-exporter's own counter file gives the names, Prometheus types, help texts and the on/off state it ships
with;
``data/fields.csv`` adds what the exporter leaves out (DCGM value type, Grafana unit, extra labels) and
switches on the
fields that matter for faults. InfiniBand port counters come from the IB counter catalog; gpufleet's own
metrics
(source health, training progress, inference latency, idle cost) are rows of the same table.

Where the counter file's own line is wrong about what the exporter exposes, ``data/fields.csv`` says it
(EXP_OVERRIDES below names each such field). DCGM_EXP_XID_ERRORS_COUNT and DCGM_EXP_CLOCK_EVENTS_COUNT are
commented out in etc/default-counters.csv as ``counter`` ("reported XIDs during last window", "reported clock
events"), but their value is a count of the samples within the last --xid-count-window-size
(--clock-events-count-window-size) milliseconds, so it falls as samples leave the window: a gauge. dcgm-exporter's
own tests declare them so, with the help texts used here (NVIDIA/dcgm-exporter at 4.5.3-4.8.2 + d5e5f510:
internal/pkg/integration_test/collector_test.go, pkg/cmd/app_test.go, tests/integration/testdata/
default-counters.csv; the counting is internal/pkg/collector/expcollector.go getMetrics, GetValuesSince over the
window). rate() and increase() on them are wrong; `> 0` or max_over_time() are the readings.
"""

from __future__ import annotations

import csv
import fnmatch
import io
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from importlib import resources

from gpufleet.catalog import load_dcgm_fields, load_ib_counters
from gpufleet.errors import NotFoundError, UserError

GPU = "gpu"  # one series per GPU (or MIG instance), labelled like dcgm-exporter
IB_PORT = "ib_port"  # one series per HCA port
PLAIN = "plain"  # gpufleet's own series with their own labels
FLEET = "fleet"  # one series per accelerator of any vendor, with vendor-neutral labels (derived from the GPU fields)
# one series per NVLink link of a GPU, labelled as dcgm-exporter labels its GPU link entities (DCGM_FE_LINK with a GPU
# parent: nvlink, gpu, gpu_uuid, pci_bus_id, device, model_name, hostname; NVIDIA/dcgm-exporter 4.5.3-4.8.2 + d5e5f510,
# internal/pkg/rendermetrics/render_metrics.go linkMetricsFormat). The fields are DCGM's link-scoped ones
# (DCGM_FI_DEV_NVLINK_*_PER_LINK_TOTAL 1525-1528, DCGM_FI_DEV_NVLINK_GET_STATE 1508: NVIDIA/DCGM dcgmlib/dcgm_fields.h
# at v4.5.3 + 72fa3fe), which DCGM answers per link with nvmlDeviceGetNvLinkErrorCounter (DcgmCacheManager.cpp
# ReadAndCacheNvLinkPerLinkMetric)
NVLINK = "nvlink"
NVLINK_LABELS = ("nvlink", "gpu", "gpu_uuid", "pci_bus_id", "device", "model_name", "hostname")
# gpufleet's own GPU field the cost package fills (cost.idle) and the idle-GPU detector reads
IDLE_COST_FIELD = "gpufleet_gpu_idle_cost_dollars_per_hour"

IB_PORT_LABELS = ("hca", "port", "rail", "hostname")
# A port's state and link rate beside its counters, so alert rules judge a port as the agent does: a link down, and
# symbol errors against the bit-error-rate budget of the port's own rate (health/symbol_errors.py)
IB_PORT_UP = "infiniband_port_up"
IB_PORT_RATE = "infiniband_port_rate_bytes_per_second"
# dcgm-exporter fields whose type and help in data/fields.csv differ from the counter file's line, and why (see above)
EXP_OVERRIDES = {
    "DCGM_EXP_XID_ERRORS_COUNT": "a count over a sliding window, which falls as Xids leave it: a gauge",
    "DCGM_EXP_CLOCK_EVENTS_COUNT": "a count over a sliding window, which falls as samples leave it: a gauge",
}


def read_data(name: str) -> str:
    return resources.files("gpufleet.telemetry").joinpath("data", name).read_text(encoding="utf-8")


@dataclass(frozen=True, slots=True)
class MetricField:
    """One exported metric family."""

    name: str
    prom_type: str  # gauge, counter, histogram or label
    help: str
    scope: str  # GPU, IB_PORT, PLAIN or FLEET
    value_type: str = "f64"  # i64 renders as an integer (as dcgm-exporter does), f64 with six decimals
    enabled: bool = True
    labels: tuple[str, ...] = ()  # labels beyond the entity's own (xid, clock_event, job, source, ...)
    unit: str = "short"  # Grafana unit id, for dashboards

    @property
    def is_label(self) -> bool:
        """A `label` field is not a series: its value becomes a label on every GPU series
        (DCGM_FI_DRIVER_VERSION)."""
        return self.prom_type == "label"


@dataclass(frozen=True, slots=True)
class FieldCatalog:
    """An ordered set of fields: what a frame carries and what /metrics shows."""

    fields: tuple[MetricField, ...]

    def __iter__(self) -> Iterator[MetricField]:
        return iter(self.fields)

    def __len__(self) -> int:
        return len(self.fields)

    def get(self, name: str) -> MetricField:
        for field in self.fields:
            if field.name == name:
                return field
        raise NotFoundError(f"unknown metric field {name!r}", fix="run `gpufleet telemetry fields` to list them")

    def names(self, scope: str | None = None) -> list[str]:
        return [f.name for f in self.fields if scope is None or f.scope == scope]

    def enabled(self) -> FieldCatalog:
        return FieldCatalog(tuple(f for f in self.fields if f.enabled))

    def scoped(self, scope: str) -> tuple[MetricField, ...]:
        return tuple(f for f in self.fields if f.scope == scope)

    def gpu_value_fields(self) -> tuple[MetricField, ...]:
        """Per-GPU fields that carry one value per entity (not labels, not the synthesized labelled
        counts)."""
        return tuple(f for f in self.fields if f.scope == GPU and not f.is_label and not f.labels)

    def gpu_label_fields(self) -> tuple[MetricField, ...]:
        return tuple(f for f in self.fields if f.scope == GPU and f.is_label)

    def with_enabled(self, names: Iterable[str], enabled: bool = True) -> FieldCatalog:
        wanted = set(names)
        unknown = wanted - {f.name for f in self.fields}
        if unknown:
            raise NotFoundError(
                f"unknown metric field(s): {', '.join(sorted(unknown))}",
                fix="run `gpufleet telemetry fields --all` to list them",
            )
        return FieldCatalog(
            tuple(
                MetricField(f.name, f.prom_type, f.help, f.scope, f.value_type, enabled, f.labels, f.unit)
                if f.name in wanted
                else f
                for f in self.fields
            )
        )


def _table_rows() -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(read_data("fields.csv"))))


def _ib_fields() -> list[MetricField]:
    out = []
    for counter in load_ib_counters().values():
        unit = "bytes" if counter.metric.endswith("_bytes_total") else "short"
        help_text = counter.description
        if counter.octets_div4:
            help_text += " (exported in bytes: the PMA counter times 4)"
        out.append(MetricField(counter.metric, "counter", help_text + ".", IB_PORT, "i64", True, (), unit))
    out.append(
        MetricField(
            IB_PORT_UP, "gauge", "1 while the port's link is up (state ACTIVE, physical state LinkUp), 0 when not.",
            IB_PORT, "i64",
        )
    )  # fmt: skip
    out.append(
        MetricField(
            IB_PORT_RATE, "gauge", "The port's link rate as sysfs gives it (400 Gb/s for 4X NDR), in bytes a second.",
            IB_PORT, "f64", unit="Bps",
        )
    )  # fmt: skip
    return out


@cache
def load_field_catalog(counter_file: str = "default-counters.csv") -> FieldCatalog:
    """Every field gpufleet knows, in the order /metrics shows them; `.enabled()` gives what is switched
    on."""
    dcgm = {f.name: f for f in load_dcgm_fields(counter_file)}
    fields: list[MetricField] = []
    for row in _table_rows():
        name = row["name"]
        base = dcgm.get(name)
        prom_type = row["prom_type"] or (base.prom_type if base else "")
        help_text = row["help"] or (base.help if base else "")
        if not prom_type or not help_text:
            raise NotFoundError(f"field {name} has no type or help text in fields.csv nor in {counter_file}")
        if row["enabled"]:
            enabled = row["enabled"] == "1"
        else:
            enabled = base.enabled_by_default if base else True
        fields.append(
            MetricField(
                name=name,
                prom_type=prom_type,
                help=help_text,
                scope=row["scope"],
                value_type=row["value_type"],
                enabled=enabled,
                labels=tuple(row["labels"].split()),
                unit=row["unit"] or "short",
            )
        )
    # dcgm-exporter fields this table does not describe keep the exporter's own state; DCGM reports them as
    # int64.
    known = {f.name for f in fields}
    for name, base in dcgm.items():
        if name not in known:
            fields.append(MetricField(name, base.prom_type, base.help, GPU, "i64", base.enabled_by_default))
    fields.extend(_ib_fields())
    return switched(FieldCatalog(tuple(fields)), os.environ.get(FIELDS_ENV, ""))


# A site's own switches over the catalog's defaults, as dcgm-exporter's counters file (-f) is a site's: a list of
# field names or shell patterns, comma or space separated, each `+` (on; the default) or `-` (off). The agent, `gpufleet
# telemetry fields` and `gpufleet deploy size` all read it, so what is exported is what is listed and sized.
FIELDS_ENV = "GPUFLEET_FIELDS"


def switched(catalog: FieldCatalog, spec: str) -> FieldCatalog:
    """`catalog` with the fields `spec` names switched on (`+NAME`, `NAME`) or off (`-NAME`); a pattern that names
    no field is an error."""
    for item in spec.replace(",", " ").split():
        on = not item.startswith("-")
        pattern = item.lstrip("+-")
        names = [f.name for f in catalog if fnmatch.fnmatchcase(f.name, pattern)]
        if not names:
            raise UserError(
                f"{FIELDS_ENV}: {item!r} names no field of the catalog",
                fix="list them with `gpufleet telemetry fields --all`; e.g. "
                f"{FIELDS_ENV}='+DCGM_FI_DEV_NVLINK_*_PER_LINK_TOTAL,+DCGM_FI_DEV_NVLINK_GET_STATE'",
            )
        catalog = catalog.with_enabled(names, on)
    return catalog
