"""The agent's per-workload attribution: each collection, after the GPU source has filled the device readings, read
who holds each device (pod-resources, a Slurm job map), the processes on each GPU (NVML) and whose each process
is (cgroups), and put each device's shares on the frame (telemetry.attribution has the rules).

Every reader is optional. One that is not there is said once at start, with what attribution loses without it; one
that fails is logged once (and once when it works again) and counts as absent for that collection, so labels are
never carried over from an earlier one. `gpufleet_attribution_input{input,state}` shows each reader's state.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol, TypeVar

import numpy as np

from gpufleet.errors import GpufleetError
from gpufleet.model.attribution import Allotment, Allotments, Attribution, ProcessReading
from gpufleet.telemetry.attribution import AttributionInputs, DeviceReading, EntityIndex, attribute
from gpufleet.telemetry.frame import GpuEntity, MetricFrame

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
    name: str

    def read(self) -> Allotments: ...


class ProcessReader(Protocol):
    name: str

    def read(self) -> ProcessReading: ...


class OwnerReader(Protocol):
    name: str

    def owners(self, pids: Iterable[int]) -> dict[int, Attribution]: ...


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


class AttributionSource:
    """Fills the frame's per-device shares; runs after the GPU source in the collector's list."""

    name = "attribution"

    def __init__(
        self,
        allotments: list[AllotmentReader] | None = None,
        processes: ProcessReader | None = None,
        owners: OwnerReader | None = None,
    ) -> None:
        self.allotment_readers = list(allotments or [])
        self.process_reader = processes
        self.owner_reader = owners
        self._failing: dict[str, str] = {}
        self._index: tuple[Sequence[GpuEntity], EntityIndex] | None = None
        self.notes_said: set[str] = set()
        for kind in INPUTS:
            if not self._configured(kind):
                log.info("attribution: %s", WITHOUT[kind])

    def _configured(self, kind: str) -> bool:
        if kind == "allotments":
            return bool(self.allotment_readers)
        return (self.process_reader if kind == "processes" else self.owner_reader) is not None

    def collect(self, frame: MetricFrame) -> None:
        allot = self._allotments(frame)
        ended = getattr(self.owner_reader, "ended", None)  # a pod list can tell a pod that has ended
        if allot is not None and ended is not None and self.owner_reader is not None:
            given = allot.allotments
            kept = self._try("owners", self.owner_reader.name, lambda: [a for a in given if not ended(a.holder)], frame)
            if kept is not None:
                allot = Allotments(tuple(kept), allot.replicas)
        reading = None
        if self.process_reader is not None:
            reading = self._try("processes", self.process_reader.name, self.process_reader.read, frame)
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
        if self._index is None or self._index[0] is not frame.entities:  # entities change only with the GPUs
            self._index = (frame.entities, EntityIndex(frame.entities))
        result = attribute(frame.entities, device_readings(frame), inputs, self._index[1])
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

    def _allotments(self, frame: MetricFrame) -> Allotments | None:
        if not self.allotment_readers:
            return None
        found: list[Allotment] = []
        replicas: dict[str, int] = {}
        read_any = False
        for reader in self.allotment_readers:
            got = self._try("allotments", reader.name, reader.read, frame)
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
