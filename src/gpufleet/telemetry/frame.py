"""MetricFrame: what a source (the twin, NVML, sysfs) fills on each collection tick.

A frame holds a fixed list of GPU entities and IB ports and one float64 numpy row per field, so a producer
writes
whole arrays (``frame.gpu("DCGM_FI_DEV_GPU_TEMP")[:] = temps``) rather than building per-sample objects. NaN
means
"no value this tick" and is never exported; so are DCGM's blank sentinels, should a raw DCGM value be copied
in.
Labels live on the entities and change rarely, which lets renderers and stores precompute them once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from gpufleet.catalog import load_ib_counters
from gpufleet.catalog.clock_events import load_clock_events
from gpufleet.errors import NotFoundError, UserError
from gpufleet.model.attribution import Attribution, DeviceAttribution
from gpufleet.telemetry.fields import (
    IB_PORT_RATE,
    IB_PORT_UP,
    NVLINK,
    FieldCatalog,
    MetricField,
    load_field_catalog,
)

DEFAULT_WINDOW_MS = 300_000  # dcgm-exporter's --xid-count-window-size and clock-events window
# NVLink links a GPU can have: NVML_NVLINK_MAX_LINKS (nvml.h R535-R580, 18: an H100/H200/B200/GB200's links)
MAX_NVLINKS = 18


@dataclass(frozen=True, slots=True)
class GpuEntity:
    """A GPU or a MIG GPU instance, with the identity dcgm-exporter puts in its labels."""

    gpu: int
    uuid: str
    model_name: str
    hostname: str
    pci_bus_id: str = ""
    device: str = ""  # nvidiaN; defaults to nvidia<gpu>
    mig_profile: str | None = None  # GPU_I_PROFILE, e.g. "1g.10gb"
    gpu_instance_id: int | None = None  # GPU_I_ID
    label_fields: tuple[tuple[str, str], ...] = ()  # values of `label` fields, e.g. ("DCGM_FI_DRIVER_VERSION", ..)
    vendor: str = "nvidia"  # whose exporter names its series: nvidia (dcgm-exporter), amd (DME), intel (Gaudi's)
    serial: str = ""
    partition: str = ""  # AMD compute and memory partition mode of the device, e.g. "CPX_NPS4"; "" unpartitioned
    partition_id: int | None = None  # AMD partition index within its physical GPU
    mig_uuid: str = ""  # a MIG instance's own UUID (MIG-...), as the device plugin names it

    @property
    def device_name(self) -> str:
        return self.device or f"nvidia{self.gpu}"


@dataclass(frozen=True, slots=True)
class IbPort:
    hca: str  # mlx5_0
    port: int
    rail: str  # which rail (fabric plane) the port sits on; "" when unknown
    hostname: str


@dataclass(slots=True)
class Histogram:
    """A cumulative histogram: `bucket_counts[i]` counts observations <= `bounds[i]`."""

    bounds: tuple[float, ...]
    bucket_counts: np.ndarray
    sum: float = 0.0
    count: int = 0

    @classmethod
    def empty(cls, bounds: Sequence[float]) -> Histogram:
        return cls(tuple(float(b) for b in bounds), np.zeros(len(bounds), dtype=np.int64))

    def observe(self, values: np.ndarray | Sequence[float]) -> None:
        arr = np.asarray(values, dtype=np.float64)
        for i, bound in enumerate(self.bounds):
            self.bucket_counts[i] += int(np.count_nonzero(arr <= bound))
        self.sum += float(arr.sum())
        self.count += int(arr.size)


LabelItems = tuple[tuple[str, str], ...]


def label_items(labels: Mapping[str, str]) -> LabelItems:
    return tuple(labels.items())


@dataclass(slots=True)
class MetricFrame:
    """One collection tick's values for a node (or a whole twin cluster)."""

    entities: Sequence[GpuEntity]  # stored as a tuple
    ib_ports: Sequence[IbPort] = ()
    catalog: FieldCatalog = field(default_factory=lambda: load_field_catalog().enabled())
    timestamp: float = 0.0  # Unix seconds of the collection
    window_ms: int = DEFAULT_WINDOW_MS
    values: np.ndarray = field(init=False)  # (gpu value fields, entities)
    clock_events: np.ndarray = field(init=False)  # (clock events, entities): DCGM_EXP_CLOCK_EVENTS_COUNT
    xid_counts: dict[int, np.ndarray] = field(init=False)  # xid -> per-entity count: DCGM_EXP_XID_ERRORS_COUNT
    # (pci_bus_id, hostname, xid) -> count, for a GPU the kernel log names that no entity is (set_unlisted_xid_count)
    unlisted_xid_counts: dict[tuple[str, str, int], float] = field(init=False)
    ib_values: np.ndarray = field(init=False)  # (IB counters, ports), in metric units (bytes, not octets/4)
    # (NVLink fields, entities, MAX_NVLINKS): one value per GPU link, NaN where the link does not exist or was not
    # read (a MIG GPU's links are written on its first instance's entity only). Every per-link field of the catalog
    # is carried, switched on or not: the NVLink detector names the failing link from them; only those the frame's
    # catalog switches on are exported (`link_exported`)
    link_values: np.ndarray = field(init=False)
    link_exported: tuple[bool, ...] = field(init=False)
    # per port: 1 link up (ACTIVE/LinkUp), 0 down, NaN not read this tick; the infiniband_port_up row when the
    # catalog exports it (a view: writing one writes the other)
    ib_up: np.ndarray = field(init=False)
    attribution: list[Attribution | None] = field(init=False)
    jobs: list[tuple[str, ...]] = field(init=False)  # per entity: Slurm (HPC) job ids using it, exposed as hpc_job
    shares: list[DeviceAttribution | None] = field(init=False)  # per entity: who used what (telemetry.attribution)
    gauges: dict[tuple[str, LabelItems], float] = field(init=False)
    # the sources down now (gpufleet_source_up 0) and why, as the collector last found them
    sources_down: dict[str, str] = field(init=False)
    histograms: dict[tuple[str, LabelItems], Histogram] = field(init=False)
    labels_version: int = field(init=False, default=0)  # bumps when entities' label sets change
    gpu_fields: tuple[MetricField, ...] = field(init=False)
    ib_fields: tuple[MetricField, ...] = field(init=False)
    link_fields: tuple[MetricField, ...] = field(init=False)
    _gpu_index: dict[str, int] = field(init=False)
    _link_index: dict[str, int] = field(init=False)
    _ib_index: dict[str, int] = field(init=False)

    def __post_init__(self) -> None:
        self.entities = tuple(self.entities)
        self.ib_ports = tuple(self.ib_ports)
        self.gpu_fields = self.catalog.gpu_value_fields()
        self.ib_fields = self.catalog.scoped("ib_port")
        carried = {f.name for f in self.catalog.scoped(NVLINK)}
        self.link_fields = (
            *self.catalog.scoped(NVLINK),
            *(f for f in load_field_catalog().scoped(NVLINK) if f.name not in carried),
        )
        self.link_exported = tuple(f.name in carried and f.enabled for f in self.link_fields)
        self._link_index = {f.name: i for i, f in enumerate(self.link_fields)}
        self._gpu_index = {f.name: i for i, f in enumerate(self.gpu_fields)}
        self._ib_index = {f.name: i for i, f in enumerate(self.ib_fields)}
        n = len(self.entities)
        self.values = np.full((len(self.gpu_fields), n), np.nan)
        self.clock_events = np.full((len(load_clock_events()), n), np.nan)
        self.xid_counts = {}
        self.unlisted_xid_counts = {}
        self.ib_values = np.full((len(self.ib_fields), len(self.ib_ports)), np.nan)
        self.link_values = np.full((len(self.link_fields), n, MAX_NVLINKS), np.nan)
        up = self._ib_index.get(IB_PORT_UP)
        self.ib_up = np.full(len(self.ib_ports), np.nan) if up is None else self.ib_values[up]
        self.attribution = [None] * n
        self.jobs = [()] * n
        self.shares = [None] * n
        self.gauges = {}
        self.sources_down = {}
        self.histograms = {}

    # -- GPU fields ------------------------------------------------------------------------------------------
    def gpu(self, name: str) -> np.ndarray:
        """The writable row of one GPU field, one value per entity (NaN = no value)."""
        try:
            return self.values[self._gpu_index[name]]
        except KeyError:
            raise NotFoundError(
                f"field {name!r} is not a per-GPU value field of this frame",
                fix="enable it in the field catalog or check the name with `gpufleet telemetry fields`",
            ) from None

    def has_gpu_field(self, name: str) -> bool:
        return name in self._gpu_index

    def set_xid_count(self, xid: int, counts: np.ndarray | Sequence[float]) -> None:
        """Xids of one code seen per entity within the window (0 or NaN entries are not exported)."""
        row = np.asarray(counts, dtype=np.float64)
        if row.shape != (len(self.entities),):
            raise UserError(f"xid counts need one value per entity ({len(self.entities)}), got shape {row.shape}")
        self.xid_counts[int(xid)] = row

    def set_unlisted_xid_count(self, pci_bus_id: str, hostname: str, xid: int, count: float) -> None:
        """Xids of one code seen within the window on a GPU that no entity is: one the kernel log names by its PCI
        address but NVML did not list (fallen off the bus before the agent started). Rendered in
        DCGM_EXP_XID_ERRORS_COUNT with the only labels known of it, pci_bus_id and the hostname."""
        self.unlisted_xid_counts[(pci_bus_id, hostname, int(xid))] = float(count)

    def clock_event_row(self, event: str) -> np.ndarray:
        for i, e in enumerate(load_clock_events()):
            if e.name == event:
                return self.clock_events[i]
        raise NotFoundError(f"unknown clock event {event!r}")

    # -- attribution -----------------------------------------------------------------------------------------
    def set_attribution(self, index: int, attribution: Attribution | None) -> None:
        if self.attribution[index] != attribution:
            self.attribution[index] = attribution
            self.labels_version += 1

    def set_jobs(self, index: int, jobs: tuple[str, ...]) -> None:
        """The HPC job ids using a GPU (a Slurm prolog's job map), in the order given."""
        if self.jobs[index] != jobs:
            self.jobs[index] = jobs
            self.labels_version += 1

    def set_shares(self, index: int, shares: DeviceAttribution | None) -> None:
        """Who used what of a GPU this collection; the label cache is rebuilt only when its holders change."""
        old = self.shares[index]
        self.shares[index] = shares
        if (None if old is None else old.labels_key()) != (None if shares is None else shares.labels_key()):
            self.labels_version += 1

    def set_entities(self, entities: Iterable[GpuEntity]) -> None:
        """Replace the entity list (a GPU appeared or vanished); values reset to NaN."""
        self.entities = tuple(entities)
        n = len(self.entities)
        self.values = np.full((len(self.gpu_fields), n), np.nan)
        self.clock_events = np.full((len(load_clock_events()), n), np.nan)
        self.link_values = np.full((len(self.link_fields), n, MAX_NVLINKS), np.nan)
        self.xid_counts = {}
        self.unlisted_xid_counts = {}
        self.attribution = [None] * n
        self.jobs = [()] * n
        self.shares = [None] * n
        self.labels_version += 1

    # -- NVLink links ----------------------------------------------------------------------------------------
    def link(self, name: str) -> np.ndarray:
        """The writable (entities, MAX_NVLINKS) block of one per-link NVLink field (NaN = no such link or no
        value)."""
        try:
            return self.link_values[self._link_index[name]]
        except KeyError:
            raise NotFoundError(
                f"field {name!r} is not a per-link NVLink field of this frame",
                fix="enable it in the field catalog or check the name with `gpufleet telemetry fields`",
            ) from None

    def has_link_field(self, name: str) -> bool:
        return name in self._link_index

    def link_row(self, name: str) -> int | None:
        """The index of a per-link field in `link_values`; None when this frame does not carry it."""
        return self._link_index.get(name)

    # -- InfiniBand ports ------------------------------------------------------------------------------------
    def ib(self, metric: str) -> np.ndarray:
        """The writable row of one IB counter metric (e.g. infiniband_port_symbol_errors_total), one per
        port."""
        try:
            return self.ib_values[self._ib_index[metric]]
        except KeyError:
            raise NotFoundError(f"IB metric {metric!r} is not in this frame's catalog") from None

    def has_ib_field(self, metric: str) -> bool:
        return metric in self._ib_index

    def ib_rate_gbps(self) -> np.ndarray:
        """Each port's link rate in Gb/s (NaN where unknown, or where the catalog leaves the rate out)."""
        if IB_PORT_RATE not in self._ib_index:
            return np.full(len(self.ib_ports), np.nan)
        return self.ib(IB_PORT_RATE) * 8 / 1e9

    def set_ib_pma(self, counter: str, raw: np.ndarray | Sequence[float]) -> None:
        """Store raw PMA counter values (perfquery / sysfs names), converting octets/4 data counters to
        bytes."""
        info = load_ib_counters().get(counter)
        if info is None:
            raise NotFoundError(f"unknown IB counter {counter!r}")
        arr = np.asarray(raw, dtype=np.float64)
        self.ib(info.metric)[:] = arr * 4 if info.octets_div4 else arr

    # -- plain series ----------------------------------------------------------------------------------------
    def set_gauge(self, name: str, labels: Mapping[str, str], value: float) -> None:
        self.gauges[(name, label_items(labels))] = float(value)

    def remove_gauge(self, name: str, labels: Mapping[str, str]) -> None:
        self.gauges.pop((name, label_items(labels)), None)

    def histogram(self, name: str, labels: Mapping[str, str], bounds: Sequence[float]) -> Histogram:
        key = (name, label_items(labels))
        hist = self.histograms.get(key)
        if hist is None:
            hist = self.histograms[key] = Histogram.empty(bounds)
        return hist

    def clear_values(self) -> None:
        """Forget this tick's per-GPU and per-port values (labels, gauges and histograms stay)."""
        self.values.fill(np.nan)
        self.clock_events.fill(np.nan)
        self.ib_values.fill(np.nan)
        self.ib_up.fill(np.nan)
        self.link_values.fill(np.nan)
        self.xid_counts.clear()
        self.unlisted_xid_counts.clear()
