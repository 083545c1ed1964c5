"""The processes on each GPU through NVML, for per-workload attribution (telemetry.attribution): each compute
process with the memory the driver accounts to it, the GPU instance it runs in on a MIG GPU, whether it is an MPS
client, and its SM and memory utilization over the interval since the last read.

Per physical GPU, each collection:

- `nvmlDeviceGetComputeRunningProcesses` lists the compute processes (the MPS server, nvidia-cuda-mps-server, is
  one of them; it usually belongs to no workload) and `nvmlDeviceGetMPSComputeRunningProcesses` the MPS clients
  (mps=True; a client listed by both is one process). usedGpuMemory is bytes, or NVML_VALUE_NOT_AVAILABLE where
  the driver does not account it per process (Windows WDDM, some containers): memory None.
- `nvmlDeviceGetProcessUtilization(handle, lastSeenTimeStamp)` returns the samples newer than the timestamp, one
  per process that ran kernels in a sample period. Each process's samples are averaged; a GPU whose call works is
  `sampled`, and a process there without a sample ran no kernel (sm_util 0). NOT_FOUND is "no sample since the
  timestamp" (sampled, all idle); NOT_SUPPORTED (MIG mode, GPUs before Maxwell) is not sampled. The first read
  (timestamp 0) averages what the driver's sample buffer holds. Under MPS the clients' kernels run in the
  server's context, so a GPU with MPS clients is not counted as sampled; nor is a MIG GPU.
- On a MIG GPU each process carries the GPU instance (gpuInstanceId) it runs in. Where the parent's list cannot
  say (no permission: NVML gives the aggregate list on a parent handle only to a privileged caller; or bindings
  of the unversioned v1 struct, which has pid and memory only), each MIG device's own list is read instead
  (nvmlDeviceGetMaxMigDeviceCount, nvmlDeviceGetMigDeviceHandleByIndex, nvmlDeviceGetGpuInstanceId).
- Which entry point: nvidia-ml-py's unversioned call is the _v3 one (added in R510), which it reports as
  NVMLLibraryMismatchError where the driver lacks it; the _v2 call (pid, memory, GI, CI) is read then.
- Process names (`nvmlSystemGetProcessName`) are cached per pid; one NVML cannot resolve stays empty.

An NVML error on one GPU or one call costs that GPU's part (logged once while it lasts), never the others.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpufleet.model.attribution import GpuProcess, ProcessReading
from gpufleet.sources.gpu.failing_readings import FailingReadings
from gpufleet.sources.gpu.nvml import mig_device_handles, mig_enabled

if TYPE_CHECKING:
    from gpufleet.sources.gpu.nvml import NvmlSource

log = logging.getLogger("gpufleet.nvml")

NOT_AVAILABLE = 0xFFFFFFFFFFFFFFFF  # NVML_VALUE_NOT_AVAILABLE as an unsigned long long
NO_INSTANCE = 0xFFFFFFFF  # gpuInstanceId / computeInstanceId of a process outside MIG
# nvmlReturn_t values the reader tells apart (as nvml.h numbers them)
NVML_SUCCESS, NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_NOT_FOUND, NVML_ERROR_FUNCTION_NOT_FOUND = 0, 3, 6, 13

COMPUTE_CALLS = ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetComputeRunningProcesses_v2")
MPS_CALLS = ("nvmlDeviceGetMPSComputeRunningProcesses", "nvmlDeviceGetMPSComputeRunningProcesses_v2")


@dataclass(slots=True)
class _Listed:
    pid: int
    used_memory_mib: float | None
    gpu_instance_id: int | None  # None: outside MIG, or a struct without the field
    mps: bool = False


def _mib(value: Any) -> float | None:
    if value is None or int(value) == NOT_AVAILABLE:
        return None
    return float(value) / 2**20


def _instance(info: Any) -> int | None:
    gi = getattr(info, "gpuInstanceId", None)
    return None if gi is None or int(gi) == NO_INSTANCE else int(gi)


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class NvmlProcesses:
    """The ProcessReader of attribution on an NVIDIA node (see the module's note)."""

    name = "nvml-processes"

    def __init__(self, nvml: Any, handles: Sequence[Any]) -> None:
        self.nvml = nvml
        self.handles = list(handles)
        self._failing = FailingReadings(log)
        self._last_seen: dict[int, int] = {}  # GPU index -> newest sample timestamp read (µs)
        self._names: dict[int, str] = {}
        self._uuids: dict[int, str] = {}
        mismatch = getattr(nvml, "NVMLLibraryMismatchError", None)
        # nvidia-ml-py reports an entry point the driver lacks as NVMLLibraryMismatchError, not an NVMLError
        self._mismatch: tuple[type[BaseException], ...] = (mismatch,) if isinstance(mismatch, type) else ()
        self._errors: tuple[type[BaseException], ...] = (nvml.NVMLError, *self._mismatch)
        self._name_errors: tuple[type[BaseException], ...] = (*self._errors, AttributeError)

    @classmethod
    def of(cls, source: NvmlSource) -> NvmlProcesses:
        """A reader on the bindings and GPUs an NvmlSource opened."""
        return cls(source.nvml, source.handles)

    def read(self) -> ProcessReading:
        found: list[GpuProcess] = []
        sampled: set[str] = set()
        for i, handle in enumerate(self.handles):
            uuid = self._uuid(i, handle)
            if uuid is None:
                continue
            mig = mig_enabled(self.nvml, handle)
            listed = self._listed(i, handle, mig)
            if listed is None:
                continue
            samples = None if mig else self._samples(i, handle)
            if any(p.mps for p in listed):
                samples = None
            if samples is not None:
                sampled.add(uuid)
            for p in listed:
                sm, mem = samples.get(p.pid, (0.0, 0.0)) if samples is not None else (None, None)
                found.append(
                    GpuProcess(
                        pid=p.pid,
                        gpu_uuid=uuid,
                        gpu_instance_id=p.gpu_instance_id if mig else None,
                        used_memory_mib=p.used_memory_mib,
                        sm_util=sm,
                        mem_util=mem,
                        mps=p.mps,
                        name=self._name(p.pid),
                    )
                )
        alive = {p.pid for p in found}
        self._names = {pid: name for pid, name in self._names.items() if pid in alive}
        return ProcessReading(tuple(found), frozenset(sampled))

    # -- per GPU -----------------------------------------------------------------------------------------------

    def _uuid(self, i: int, handle: Any) -> str | None:
        if i not in self._uuids:
            try:
                self._uuids[i] = _text(self.nvml.nvmlDeviceGetUUID(handle))
            except self._errors as exc:
                self._failing.failed(i, "UUID", exc)
                return None
            self._failing.read(i, "UUID")
        return self._uuids[i]

    def _listed(self, i: int, handle: Any, mig: bool) -> list[_Listed] | None:
        """The GPU's compute processes and MPS clients, or None when NVML would not list them."""
        whole = self._processes(i, handle, "")
        if not mig:
            return None if whole is None else list(whole.values())
        if whole is not None and all(p.gpu_instance_id is not None for p in whole.values()):
            return list(whole.values())
        by_instance = self._by_mig_device(i, handle)
        if by_instance is None:
            return None if whole is None else list(whole.values())
        merged = dict(whole or {})
        for pid, p in by_instance.items():
            known = merged.get(pid)
            if known is None:
                merged[pid] = p
            else:
                known.gpu_instance_id = p.gpu_instance_id
                known.mps = known.mps or p.mps
        return list(merged.values())

    def _by_mig_device(self, i: int, handle: Any) -> dict[int, _Listed] | None:
        """The processes of each MIG device, with the GPU instance it belongs to; None when none would list."""
        out: dict[int, _Listed] = {}
        read_any = False
        for slot, device in mig_device_handles(self.nvml, handle):
            field = f"GPU instance of MIG device {slot}"
            try:
                gi = int(self.nvml.nvmlDeviceGetGpuInstanceId(device))
            except self._errors as exc:
                self._failing.failed(i, field, exc)
                continue
            self._failing.read(i, field)
            processes = self._processes(i, device, f" of MIG device {slot}")
            if processes is None:
                continue
            read_any = True
            for pid, p in processes.items():
                p.gpu_instance_id = gi
                out.setdefault(pid, p)
        return out if read_any else None

    def _processes(self, i: int, handle: Any, where: str) -> dict[int, _Listed] | None:
        """Compute processes and MPS clients of one device handle, by pid; None when the compute list failed."""
        field = f"compute processes{where}"
        try:
            compute = self._call(COMPUTE_CALLS, handle)
        except self._errors as exc:
            self._failing.failed(i, field, exc)
            return None
        self._failing.read(i, field)
        out = {int(p.pid): _Listed(int(p.pid), _mib(getattr(p, "usedGpuMemory", None)), _instance(p)) for p in compute}
        field = f"MPS processes{where}"
        try:
            clients = self._call(MPS_CALLS, handle)
        except self._errors as exc:
            if not (self._missing(exc) or self._code(exc) == NVML_ERROR_NOT_SUPPORTED):
                self._failing.failed(i, field, exc)  # a driver or GPU without MPS lists none: not a failure
            return out
        self._failing.read(i, field)
        for p in clients:
            pid = int(p.pid)
            known = out.get(pid)
            if known is None:
                out[pid] = _Listed(pid, _mib(getattr(p, "usedGpuMemory", None)), _instance(p), mps=True)
            else:
                known.mps = True
                if known.used_memory_mib is None:
                    known.used_memory_mib = _mib(getattr(p, "usedGpuMemory", None))
        return out

    def _call(self, names: Sequence[str], handle: Any) -> list[Any]:
        """The first of `names` the bindings and the driver both have (a newer entry point first)."""
        missing: BaseException | None = None
        for name in names:
            call = getattr(self.nvml, name, None)
            if call is None:
                continue
            try:
                return list(call(handle))
            except self._errors as exc:
                if not self._missing(exc):
                    raise
                missing = exc
        raise missing if missing is not None else self.nvml.NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)

    def _missing(self, exc: BaseException) -> bool:
        """Whether the error says the driver has no such entry point."""
        return isinstance(exc, self._mismatch) or self._code(exc) == NVML_ERROR_FUNCTION_NOT_FOUND

    @staticmethod
    def _code(exc: BaseException) -> int | None:
        value = getattr(exc, "value", None)
        return value if isinstance(value, int) else None

    def _samples(self, i: int, handle: Any) -> dict[int, tuple[float, float]] | None:
        """Each pid's mean (SM %, memory %) over the samples since the last read; None when not sampled."""
        field = "process utilization"
        last = self._last_seen.get(i, 0)
        call = getattr(self.nvml, "nvmlDeviceGetProcessUtilization", None)
        if call is None:
            return None
        try:
            samples = list(call(handle, last))
        except self._errors as exc:
            code = self._code(exc)
            if code in (NVML_ERROR_NOT_FOUND, NVML_SUCCESS):  # no sample since `last` (pynvml raises SUCCESS too)
                self._failing.read(i, field)
                return {}
            if code != NVML_ERROR_NOT_SUPPORTED:
                self._failing.failed(i, field, exc)
            return None
        self._failing.read(i, field)
        sums: dict[int, list[float]] = {}
        newest = last
        for s in samples:
            stamp = int(s.timeStamp)
            if stamp <= last:
                continue  # NVML returns only newer ones; a stale one must not count twice
            newest = max(newest, stamp)
            acc = sums.setdefault(int(s.pid), [0.0, 0.0, 0.0])
            acc[0] += float(s.smUtil)
            acc[1] += float(s.memUtil)
            acc[2] += 1.0
        self._last_seen[i] = newest
        return {pid: (sm / n, mem / n) for pid, (sm, mem, n) in sums.items()}

    def _name(self, pid: int) -> str:
        if pid not in self._names:
            try:
                self._names[pid] = _text(self.nvml.nvmlSystemGetProcessName(pid))
            except self._name_errors:
                self._names[pid] = ""  # not resolvable here (another PID namespace, no permission): asked once
        return self._names[pid]
