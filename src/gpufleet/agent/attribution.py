"""The agent's per-workload attribution: each collection, after the GPU source has filled the device readings, read
who holds each device (pod-resources, a Slurm job map), the processes on each GPU (NVML) and whose each process
is (cgroups), and put each device's shares on the frame (telemetry.attribution has the rules). What did not change
is not worked out again: pod-resources is asked again only when a process starts or ends on a GPU, the pod list
changes or its `keep_s` passed, and the join of holders and processes is kept while its inputs stay.

Every reader is optional. One that is not there is said once at start, with what attribution loses without it; one
that fails is logged once (and once when it works again) and counts as absent for that collection, so labels are
never carried over from an earlier one. `gpufleet_attribution_input{input,state}` shows each reader's state.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol, TypeVar

import numpy as np

from gpufleet.errors import GpufleetError
from gpufleet.model.attribution import Allotment, Allotments, Attribution, ProcessReading
from gpufleet.telemetry.attribution import AttributionInputs, Attributor, DeviceReading
from gpufleet.telemetry.frame import MetricFrame

__all__ = ["AllotmentReader", "Allotments", "AttributionSource", "OwnerReader", "ProcessReader"]

log = logging.getLogger("gpufleet.agent")
T = TypeVar("T")

INPUT_METRIC = "gpufleet_attribution_input"
INPUTS = ("allotments", "processes", "owners")
# what attribution loses without each kind of reader, said once when the agent starts
WITHOUT = {
    "allotments": "no device allotments (neither the kubelet's pod-resources socket nor a Slurm job map): GPUs are "
    "attributed only to the workloads their processes' cgroups name",
    "processes": "no per-process GPU data (NVML's process lists): per-workload memory is unknown and shared GPUs' "
    "compute is split evenly, labelled estimated",
    "owners": "no PID-to-workload map (cgroups under /proc): a GPU with several holders cannot tell whose each "
    "process is, so its per-workload memory is unknown and its compute is estimated",
}


class AllotmentReader(Protocol):
    name: str  # and optionally keep_s: how long its answer may be kept while the processes and pod list stay

    def read(self) -> Allotments: ...


class ProcessReader(Protocol):
    name: str

    def read(self) -> ProcessReading: ...


class OwnerReader(Protocol):
    name: str

    def owners(self, pids: Iterable[int]) -> dict[int, Attribution]: ...


class PodList(Protocol):
    """What the agent asks of a pod list an owner reader may have (`pod_list()`): whether a pod has ended."""

    def ended(self, namespace: str, pod: str) -> bool: ...


# the device readings attribution splits (DCGM field, DeviceReading attribute); a MIG instance's utilization comes
# from the graphics engine's activity (0-1) when the GPU source has no utilization for it
_READINGS = (
    ("DCGM_FI_DEV_FB_USED", "memory_used_mib"),
    ("DCGM_FI_DEV_GPU_UTIL", "util_pct"),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "mem_util_pct"),
    ("DCGM_FI_DEV_POWER_USAGE", "power_w"),
)
ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"


def device_readings(frame: MetricFrame) -> list[DeviceReading]:
    n = len(frame.entities)
    rows = {attr: frame.gpu(name) if frame.has_gpu_field(name) else np.full(n, np.nan) for name, attr in _READINGS}
    if frame.has_gpu_field(ENGINE_ACTIVE):
        util = rows["util_pct"]
        rows["util_pct"] = np.where(np.isnan(util), frame.gpu(ENGINE_ACTIVE) * 100.0, util)
    values = {attr: row.tolist() for attr, row in rows.items()}
    return [DeviceReading(**{attr: float(v[i]) for attr, v in values.items()}) for i in range(n)]


@dataclass(frozen=True, slots=True)
class _Allotted:
    """An allotment reader's last answer and what the node looked like when it was read."""

    at: float
    placement: set[tuple[int, str, int | None]] | None  # (pid, GPU, GPU instance) of each process then
    pods: PodList | None  # the pod list then
    allotments: Allotments


class AttributionSource:
    """Fills the frame's per-device shares; runs after the GPU source in the collector's list."""

    name = "attribution"

    def __init__(
        self,
        allotments: list[AllotmentReader] | None = None,
        processes: ProcessReader | None = None,
        owners: OwnerReader | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.allotment_readers = list(allotments or [])
        self.clock = clock
        self.allotment_reads = 0  # reads of the allotment readers, for tests and the curious
        self._allotted: dict[int, _Allotted] = {}  # the last answer of each reader that keeps one
        self.process_reader = processes
        self.owner_reader = owners
        self._failing: dict[str, str] = {}
        self._attributor: Attributor | None = None
        self._kept: tuple[tuple[Allotment, ...], PodList, tuple[Allotment, ...]] | None = None
        self.notes_said: set[str] = set()
        for kind in INPUTS:
            if not self._configured(kind):
                log.info("attribution: %s", WITHOUT[kind])

    def _configured(self, kind: str) -> bool:
        if kind == "allotments":
            return bool(self.allotment_readers)
        return (self.process_reader if kind == "processes" else self.owner_reader) is not None

    def collect(self, frame: MetricFrame) -> None:
        reading = None
        if self.process_reader is not None:
            reading = self._try("processes", self.process_reader.name, self.process_reader.read, frame)
        listed = None  # the owner reader's pod list: it tells a pod that has ended (a kubelet may still list its
        pod_list: Callable[[], PodList | None] | None = getattr(self.owner_reader, "pod_list", None)  # devices)
        if self.allotment_readers and pod_list is not None and self.owner_reader is not None:
            listed = self._try("owners", self.owner_reader.name, pod_list, frame)
        allot = self._allotments(frame, reading, listed)
        if allot is not None and listed is not None:
            allot = Allotments(self._running(allot.allotments, listed), allot.replicas)
        owners: dict[int, Attribution] | None = None
        if self.owner_reader is not None:
            pids = sorted({p.pid for p in reading.processes}) if reading is not None else []
            reader = self.owner_reader
            owners = self._try("owners", reader.name, lambda: reader.owners(pids), frame)
        inputs = AttributionInputs(
            allotments=None if allot is None else allot.allotments,
            processes=reading,
            owners=owners,
            replicas=allot.replicas if allot is not None else {},
        )
        if self._attributor is None or self._attributor.entities is not frame.entities:  # changes with the GPUs
            self._attributor = Attributor(frame.entities)
        result = self._attributor.attribute(device_readings(frame), inputs)
        for note in result.notes:
            if note not in self.notes_said:
                self.notes_said.add(note)
                log.warning("attribution: %s", note)
        for i, device in enumerate(result.devices):
            frame.set_shares(i, device)
            holders = device.holders if device is not None else ()
            pods = [h for h in holders if h.pod]
            frame.set_attribution(i, pods[0] if len(pods) == 1 and len(holders) == 1 else None)
            frame.set_jobs(i, tuple(h.hpc_job for h in holders if h.hpc_job))

    def _running(self, given: tuple[Allotment, ...], pods: PodList) -> tuple[Allotment, ...]:
        """The allotments of pods that have not ended; judged again only when the allotments or the list change."""
        if self._kept is None or self._kept[1] is not pods or self._kept[0] != given:
            kept = tuple(a for a in given if not (a.holder.pod and pods.ended(a.holder.namespace, a.holder.pod)))
            self._kept = (given, pods, kept)
        return self._kept[2]

    def _allotments(
        self, frame: MetricFrame, reading: ProcessReading | None, listed: PodList | None
    ) -> Allotments | None:
        """Every reader's allotments. A reader with a `keep_s` (pod-resources: a List over gRPC costs more than the
        rest of attribution) is asked again only when that is up, a process started or ended on a GPU, or the pod
        list changed; its last answer is used otherwise (a failed read is never kept)."""
        if not self.allotment_readers:
            return None
        placement = None if reading is None else {(p.pid, p.gpu_uuid, p.gpu_instance_id) for p in reading.processes}
        now = self.clock()
        found: list[Allotment] = []
        replicas: dict[str, int] = {}
        read_any = False
        for k, reader in enumerate(self.allotment_readers):
            last = self._allotted.get(k)
            if (
                last is not None
                and now - last.at < getattr(reader, "keep_s", 0.0)
                and last.placement == placement
                and last.pods is listed
            ):
                got: Allotments | None = last.allotments
            else:
                got = self._try("allotments", reader.name, reader.read, frame)
                self.allotment_reads += 1
                if got is None:
                    self._allotted.pop(k, None)
                else:
                    self._allotted[k] = _Allotted(now, placement, listed, got)
            if got is not None:
                read_any = True
                found.extend(got.allotments)
                replicas.update(got.replicas)
        return Allotments(tuple(found), replicas) if read_any else None

    def _try(self, kind: str, name: str, fn: Callable[[], T], frame: MetricFrame) -> T | None:
        try:
            value = fn()
        except Exception as exc:  # a failing reader costs this collection its part, never the agent
            why = exc.message if isinstance(exc, GpufleetError) else f"{type(exc).__name__}: {exc}"
            if self._failing.get(name) != why:
                log.warning("attribution: reading %s failed: %s", name, why)
            self._failing[name] = why
            self._state(frame, kind, name, "down")
            return None
        if self._failing.pop(name, None) is not None:
            log.info("attribution: reading %s works again", name)
        self._state(frame, kind, name, "up")
        return value

    @staticmethod
    def _state(frame: MetricFrame, kind: str, name: str, state: str) -> None:
        for other in ("up", "down"):
            frame.remove_gauge(INPUT_METRIC, {"input": kind, "reader": name, "state": other})
        frame.set_gauge(INPUT_METRIC, {"input": kind, "reader": name, "state": state}, 1.0)
