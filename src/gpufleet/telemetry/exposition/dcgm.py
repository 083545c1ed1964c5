"""Render a MetricFrame as Prometheus text exposition format 0.0.4, the way dcgm-exporter 4.x writes it.

GPU series carry dcgm-exporter's labels in its order: gpu, UUID, pci_bus_id, device, modelName,
[GPU_I_PROFILE,
GPU_I_ID], Hostname/hostname, then the sorted label fields and per-metric labels (DCGM_FI_DRIVER_VERSION,
xid, ...),
then, in compat mode, the sorted attribution labels (container, hpc_job, namespace, pod): a GPU that several Slurm
jobs share has one series per job, as dcgm-exporter's HPC job mapping writes it. By default attribution goes
to one
`gpufleet_gpu_pod_info` series per used GPU and one `gpufleet_gpu_job_info` series per GPU and job instead, so a
workload coming or going does not create new GPU series.

AMD and Intel Gaudi devices render under their own exporters' names and labels (exposition/vendor.py), after the
dcgm-exporter families; a frame without them renders exactly as before. Every accelerator, NVIDIA included, also
gets the vendor-neutral gpufleet_accelerator_* series (exposition/fleet.py), last, unless the config turns them off.

Shared GPUs (MetricFrame.shares, telemetry.attribution): in info mode `gpufleet_gpu_pod_info` has one series per
pod holding the device and `gpufleet_gpu_job_info` one per Slurm job, so several pods time-slicing a GPU each join
its series. In labels mode (dcgm-exporter compat) a device held by one workload renders as dcgm-exporter does, its pod
on every series; a device several workloads share (or one uses without having been given it) does not copy the pod
labels onto every series as dcgm-exporter does, which counts a shared device once per pod in any sum. Its attributable
fields (DCGM_FI_DEV_FB_USED, DCGM_FI_DEV_GPU_UTIL, DCGM_FI_DEV_MEM_COPY_UTIL, DCGM_FI_DEV_POWER_USAGE) have one series
per holder with that holder's own part (none where it is not known) and one without pod labels for the remainder
(what no workload accounts for; power has none, its parts add up to the device's), so `sum by (UUID)` gives the
device's value; every other field (temperatures, clocks, errors) belongs to the device and renders once, without pod
labels. In both modes the gpufleet_workload_gpu_* series carry each workload's use with how it was obtained
(exposition/workload.py), within a per-render series budget.

Label strings are built once per entity set (the cache key is the frame and its labels_version); a render only
formats values.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpufleet.catalog.clock_events import load_clock_events
from gpufleet.instrument import names
from gpufleet.model.attribution import Attribution
from gpufleet.telemetry.dcgm_blanks import valid_mask
from gpufleet.telemetry.exposition.config import ExpositionConfig
from gpufleet.telemetry.exposition.fleet import FleetLayout
from gpufleet.telemetry.exposition.text_format import escape_help, format_float
from gpufleet.telemetry.exposition.text_format import escape_label_value as escape_label_value  # re-exported
from gpufleet.telemetry.exposition.text_format import label_pairs as _pairs
from gpufleet.telemetry.exposition.vendor import VendorLayout, identity_labels, own_exporter, vendor_layout
from gpufleet.telemetry.exposition.workload import (
    LabelsModeSplit,
    SplitDevice,
    WorkloadLayout,
    holder_series_labels,
    job_holders,
    labels_mode_split,
    pod_holders,
    pod_label_items,
    splits,
    workload_layout,
)
from gpufleet.telemetry.fields import IB_PORT_LABELS, MetricField
from gpufleet.telemetry.frame import MAX_NVLINKS, GpuEntity, IbPort, MetricFrame

POD_INFO_METRIC = "gpufleet_gpu_pod_info"
# a NaN elsewhere is "no value this tick"; a diverged model's NaN loss is the value, and Prometheus carries it
NAN_MEANS_SOMETHING = frozenset({names.TRAINING_LOSS, names.TRAINING_VALIDATION_LOSS, names.TRAINING_GRADIENT_NORM})
POD_INFO_HELP = "Workload using the GPU (join on UUID and GPU_I_ID to attribute GPU series to pods)."
JOB_INFO_METRIC = "gpufleet_gpu_job_info"
JOB_INFO_HELP = "Slurm job using the GPU (join on UUID and GPU_I_ID to attribute GPU series to hpc_job)."
JOB_LABEL = "hpc_job"  # dcgm-exporter's label for the HPC job mapping
# With AMD or Gaudi devices in the frame the info series name each device by its own exporter's identity labels.
VENDOR_JOIN = (
    ' (join on UUID and GPU_I_ID for dcgm-exporter and Gaudi series, on gpu_uuid for AMD\'s selecting gpu_uuid!="")'
)
MIXED_POD_INFO_HELP = "Workload using the GPU" + VENDOR_JOIN + "."
MIXED_JOB_INFO_HELP = "Slurm job using the GPU" + VENDOR_JOIN + "."


def gpu_identity_labels(entity: GpuEntity, config: ExpositionConfig) -> list[tuple[str, str]]:
    """The fixed leading labels of a GPU series, in dcgm-exporter's order."""
    items = [
        ("gpu", str(entity.gpu)),
        (config.uuid_label, entity.uuid),
        ("pci_bus_id", entity.pci_bus_id),
        ("device", entity.device_name),
        ("modelName", entity.model_name),
    ]
    if entity.mig_profile:
        items.append(("GPU_I_PROFILE", entity.mig_profile))
        items.append(("GPU_I_ID", "" if entity.gpu_instance_id is None else str(entity.gpu_instance_id)))
    if entity.hostname:
        items.append((config.hostname_label, entity.hostname))
    return items


def pod_labels(attr: Attribution, config: ExpositionConfig) -> list[tuple[str, str]]:
    """A pod's labels as the config names them (container, namespace, pod; or dcgm-exporter's old names)."""
    return pod_label_items(attr, config.old_namespace)


def attribution_labels(frame: MetricFrame, index: int, config: ExpositionConfig) -> list[tuple[str, str]]:
    attr = frame.attribution[index]
    return [] if attr is None else pod_labels(attr, config)


def holder_info_labels(holder: Attribution, config: ExpositionConfig) -> list[tuple[str, str]]:
    """An info series' labels for one pod: the pod's, and its workload (job or service) when known. Only the info
    series carries `workload`: dcgm-exporter's own series keep exactly its labels."""
    attrs = pod_labels(holder, config)
    if holder.workload:
        attrs.append(("workload", holder.workload))
    return attrs


def info_labels(frame: MetricFrame, index: int, config: ExpositionConfig) -> list[tuple[str, str]]:
    """The workload info series' labels of a device's attribution (frame.attribution)."""
    attr = frame.attribution[index]
    return [] if attr is None else holder_info_labels(attr, config)


def series_attributions(frame: MetricFrame, index: int, config: ExpositionConfig) -> list[list[tuple[str, str]]]:
    """The attribution label sets of a GPU's series in compat mode: one per HPC job using the GPU (each with its
    hpc_job), or the one set of pod labels (empty with none); always [[]] in info mode."""
    if config.attribution != "labels":
        return [[]]
    pod = attribution_labels(frame, index, config)
    jobs = frame.jobs[index]
    if not jobs:
        return [sorted(pod)]
    return [sorted([*pod, (JOB_LABEL, job)]) for job in jobs]


def gpu_series_labels(
    frame: MetricFrame, index: int, config: ExpositionConfig, extra: list[tuple[str, str]] | None = None
) -> list[tuple[str, str]]:
    """All labels of one GPU series, in exposition order."""
    entity = frame.entities[index]
    labels = sorted([*entity.label_fields, *(extra or [])])
    attrs = attribution_labels(frame, index, config) if config.attribution == "labels" else []
    return [*gpu_identity_labels(entity, config), *labels, *sorted(attrs)]


def nvlink_labels(entity: GpuEntity, link: int) -> list[tuple[str, str]]:
    """A GPU link's labels as dcgm-exporter writes a link entity with a GPU parent (fields.NVLINK_LABELS): the link
    index first, then its GPU's index, UUID, PCI id, device and model (under these names, not the GPU series'), and
    `hostname` whatever the GPU series' hostname label (the link template writes it so)."""
    return [
        ("nvlink", str(link)),
        ("gpu", str(entity.gpu)),
        ("gpu_uuid", entity.uuid),
        ("pci_bus_id", entity.pci_bus_id),
        ("device", entity.device_name),
        ("model_name", entity.model_name),
        ("hostname", entity.hostname),
    ]


def ib_port_labels(port: IbPort) -> list[tuple[str, str]]:
    return list(zip(IB_PORT_LABELS, (port.hca, str(port.port), port.rail, port.hostname), strict=True))


def _header(field: MetricField, prom_type: str | None = None) -> str:
    return f"# HELP {field.name} {escape_help(field.help)}\n# TYPE {field.name} {prom_type or field.prom_type}\n"


def _int_text(values: np.ndarray) -> list[str]:
    return [str(v) for v in values.astype(np.int64).tolist()]


def _f64_text(values: np.ndarray) -> list[str]:
    # Go's %f, which dcgm-exporter uses for doubles
    return ["%f" % v for v in values.tolist()]  # noqa: UP031


@dataclass(slots=True)
class _Layout:
    """Everything about a frame's label sets that does not change between ticks."""

    key: tuple[int, int, int]
    gpu_prefixes: list[list[str]]  # [field][row] -> 'NAME{labels} '
    gpu_rows: np.ndarray | None  # the entity of each row when a GPU has several (one per HPC job); None: one each
    gpu_headers: list[str]
    label_bodies: list[list[tuple[str, str]]]  # per entity: identity + label fields (no attribution)
    attr_bodies: list[list[list[tuple[str, str]]]]  # per entity: its series' attribution label sets (compat mode)
    ib_prefixes: list[list[str]]
    ib_headers: list[str]
    link_prefixes: list[list[str]]  # [link field][entity * MAX_NVLINKS + link] -> 'NAME{labels} '
    link_headers: list[str]
    dcgm_mask: np.ndarray | None  # entities rendered as dcgm-exporter does; None: all of them
    vendor: VendorLayout | None  # the AMD and Gaudi families; None: the frame has no such device
    fleet: FleetLayout | None  # None: fleet series off
    split: LabelsModeSplit | None  # labels mode: shared devices' per-holder rows; None: no such device
    workload: WorkloadLayout | None  # the per-workload families; None: no device has shares
    info_text: dict[str, str] = dataclasses.field(default_factory=dict)  # the info families, built once per label set


class Renderer:
    """Renders frames to /metrics text. Keep one per frame producer so the label cache is reused."""

    def __init__(self, config: ExpositionConfig | None = None) -> None:
        self.config = config or ExpositionConfig()
        self._layout: _Layout | None = None

    def _build_layout(self, frame: MetricFrame) -> _Layout:
        cfg = self.config
        n = len(frame.entities)
        bodies: list[list[tuple[str, str]]] = []
        attrs: list[list[list[tuple[str, str]]]] = []
        rows: list[int] = []
        bodies_by_row: list[str] = []
        split: list[SplitDevice] = []
        vendor = vendor_layout(frame, cfg)
        dcgm = None if vendor is None else np.array([not own_exporter(e) for e in frame.entities], dtype=bool)
        for i, entity in enumerate(frame.entities):
            if dcgm is not None and not dcgm[i]:
                bodies.append([])
                attrs.append([])  # no dcgm-exporter series: its exporter's names come from `vendor`
                continue
            bodies.append([*gpu_identity_labels(entity, cfg), *sorted(entity.label_fields)])
            device = frame.shares[i]
            if cfg.attribution == "labels" and device is not None and splits(device):
                # the device's own row without pod labels, then one per holder (LabelsModeSplit fills them)
                attrs.append([[]])
                holders = [holder_series_labels(s.holder, cfg.old_namespace) for s in device.shares]
                first = len(rows)
                split.append(SplitDevice(i, first, tuple(range(first + 1, first + 1 + len(holders)))))
                row_attrs = [[], *holders]
            else:
                attrs.append(series_attributions(frame, i, cfg))
                row_attrs = attrs[i]
            rows.extend([i] * len(row_attrs))
            bodies_by_row.extend(_pairs([*bodies[i], *a]) for a in row_attrs)
        prefixes = []
        for field in frame.gpu_fields:
            prefixes.append([f"{field.name}{{{body}}} " for body in bodies_by_row])
        link_bodies = [_pairs(nvlink_labels(e, link)) for e in frame.entities for link in range(MAX_NVLINKS)]
        link_prefixes = [[f"{field.name}{{{body}}} " for body in link_bodies] for field in _exported_links(frame)]
        ib_prefixes = []
        port_bodies = [_pairs(ib_port_labels(p)) for p in frame.ib_ports]
        for field in frame.ib_fields:
            ib_prefixes.append([f"{field.name}{{{body}}} " for body in port_bodies])
        return _Layout(
            key=(id(frame), frame.labels_version, id(frame.catalog)),
            gpu_prefixes=prefixes,
            gpu_rows=None if rows == list(range(n)) else np.array(rows, dtype=np.intp),
            gpu_headers=[_header(f) for f in frame.gpu_fields],
            label_bodies=bodies,
            attr_bodies=attrs,
            ib_prefixes=ib_prefixes,
            ib_headers=[_header(f) for f in frame.ib_fields],
            link_prefixes=link_prefixes,
            link_headers=[_header(f) for f in _exported_links(frame)],
            dcgm_mask=dcgm,
            vendor=vendor,
            fleet=FleetLayout(frame) if cfg.fleet_series else None,
            split=labels_mode_split(frame, split),
            workload=workload_layout(frame, cfg, self._identity),
        )

    def layout(self, frame: MetricFrame) -> _Layout:
        key = (id(frame), frame.labels_version, id(frame.catalog))
        if self._layout is None or self._layout.key != key:
            self._layout = self._build_layout(frame)
        return self._layout

    def render(self, frame: MetricFrame) -> str:
        lay = self.layout(frame)
        out: list[str] = []
        gpu_values = frame.values if lay.gpu_rows is None else frame.values[:, lay.gpu_rows]
        if lay.split is not None:
            lay.split.apply(frame, gpu_values)  # a copy: indexing by rows made one
        self._render_matrix(out, gpu_values, frame.gpu_fields, lay.gpu_headers, lay.gpu_prefixes)
        self._render_labelled_counts(frame, lay, out)
        if frame.link_values.size and any(frame.link_exported):
            # NVLink per link, the switched-on fields: (fields, entities * links), as dcgm-exporter's link entities
            rows = [i for i, on in enumerate(frame.link_exported) if on]
            links = frame.link_values[rows].reshape(len(rows), -1)
            self._render_matrix(out, links, _exported_links(frame), lay.link_headers, lay.link_prefixes)
        if lay.vendor is not None:
            lay.vendor.render(frame, out)
        self._render_matrix(out, frame.ib_values, frame.ib_fields, lay.ib_headers, lay.ib_prefixes)
        self._render_pod_info(frame, lay, out)
        self._render_job_info(frame, lay, out)
        if lay.workload is not None:
            lay.workload.render(frame, out)
        self._render_plain(frame, out)
        if lay.fleet is not None:
            lay.fleet.render(frame, out)
        return "".join(out)

    def _identity(self, entity: GpuEntity) -> list[tuple[str, str]]:
        """The labels an info series names the device by: those its exporter's series carry."""
        if own_exporter(entity):
            return identity_labels(entity, self.config.uuid_label)
        return gpu_identity_labels(entity, self.config)

    @staticmethod
    def _render_matrix(
        out: list[str],
        values: np.ndarray,
        fields: tuple[MetricField, ...],
        headers: list[str],
        prefixes: list[list[str]],
    ) -> None:
        if values.size == 0:
            return
        ok = valid_mask(values)
        # one vectorised test for which fields have a value: a catalog carries fields a GPU never fills (another
        # vendor's), and a numpy call per empty field would cost more than the rest of its loop
        for fi in np.flatnonzero(ok.any(axis=1)).tolist():
            field = fields[fi]
            idx = np.flatnonzero(ok[fi])
            texts = _int_text(values[fi, idx]) if field.value_type == "i64" else _f64_text(values[fi, idx])
            pre = prefixes[fi]
            out.append(headers[fi])
            out.extend([f"{pre[i]}{t}\n" for i, t in zip(idx.tolist(), texts, strict=True)])

    def _labelled_family(
        self,
        frame: MetricFrame,
        lay: _Layout,
        out: list[str],
        name: str,
        rows: list[tuple[list[tuple[str, str]], np.ndarray]],
        tail: list[str] | None = None,
    ) -> None:
        """One labelled count family: each entity's nonzero counts, then `tail` (lines of series no entity has)."""
        if not frame.catalog.fields or not any(f.name == name for f in frame.catalog.fields):
            return
        field = frame.catalog.get(name)
        lines: list[str] = []
        for extra, row in rows:
            ok = valid_mask(row) & (row != 0)
            if lay.dcgm_mask is not None:
                ok &= lay.dcgm_mask  # Xids and clock-event reasons are NVIDIA's
            for i in np.flatnonzero(ok).tolist():
                labels = [*lay.label_bodies[i][:], *extra]
                ident_len = len(gpu_identity_labels(frame.entities[i], self.config))
                for attrs in lay.attr_bodies[i]:
                    body = [*labels[:ident_len], *sorted(labels[ident_len:]), *attrs]
                    lines.append(f"{name}{{{_pairs(body)}}} {int(row[i])}\n")
        lines.extend(tail or ())
        if lines:
            out.append(_header(field))
            out.extend(lines)

    def _render_labelled_counts(self, frame: MetricFrame, lay: _Layout, out: list[str]) -> None:
        window = ("window_size_in_ms", str(frame.window_ms))
        events = load_clock_events()
        self._labelled_family(
            frame,
            lay,
            out,
            "DCGM_EXP_CLOCK_EVENTS_COUNT",
            [([("clock_event", e.name), window], frame.clock_events[k]) for k, e in enumerate(events)],
        )
        self._labelled_family(
            frame,
            lay,
            out,
            "DCGM_EXP_XID_ERRORS_COUNT",
            [([window, ("xid", str(x))], counts) for x, counts in sorted(frame.xid_counts.items())],
            self._unlisted_xid_lines(frame, window),
        )

    def _unlisted_xid_lines(self, frame: MetricFrame, window: tuple[str, str]) -> list[str]:
        """Xid counts of GPUs no entity is (MetricFrame.set_unlisted_xid_count), named by pci_bus_id and hostname."""
        lines = []
        for (bus, host, xid), count in sorted(frame.unlisted_xid_counts.items()):
            if count > 0:
                body = [("pci_bus_id", bus), (self.config.hostname_label, host), window, ("xid", str(xid))]
                lines.append(f"DCGM_EXP_XID_ERRORS_COUNT{{{_pairs(body)}}} {int(count)}\n")
        return lines

    def _render_pod_info(self, frame: MetricFrame, lay: _Layout, out: list[str]) -> None:
        if self.config.attribution != "info":
            return
        text = lay.info_text.get(POD_INFO_METRIC)
        if text is None:
            text = lay.info_text[POD_INFO_METRIC] = self._pod_info_text(frame, lay)
        out.append(text)

    def _pod_info_text(self, frame: MetricFrame, lay: _Layout) -> str:
        out: list[str] = []
        lines = []
        for i, entity in enumerate(frame.entities):
            for holder in pod_holders(frame, i):
                body = [*self._identity(entity), *sorted(holder_info_labels(holder, self.config))]
                lines.append(f"{POD_INFO_METRIC}{{{_pairs(body)}}} 1\n")
        if lines:
            help_text = POD_INFO_HELP if lay.vendor is None else MIXED_POD_INFO_HELP
            out.append(f"# HELP {POD_INFO_METRIC} {help_text}\n# TYPE {POD_INFO_METRIC} gauge\n")
            out.extend(lines)
        return "".join(out)

    def _render_job_info(self, frame: MetricFrame, lay: _Layout, out: list[str]) -> None:
        if self.config.attribution != "info":
            return
        text = lay.info_text.get(JOB_INFO_METRIC)
        if text is None:
            text = lay.info_text[JOB_INFO_METRIC] = self._job_info_text(frame, lay)
        out.append(text)

    def _job_info_text(self, frame: MetricFrame, lay: _Layout) -> str:
        out: list[str] = []
        lines = []
        for i, entity in enumerate(frame.entities):
            for job in job_holders(frame, i):
                body = [*self._identity(entity), (JOB_LABEL, job)]
                lines.append(f"{JOB_INFO_METRIC}{{{_pairs(body)}}} 1\n")
        if lines:
            help_text = JOB_INFO_HELP if lay.vendor is None else MIXED_JOB_INFO_HELP
            out.append(f"# HELP {JOB_INFO_METRIC} {help_text}\n# TYPE {JOB_INFO_METRIC} gauge\n")
            out.extend(lines)
        return "".join(out)

    @staticmethod
    def _render_plain(frame: MetricFrame, out: list[str]) -> None:
        by_name: dict[str, list[str]] = {}
        for (name, labels), value in frame.gauges.items():
            if value != value and name not in NAN_MEANS_SOMETHING:
                continue
            by_name.setdefault(name, []).append(f"{name}{{{_pairs(list(labels))}}} {format_float(value)}\n")
        for name, lines in by_name.items():
            field = _plain_field(frame, name)
            kind = "counter" if name.endswith("_total") else "gauge"
            out.append(_header(field) if field else f"# TYPE {name} {kind}\n")
            out.extend(lines)
        hist_names: dict[str, list[str]] = {}
        for (name, labels), hist in frame.histograms.items():
            pairs = list(labels)
            lines = hist_names.setdefault(name, [])
            for bound, count in zip(hist.bounds, hist.bucket_counts.tolist(), strict=True):
                body = _pairs([*pairs, ("le", _le(bound))])
                lines.append(f"{name}_bucket{{{body}}} {count}\n")
            lines.append(f"{name}_bucket{{{_pairs([*pairs, ('le', '+Inf')])}}} {hist.count}\n")
            lines.append(f"{name}_sum{{{_pairs(pairs)}}} {format_float(hist.sum)}\n")
            lines.append(f"{name}_count{{{_pairs(pairs)}}} {hist.count}\n")
        for name, lines in hist_names.items():
            field = _plain_field(frame, name)
            out.append(_header(field, "histogram") if field else f"# TYPE {name} histogram\n")
            out.extend(lines)


def _le(bound: float) -> str:
    text = format_float(bound)
    return text if "." in text or "e" in text or "Inf" in text else text + ".0"


def _plain_field(frame: MetricFrame, name: str) -> MetricField | None:
    for field in frame.catalog.fields:
        if field.name == name:
            return field
    return None


def render(frame: MetricFrame, config: ExpositionConfig | None = None) -> str:
    """One-off render; long-running producers should keep a Renderer to reuse its label cache."""
    return Renderer(config).render(frame)


RenderFn = Callable[[MetricFrame], str]


def _exported_links(frame: MetricFrame) -> tuple[MetricField, ...]:
    """The per-link NVLink fields /metrics shows: those the frame's catalog switches on (it carries them all)."""
    return tuple(f for f, on in zip(frame.link_fields, frame.link_exported, strict=True) if on)
