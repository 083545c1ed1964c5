"""Per-workload GPU attribution on /metrics: who used what of each shared GPU, as gpufleet's own series.

`MetricFrame.shares` (telemetry.attribution) says, per GPU or MIG instance, how it is shared and what each workload
used of it. This module turns that into:

- per workload (a share) on a device: gpufleet_workload_gpu_memory_used_bytes (exact: the driver's per-process
  accounting), gpufleet_workload_gpu_utilization_ratio, gpufleet_workload_gpu_memory_bandwidth_utilization_ratio and
  gpufleet_workload_gpu_power_watts, each with `method` (measured, or estimated where the hardware keeps no
  per-process figure and the device's value is split), gpufleet_workload_gpu_processes, and
  gpufleet_workload_gpu_unallotted 1 for a workload whose processes run on a device it was not given. Labels: the
  device's identity (as the info series name it), `sharing`, the holder's pod, namespace and container (a Slurm job's
  hpc_job instead, or as well), its workload when known, and `method` where the value can be estimated. A value that
  is not known is left out, never written as zero.
- per device with shares: gpufleet_gpu_sharing_info{sharing, replicas} 1, and what no workload accounts for:
  gpufleet_gpu_unattributed_memory_bytes and gpufleet_gpu_unattributed_utilization_ratio.
- per render: gpufleet_attribution_workload_series (per-workload series written), ..._budget and ..._dropped.

Which workloads get per-workload series is the exposition config's choice (cardinality: a time-sliced GPU can hold
dozens of pods): those on devices shared in one of `workload_series_sharing` (by default time-slicing, MPS and
time-sliced MIG instances; "all" for every device), those in one of `workload_series_namespaces` ("*" for all), and
every workload on a device where one runs without having been given it (the GpuWorkloadUnallotted alert reads
those). At most `workload_series_budget` per-workload series are written per render: devices are taken in entity
order, each with all of its per-workload series or none, and the first that does not fit ends the list, so the
same devices drop out render after render; what was cut is counted in ..._dropped.

Label strings are built once per label set (the frame's labels_version, and the devices' replica counts); a render
looks up the current shares and formats values. A frame without shares writes none of this.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from gpufleet.model.attribution import Attribution, DeviceAttribution, Share
from gpufleet.telemetry.dcgm_blanks import valid_mask
from gpufleet.telemetry.exposition.config import ALL, ALL_NAMESPACES, ExpositionConfig
from gpufleet.telemetry.exposition.text_format import family_header, format_float
from gpufleet.telemetry.exposition.text_format import label_pairs as _pairs
from gpufleet.telemetry.frame import GpuEntity, MetricFrame

Labels = list[tuple[str, str]]
MIB = 1024.0 * 1024.0

WORKLOAD_MEMORY = "gpufleet_workload_gpu_memory_used_bytes"
WORKLOAD_UTILIZATION = "gpufleet_workload_gpu_utilization_ratio"
WORKLOAD_MEMORY_BANDWIDTH = "gpufleet_workload_gpu_memory_bandwidth_utilization_ratio"
WORKLOAD_POWER = "gpufleet_workload_gpu_power_watts"
WORKLOAD_PROCESSES = "gpufleet_workload_gpu_processes"
WORKLOAD_UNALLOTTED = "gpufleet_workload_gpu_unallotted"
SHARING_INFO = "gpufleet_gpu_sharing_info"
UNATTRIBUTED_MEMORY = "gpufleet_gpu_unattributed_memory_bytes"
UNATTRIBUTED_UTILIZATION = "gpufleet_gpu_unattributed_utilization_ratio"
SERIES_EMITTED = "gpufleet_attribution_workload_series"
SERIES_BUDGET = "gpufleet_attribution_workload_series_budget"
SERIES_DROPPED = "gpufleet_attribution_workload_series_dropped"

# in the order they are written
WORKLOAD_FAMILIES = (
    WORKLOAD_MEMORY,
    WORKLOAD_UTILIZATION,
    WORKLOAD_MEMORY_BANDWIDTH,
    WORKLOAD_POWER,
    WORKLOAD_PROCESSES,
    WORKLOAD_UNALLOTTED,
)
DEVICE_FAMILIES = (UNATTRIBUTED_MEMORY, UNATTRIBUTED_UTILIZATION)
NODE_FAMILIES = (SERIES_EMITTED, SERIES_BUDGET, SERIES_DROPPED)
FAMILIES = (SHARING_INFO, *DEVICE_FAMILIES, *WORKLOAD_FAMILIES, *NODE_FAMILIES)

_GENERATIONS = itertools.count(1)  # label sets, numbered across layouts so a store's key never names two

# labels mode (dcgm-exporter compat): the device fields a shared device splits among its holders, and the share's
# part of each
SPLIT_FIELDS = (
    ("DCGM_FI_DEV_FB_USED", "memory_mib"),
    ("DCGM_FI_DEV_GPU_UTIL", "compute_pct"),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "mem_util_pct"),
    ("DCGM_FI_DEV_POWER_USAGE", "power_w"),
)
NO_REMAINDER = frozenset({"power_w"})  # a split device's power parts add up to the device's own


# ---- who gets what --------------------------------------------------------------------------------------------


def wants_workload_series(config: ExpositionConfig, device: DeviceAttribution) -> list[int]:
    """The shares of a device that get per-workload series: all of them on a device a workload uses without having
    been given it, else those the sharing mode or their namespace selects."""
    if any(not s.allotted for s in device.shares):
        return list(range(len(device.shares)))
    modes = config.workload_series_sharing
    if ALL in modes or device.sharing.value in modes:
        return list(range(len(device.shares)))
    namespaces = config.workload_series_namespaces
    every = ALL_NAMESPACES in namespaces
    return [
        k for k, s in enumerate(device.shares) if s.holder.namespace and (every or s.holder.namespace in namespaces)
    ]


def pod_holders(frame: MetricFrame, index: int) -> list[Attribution]:
    """The pods an info series names for a device: each pod holder of its shares, else its attribution."""
    device = frame.shares[index]
    if device is None:
        attr = frame.attribution[index]
        return [] if attr is None else [attr]
    return [s.holder for s in device.shares if s.holder.pod]


def job_holders(frame: MetricFrame, index: int) -> tuple[str, ...]:
    """The Slurm jobs an info series names for a device: the job holders of its shares, else its job list."""
    device = frame.shares[index]
    if device is None:
        return frame.jobs[index]
    return tuple(dict.fromkeys(s.holder.hpc_job for s in device.shares if s.holder.hpc_job))


def splits(device: DeviceAttribution | None) -> bool:
    """Whether labels mode splits the device's series among holders: several share it, or one was not given it."""
    return device is not None and (len(device.shares) > 1 or any(not s.allotted for s in device.shares))


def pod_label_items(holder: Attribution, old_namespace: bool = False) -> Labels:
    """A pod's labels: container, namespace, pod (dcgm-exporter's --use-old-namespace names when asked)."""
    names = ("container_name", "pod_namespace", "pod_name") if old_namespace else ("container", "namespace", "pod")
    return list(zip(names, (holder.container, holder.namespace, holder.pod), strict=True))


def holder_series_labels(holder: Attribution, old_namespace: bool) -> Labels:
    """A holder's labels on a dcgm-exporter series (labels mode): the pod's, and hpc_job for a Slurm job."""
    items: Labels = []
    if holder.pod or holder.namespace or holder.container:
        items.extend(pod_label_items(holder, old_namespace))
    if holder.hpc_job:
        items.append(("hpc_job", holder.hpc_job))
    return sorted(items)


def workload_labels(holder: Attribution) -> Labels:
    """A holder's labels on gpufleet's per-workload series."""
    items: Labels = []
    if holder.pod or holder.namespace or holder.container:
        items.extend(pod_label_items(holder))
    if holder.hpc_job:
        items.append(("hpc_job", holder.hpc_job))
    if holder.workload:
        items.append(("workload", holder.workload))
    return items


# ---- values ---------------------------------------------------------------------------------------------------


def _memory(share: Share) -> float:
    return share.memory_mib * MIB


def _utilization(share: Share) -> float:
    return share.compute_pct / 100.0


def _bandwidth(share: Share) -> float:
    return share.mem_util_pct / 100.0


def _power(share: Share) -> float:
    return share.power_w


def _processes(share: Share) -> float:
    # no process and no memory figure: the process list was not read, so the count is unknown, not zero
    known = share.processes > 0 or not math.isnan(share.memory_mib)
    return float(share.processes) if known else math.nan


def _unallotted(share: Share) -> float:
    return math.nan if share.allotted else 1.0


_VALUES: dict[str, Callable[[Share], float]] = {
    WORKLOAD_MEMORY: _memory,
    WORKLOAD_UTILIZATION: _utilization,
    WORKLOAD_MEMORY_BANDWIDTH: _bandwidth,
    WORKLOAD_POWER: _power,
    WORKLOAD_PROCESSES: _processes,
    WORKLOAD_UNALLOTTED: _unallotted,
}


def _method(family: str, share: Share) -> str | None:
    if family in (WORKLOAD_UTILIZATION, WORKLOAD_MEMORY_BANDWIDTH):
        return share.compute_method
    if family == WORKLOAD_POWER:
        return share.power_method
    return None


# ---- layout ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WorkloadSeries:
    """One per-workload or per-device series of the current label set."""

    uid: int  # its position in the layout, with the layout's generation a stable key for a store
    family: str
    device: int  # entity index
    share: int  # share index; -1 for a device's own series
    labels: Labels
    prefix: str  # 'name{labels} '


@dataclass(slots=True)
class _Device:
    index: int
    shares: int  # how many shares the labels were built for
    sharing: WorkloadSeries | None  # gpufleet_gpu_sharing_info
    own: list[WorkloadSeries]  # unattributed memory and utilization
    workload: list[WorkloadSeries]  # the selected shares' series, in family order


@dataclass(slots=True)
class Tick:
    """What one render writes: (series, value) in write order, and the budget's count."""

    samples: list[tuple[WorkloadSeries, float]] = field(default_factory=list)
    emitted: int = 0
    dropped: int = 0


class WorkloadLayout:
    """The attribution families of a frame: label strings per label set, values per render."""

    def __init__(self, frame: MetricFrame, config: ExpositionConfig, identity: Callable[[GpuEntity], Labels]) -> None:
        self.config = config
        self.identity = identity
        self.generation = 0  # this label set's number (_build)
        self.headers: dict[str, str] = {}
        self.devices: list[_Device] = []
        self.series: list[WorkloadSeries] = []
        self._replicas: tuple[int, ...] = ()
        self._build(frame)

    def _build(self, frame: MetricFrame) -> None:
        self.generation = next(_GENERATIONS)
        catalog = {f.name: f for f in frame.catalog.fields if f.name in FAMILIES}
        self.headers = {name: family_header(name, f.help, f.prom_type) for name, f in catalog.items()}
        self.devices = []
        self.series = []
        replicas: list[int] = []
        for i, device in enumerate(frame.shares):
            if device is None:
                continue
            replicas.append(device.replicas)
            ident = self.identity(frame.entities[i])
            sharing = [("sharing", device.sharing.value)]
            info = None
            if SHARING_INFO in catalog:
                info = self._add(SHARING_INFO, i, -1, [*ident, ("replicas", str(device.replicas)), *sharing])
            own = [self._add(name, i, -1, [*ident, *sharing]) for name in DEVICE_FAMILIES if name in catalog]
            chosen = wants_workload_series(self.config, device)
            workload = []
            for name in WORKLOAD_FAMILIES:
                if name not in catalog:
                    continue  # switched off in the field catalog
                for k in chosen:
                    share = device.shares[k]
                    if name == WORKLOAD_UNALLOTTED and share.allotted:
                        continue
                    method = _method(name, share)
                    extra = [*sharing, *workload_labels(share.holder)]
                    if method is not None:
                        extra.append(("method", method))
                    workload.append(self._add(name, i, k, [*ident, *sorted(extra)]))
            self.devices.append(_Device(i, len(device.shares), info, own, workload))
        self._replicas = tuple(replicas)

    def _add(self, family: str, device: int, share: int, labels: Labels) -> WorkloadSeries:
        series = WorkloadSeries(len(self.series), family, device, share, labels, f"{family}{{{_pairs(labels)}}} ")
        self.series.append(series)
        return series

    def _current(self, frame: MetricFrame) -> None:
        """Rebuild when a device's replica count changed (it is a label, but not part of the frame's label key)."""
        replicas = tuple(d.replicas for d in frame.shares if d is not None)
        if replicas != self._replicas:
            self._build(frame)

    def tick(self, frame: MetricFrame) -> Tick:
        """This render's series and values, the budget applied (devices in entity order, each whole or not at
        all; the first that does not fit ends the list)."""
        self._current(frame)
        budget = self.config.workload_series_budget
        tick = Tick()
        by_family: dict[str, list[tuple[WorkloadSeries, float]]] = {name: [] for name in FAMILIES}
        cut = False
        for dev in self.devices:
            device = frame.shares[dev.index]
            if device is None or len(device.shares) != dev.shares:
                continue  # changed without set_shares: the next label set will say it
            if dev.sharing is not None:
                by_family[SHARING_INFO].append((dev.sharing, 1.0))
            for series in dev.own:
                value = _device_value(series.family, device)
                if value == value:
                    by_family[series.family].append((series, value))
            values = [(s, _VALUES[s.family](device.shares[s.share])) for s in dev.workload]
            present = [(s, v) for s, v in values if v == v]
            if not cut and tick.emitted + len(present) <= budget:
                tick.emitted += len(present)
                for series, value in present:
                    by_family[series.family].append((series, value))
            else:
                cut = True
                tick.dropped += len(present)
        for name in FAMILIES:
            tick.samples.extend(by_family[name])
        return tick

    def render(self, frame: MetricFrame, out: list[str]) -> None:
        tick = self.tick(frame)
        family = ""
        for series, value in tick.samples:
            if series.family != family:
                family = series.family
                out.append(self.headers[family])
            out.append(f"{series.prefix}{format_float(value)}\n")
        for name, value in self.node_values(tick):
            out.append(self.headers[name])
            out.append(f"{name} {value}\n")

    def node_values(self, tick: Tick) -> list[tuple[str, int]]:
        """The per-render counts, for the families the catalog carries."""
        values = ((SERIES_EMITTED, tick.emitted), (SERIES_BUDGET, self.config.workload_series_budget))
        return [(n, v) for n, v in (*values, (SERIES_DROPPED, tick.dropped)) if n in self.headers]


def _device_value(family: str, device: DeviceAttribution) -> float:
    if family == UNATTRIBUTED_MEMORY:
        return device.unattributed_memory_mib * MIB
    return device.unattributed_compute_pct / 100.0


def workload_layout(
    frame: MetricFrame, config: ExpositionConfig, identity: Callable[[GpuEntity], Labels]
) -> WorkloadLayout | None:
    """None when no device has shares: the frame renders exactly as it would without attribution."""
    if all(device is None for device in frame.shares):
        return None
    return WorkloadLayout(frame, config, identity)


# ---- labels mode: a shared device's dcgm-exporter series ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SplitDevice:
    entity: int
    base: int  # the column of its series without pod labels, in the row-expanded matrix
    holders: tuple[int, ...]  # one column per share, in share order


@dataclass(slots=True)
class LabelsModeSplit:
    """Fills the per-holder rows of shared devices in labels mode: each holder's own value of the attributable
    fields, the device's remainder on the row without pod labels, and no holder value for any other field."""

    fields: list[tuple[int, str, bool]]  # (row in frame.gpu_fields, Share attribute, rendered as an integer)
    devices: list[SplitDevice]

    def apply(self, frame: MetricFrame, values: np.ndarray) -> None:
        """Patch a row-expanded copy of the frame's values (columns: the layout's rows) in place."""
        for dev in self.devices:
            cols = list(dev.holders)
            values[:, cols] = np.nan
            device = frame.shares[dev.entity]
            if device is None or len(device.shares) != len(cols):
                continue
            for row, attr, integral in self.fields:
                total = float(values[row, dev.base])
                if not valid_mask(np.array([total]))[0]:
                    continue  # no device value: no parts either
                parts = [float(getattr(s, attr)) for s in device.shares]
                if integral:  # parts rounded and the remainder taken from the printed total, so the sum is exact
                    parts = [p if math.isnan(p) else float(round(p)) for p in parts]
                    total = float(math.trunc(total))
                known = [p for p in parts if not math.isnan(p)]
                values[row, cols] = parts
                if attr in NO_REMAINDER:
                    values[row, dev.base] = np.nan if known else total
                else:
                    values[row, dev.base] = max(0.0, total - sum(known))


def labels_mode_split(frame: MetricFrame, devices: list[SplitDevice]) -> LabelsModeSplit | None:
    if not devices:
        return None
    fields = []
    for k, f in enumerate(frame.gpu_fields):
        for name, attr in SPLIT_FIELDS:
            if f.name == name:
                fields.append((k, attr, f.value_type == "i64"))
    return LabelsModeSplit(fields, devices)
