"""NVML's GPU Performance Monitoring (GPM): DCGM's profiling fields (DCGM_FI_PROF_*) without DCGM, on Hopper and
later GPUs, for whole GPUs and for GPU instances (MIG).

Each entity keeps two sample buffers (nvmlGpmSampleAlloc). Every collection takes a sample into one of them
(nvmlGpmSampleGet on a whole GPU; nvmlGpmMigSampleGet with the GPU instance's id on a MIG GPU) and asks
nvmlGpmMetricsGet, in one call, for every wanted metric between the previous sample and this one: each value covers
the collection interval, as DCGM computes the same fields over its update interval (DCGM 4.6.0
dcgmlib/src/DcgmGpmManager.cpp). The first collection has no earlier sample and gives no value yet. GPM's
percentages and MiB/s become the fields' ratios and bytes per second by data/gpm_fields.csv
(telemetry/gpm_fields.py); a metric NVML answers with an error, or NaN, stays empty. A GPU instance gets only the
fields DCGM gives a GPU instance (not PCIe, NVLink, C2C or the decoders, which are the whole GPU's).

A GPU NVML says has no GPM (nvmlGpmQueryDeviceSupport: pre-Hopper), or a driver or nvidia-ml-py without the GPM
calls, reads nothing here; the NVML source's declaration of what it fills on this node says why (`declare`).

Where DCGM's host engine runs (sources/gpu/dcgm.py) and fills a profiling field on a whole GPU, GPM is not sampled
for it there (`hand_over`): one source per series, and GPM's samples do not add to the load DCGM's profiling module
already puts on the GPU; the declaration names the source that fills it. GPU instances keep GPM (DCGM's source reads
whole GPUs only).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpufleet.sources.gpu.failing_readings import FailingReadings
from gpufleet.telemetry.field_sources import SourceFields
from gpufleet.telemetry.frame import MetricFrame
from gpufleet.telemetry.gpm_fields import GpmField, load_gpm_fields

NVML_SUCCESS = 0
NVML_ERROR_FUNCTION_NOT_FOUND = 13  # nvmlReturn_t: the driver's NVML lacks the function
WHAT = "GPM profiling metrics"
GPM_GPUS = "GPUs with NVML GPM (Hopper and later)"
NO_GPM_HERE = "; without GPM only DCGM's profiling module (dcgm-exporter's host engine) gives it"


def gpm_support(nvml: Any, handle: Any) -> str:
    """Why the GPU has no GPM, or "" when it has."""
    try:
        support = nvml.nvmlGpmQueryDeviceSupport(handle)
    except AttributeError:
        return "these nvidia-ml-py bindings have no GPM calls (nvmlGpmQueryDeviceSupport)"
    except nvml.NVMLError as exc:
        if getattr(exc, "value", None) == NVML_ERROR_FUNCTION_NOT_FOUND:
            return "the driver's NVML has no GPM calls (nvmlGpmQueryDeviceSupport not found)"
        return f"nvmlGpmQueryDeviceSupport failed: {exc}"
    if not support.isSupportedDevice:
        return "NVML says it has no GPM (nvmlGpmQueryDeviceSupport; Hopper and later have it)"
    return ""


@dataclass(slots=True)
class _Stream:
    """One entity's samples: the previous one, and a spare buffer for the next."""

    previous: Any = None
    spare: Any = None


class GpmReader:
    """GPM for the GPUs of one NVML session: which have it, and each entity's samples."""

    def __init__(self, nvml: Any, handles: list[Any], failing: FailingReadings) -> None:
        self.nvml = nvml
        self.why_not = [gpm_support(nvml, h) for h in handles]  # per GPU: "" when it has GPM
        self._failing = failing
        self._streams: dict[tuple[int, int | None], _Stream] = {}
        self._request: Any = None  # one nvmlGpmMetricsGet_t, reused (it holds room for every metric there is)
        self._wanted: dict[tuple[int, bool], list[tuple[int, GpmField]]] = {}
        self.handed: dict[int, frozenset[str]] = {}  # per GPU: the fields another source fills on the whole GPU
        self.handed_to = ""

    def hand_over(self, by_gpu: dict[int, frozenset[str]], source: str) -> None:
        """Leave these fields of these GPUs (by NVML index, whole GPUs) to `source`: GPM is not sampled for them."""
        self.handed = {gpu: names for gpu, names in by_gpu.items() if names}
        self.handed_to = source

    def supported(self, gpu: int) -> bool:
        return not self.why_not[gpu]

    def wanted(self, frame: MetricFrame, per_instance: bool) -> list[tuple[int, GpmField]]:
        """(the frame's row, the field) of each GPM field the frame carries, for a GPU or a GPU instance."""
        key = (id(frame.gpu_fields), per_instance)
        if key not in self._wanted:
            rows = {f.name: k for k, f in enumerate(frame.gpu_fields)}
            self._wanted[key] = [
                (rows[f.field], f)
                for f in load_gpm_fields()
                if f.field in rows and (f.per_instance or not per_instance)
            ]
        return self._wanted[key]

    def read(self, frame: MetricFrame, e: int, gpu: int, handle: Any, gpu_instance: int | None = None) -> None:
        """Entity `e`'s GPM fields over the interval since its last sample (empty when there is none)."""
        if self.why_not[gpu]:
            return
        wanted = self.wanted(frame, gpu_instance is not None)
        handed = self.handed.get(gpu, frozenset()) if gpu_instance is None else frozenset()
        if handed:
            wanted = [(row, f) for row, f in wanted if f.field not in handed]
        if not wanted:
            return
        for row, _ in wanted:
            frame.values[row, e] = math.nan
        what = WHAT if gpu_instance is None else f"{WHAT} of GPU instance {gpu_instance}"
        stream = self._streams.setdefault((gpu, gpu_instance), _Stream())
        nvml = self.nvml
        sample = stream.spare
        try:
            if sample is None:
                sample = nvml.nvmlGpmSampleAlloc()
            if gpu_instance is None:
                nvml.nvmlGpmSampleGet(handle, sample)
            else:
                nvml.nvmlGpmMigSampleGet(handle, gpu_instance, sample)
        except nvml.NVMLError as exc:
            stream.spare = sample
            self._failing.failed(gpu, what, exc)
            return
        previous, stream.previous, stream.spare = stream.previous, sample, stream.previous
        if previous is None:
            return  # the baseline: values from the next collection on
        request = self._metrics_request(previous, sample, wanted)
        try:
            nvml.nvmlGpmMetricsGet(request)
        except nvml.NVMLError as exc:
            self._failing.failed(gpu, what, exc)
            return
        self._failing.read(gpu, what)
        for k, (row, field) in enumerate(wanted):
            metric = request.metrics[k]
            if metric.nvmlReturn == NVML_SUCCESS and math.isfinite(metric.value):
                frame.values[row, e] = metric.value * field.scale

    def _metrics_request(self, first: Any, second: Any, wanted: list[tuple[int, GpmField]]) -> Any:
        request = self._request
        if request is None:
            request = self._request = self.nvml.c_nvmlGpmMetricsGet_t()
        request.version = self.nvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(wanted)
        request.sample1, request.sample2 = first, second
        for k, (_, field) in enumerate(wanted):
            request.metrics[k].metricId = field.metric_id
            request.metrics[k].nvmlReturn = NVML_SUCCESS
            request.metrics[k].value = math.nan
        return request


def declare(
    base: SourceFields,
    why_not: list[str],
    names: list[str],
    mig: set[int],
    handed: dict[int, frozenset[str]] | None = None,
    handed_to: str = "",
) -> SourceFields:
    """The NVML source's fields on this node: the GPM fields filled where every GPU has GPM (a whole GPU's own ones
    only partly once a GPU is in MIG mode), partly where some have it, and where none has, why; a field handed over
    to another source (`handed`, per GPU) is not NVML's where that source fills it."""
    fields = load_gpm_fields()
    partly = [(name, which) for name, which in base.partly if name not in {f.field for f in fields}]
    with_gpm = [i for i, why in enumerate(why_not) if not why]
    fills = set(base.fills)
    leaves = list(base.leaves)
    if why_not and len(with_gpm) == len(why_not):
        for f in fields:
            if f.per_instance or not mig:
                fills.add(f.field)
            else:
                partly.append((f.field, "whole GPUs only: a GPU instance has no reading of its own (GPU in MIG mode)"))
    elif with_gpm:
        listed = ", ".join(str(i) for i in with_gpm)
        partly += [(f.field, f"GPU {listed} (NVML GPM; the other GPUs have none)") for f in fields]
    else:
        gpus: dict[tuple[str, str], list[str]] = {}
        for i, reason in enumerate(why_not):
            gpus.setdefault((names[i], reason), []).append(str(i))
        reasons = [f"GPU {', '.join(ids)} ({name}): {reason}" for (name, reason), ids in gpus.items()]
        why = "no GPU here has GPM: " + "; ".join(reasons) + NO_GPM_HERE
        leaves = [(f.field, why) for f in fields] + leaves
    if handed:
        _handed_over(fields, with_gpm, mig, handed, handed_to, fills, partly, leaves)
    return dataclasses.replace(base, fills=frozenset(fills), partly=tuple(partly), leaves=tuple(leaves))


def _handed_over(
    fields: Sequence[GpmField],
    with_gpm: list[int],
    mig: set[int],
    handed: dict[int, frozenset[str]],
    source: str,
    fills: set[str],
    partly: list[tuple[str, str]],
    leaves: list[tuple[str, str]],
) -> None:
    """The GPM fields another source fills: on every GPU with GPM (and every GPU instance when it is a GPU's own
    field) none of NVML's; on some, NVML's partly, on the GPUs left to it."""
    for f in fields:
        mine = [i for i in with_gpm if f.field not in handed.get(i, frozenset())]
        if len(mine) == len(with_gpm):
            continue
        fills.discard(f.field)
        partly[:] = [(name, which) for name, which in partly if name != f.field]
        instances = f.per_instance and bool(mig & set(with_gpm))
        if mine or instances:
            where = ", ".join(str(i) for i in mine)
            which = (f"GPU {where}" if mine else "") + (" and " if mine and instances else "")
            which += "GPU instances" if instances else ""
            partly.append((f.field, f"{which} (NVML GPM; {source} fills it on the other GPUs)"))
        else:
            leaves.insert(0, (f.field, f"{source} fills it here: NVML's GPM is not sampled for it"))
