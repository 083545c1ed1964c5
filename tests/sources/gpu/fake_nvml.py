"""nvidia-ml-py with the driver replaced by a host described as data, and the builder that describes a host from
nvidia-smi captures, so NvmlSource and NvmlProcesses run on recorded numbers.

The fake is nvidia-ml-py's own module for everything but the calls that would reach the driver: its error classes,
constants and ctypes structures, and its way of handing back a process list (a friendly object per
`c_nvmlProcessInfo_v2_t`, usedGpuMemory None where the driver said NVML_VALUE_NOT_AVAILABLE). A device handle is
the GPU's index; a MIG device handle is (GPU index, MIG slot). An NVML function it does not define answers
FUNCTION_NOT_FOUND, as a driver without it would.

From a capture: the Processes: table gives the processes (C and C+G in the compute list, M in the MPS list, M+C in
both; G-only rows in neither), `nvidia-smi -L` the UUIDs and MIG devices, the MIG devices: table each instance's
memory, and `pmon` the utilization samples. pmon prints no timestamps: cycle n's samples get (n + 1) seconds, in
microseconds as NVML stamps them. A pmon line with any engine value printed is a sample (its `-` values read 0);
one with none is no sample, as NVML gives none for a process that ran nothing.
"""

from __future__ import annotations

import ast
import ctypes
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

import pynvml
import yaml

from gpufleet.parsers.nvidia.smi_processes import parse_mig_devices, parse_pmon, parse_process_table
from gpufleet.parsers.nvidia.topo import parse_nvlink_status

NOT_AVAILABLE = pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value
NO_INSTANCE = 0xFFFFFFFF
SECOND_US = 1_000_000


@dataclass
class FakeProcess:
    pid: int
    used_mib: float | None  # None: NVML_VALUE_NOT_AVAILABLE
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    compute: bool = True  # listed by nvmlDeviceGetComputeRunningProcesses
    mps: bool = False  # listed by nvmlDeviceGetMPSComputeRunningProcesses
    name: str = ""


@dataclass
class FakeMig:
    slot: int
    gpu_instance_id: int
    compute_instance_id: int
    uuid: str
    profile: str  # as `nvidia-smi -L` names the MIG device: 1g.10gb, or 1c.3g.71gb for a split GPU instance
    name: str  # NVML's name for the MIG device: "<GPU name> MIG <profile>"
    used_mib: float
    total_mib: float


@dataclass
class FakeGpu:
    uuid: str
    name: str
    bus: str = "00000000:00:00.0"
    minor: int = 0
    mig_mode: tuple[int, int] | None = None  # None: a GPU without MIG (NOT_SUPPORTED)
    migs: list[FakeMig] = field(default_factory=list)
    processes: list[FakeProcess] = field(default_factory=list)
    samples: list[tuple[int, int, int, int]] = field(default_factory=list)  # pid, timestamp µs, SM %, memory %
    sampling: bool = True  # False: nvmlDeviceGetProcessUtilization answers NOT_SUPPORTED (pre-Maxwell)
    instance_ids_in_list: bool = True  # False: the parent's list is the v1 struct (pid and memory only)
    failing: dict[str, int] = field(default_factory=dict)  # NVML function -> the error it answers on this GPU
    failing_parent: dict[str, int] = field(default_factory=dict)  # ... on the GPU's own handle, not its MIG devices
    mismatched: set[str] = field(default_factory=set)  # functions the bindings call but the driver lacks
    used_mib: float = 0.0
    total_mib: float = 0.0
    temperature_c: float | None = None  # None: the call is not answered (FUNCTION_NOT_FOUND)
    util_pct: float | None = None  # nvmlDeviceGetUtilizationRates' gpu (NOT_SUPPORTED in MIG mode)
    power_w: float | None = None
    # NVLink, recovery and fabric state (see "NVLink, recovery action, fabric" below); None: the defaults of a GPU
    # described in full (18 active links without errors, no remap) or, for recovery and fabric, no such reading
    links: list[FakeLink] | None = None
    memory_temp_c: int | None = None  # NVML_FI_DEV_MEMORY_TEMP; None: the GPU has no memory sensor (NOT_SUPPORTED)
    recovery: int | None = None
    fabric: FakeFabric | None = None
    remapped: tuple[int, int, int, int] | None = None  # correctable, uncorrectable, pending, failure


@dataclass
class FakeLink:
    active: bool = True
    replay: int = 0
    recovery: int = 0
    crc_flit: int = 0
    crc_data: int = 0

    def counter(self, which: int) -> int:
        return (self.replay, self.recovery, self.crc_flit, self.crc_data)[which]  # NVML_NVLINK_ERROR_DL_*


# a GPU described in full without links of its own: an H100's 18 active links without errors
_H100_LINKS = tuple(FakeLink() for _ in range(18))
# NVML_FI_DEV_NVLINK_*_ERROR_COUNT_TOTAL: the FakeLink counter each sums
_LINK_TOTALS = {
    pynvml.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL: "crc_flit",
    pynvml.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL: "crc_data",
    pynvml.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL: "replay",
    pynvml.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL: "recovery",
}


@dataclass
class FakeFabric:
    state: int  # nvmlGpuFabricState_t
    status: int  # nvmlReturn_t
    clique_id: int
    cluster_uuid: str
    v2: bool = True  # False: a driver with only nvmlDeviceGetGpuFabricInfo


class FakeNvml:
    def __init__(self, gpus: list[FakeGpu], driver: str = "590.48.01") -> None:
        self.gpus = gpus
        self.driver = driver
        self.calls: list[tuple[str, Any]] = []
        self.unnamed: set[int] = set()  # pids nvmlSystemGetProcessName cannot resolve
        self.record_calls = True  # off for long runs (a benchmark), where the log would grow without end

    def __getattr__(self, name: str) -> Any:
        if name.startswith("nvml"):

            def missing(*args: Any) -> Any:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

            return missing
        return getattr(pynvml, name)  # NVMLError and its subclasses, constants, ctypes structures

    def _gpu(self, fn: str, handle: Any) -> FakeGpu:
        if self.record_calls:
            self.calls.append((fn, handle))
        gpu = self.gpus[handle[0] if isinstance(handle, tuple) else handle]
        if fn in gpu.failing:
            raise pynvml.NVMLError(gpu.failing[fn])
        if fn in gpu.failing_parent and not isinstance(handle, tuple):
            raise pynvml.NVMLError(gpu.failing_parent[fn])
        if fn in gpu.mismatched:
            raise pynvml.NVMLLibraryMismatchError(f"{fn} is not in this driver")
        return gpu

    def _mig(self, gpu: FakeGpu, handle: Any) -> FakeMig | None:
        if not isinstance(handle, tuple):
            return None
        return next(m for m in gpu.migs if m.slot == handle[1])

    # --- the system ------------------------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        return None

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlSystemGetProcessName(self, pid: int) -> str:
        self.calls.append(("nvmlSystemGetProcessName", pid))
        if pid in self.unnamed:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        for gpu in self.gpus:
            for p in gpu.processes:
                if p.pid == pid:
                    return p.name
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)

    # --- a device ----------------------------------------------------------------------------------------------

    def nvmlDeviceGetUUID(self, h: Any) -> str:
        gpu = self._gpu("nvmlDeviceGetUUID", h)
        mig = self._mig(gpu, h)
        return mig.uuid if mig else gpu.uuid

    def nvmlDeviceGetName(self, h: Any) -> str:
        gpu = self._gpu("nvmlDeviceGetName", h)
        mig = self._mig(gpu, h)
        return mig.name if mig else gpu.name

    def nvmlDeviceGetPciInfo(self, h: int) -> Any:
        info = pynvml.nvmlPciInfo_t()
        info.busId = self._gpu("nvmlDeviceGetPciInfo", h).bus.encode()
        return info

    def nvmlDeviceGetMinorNumber(self, h: int) -> int:
        return self._gpu("nvmlDeviceGetMinorNumber", h).minor

    def nvmlDeviceGetMemoryInfo(self, h: Any) -> Any:
        gpu = self._gpu("nvmlDeviceGetMemoryInfo", h)
        mig = self._mig(gpu, h)
        used, total = (mig.used_mib, mig.total_mib) if mig else (gpu.used_mib, gpu.total_mib)
        info = pynvml.c_nvmlMemory_t()
        info.total, info.used, info.free = int(total * 2**20), int(used * 2**20), int((total - used) * 2**20)
        return info

    # --- MIG ---------------------------------------------------------------------------------------------------

    def nvmlDeviceGetTemperature(self, h: Any, sensor: int) -> int:
        gpu = self._gpu("nvmlDeviceGetTemperature", h)
        if gpu.temperature_c is None or isinstance(h, tuple):  # no per-instance temperature
            raise pynvml.NVMLError(
                pynvml.NVML_ERROR_NOT_SUPPORTED
                if gpu.temperature_c is not None
                else pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
            )
        return int(gpu.temperature_c)

    # --- the device's own readings, answered where the GPU has a temperature (a GPU described in full) ------------

    def _full(self, fn: str, h: Any) -> FakeGpu:
        gpu = self._gpu(fn, h)
        if gpu.temperature_c is None or isinstance(h, tuple):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        return gpu

    def nvmlDeviceGetTotalEnergyConsumption(self, h: Any) -> int:
        return 123_456_789 + int(self._full("nvmlDeviceGetTotalEnergyConsumption", h).power_w or 0)

    def nvmlDeviceGetClockInfo(self, h: Any, clock: int) -> int:
        self._full("nvmlDeviceGetClockInfo", h)
        return 1980 if clock == 1 else 2619

    def nvmlDeviceGetPcieReplayCounter(self, h: Any) -> int:
        self._full("nvmlDeviceGetPcieReplayCounter", h)
        return 0

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: Any) -> int:
        self._full("nvmlDeviceGetCurrPcieLinkGeneration", h)
        return 5

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: Any) -> int:
        self._full("nvmlDeviceGetMaxPcieLinkGeneration", h)
        return 5

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: Any) -> int:
        self._full("nvmlDeviceGetCurrPcieLinkWidth", h)
        return 16

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: Any) -> int:
        self._full("nvmlDeviceGetMaxPcieLinkWidth", h)
        return 16

    def nvmlDeviceGetEncoderUtilization(self, h: Any) -> list[int]:
        self._full("nvmlDeviceGetEncoderUtilization", h)
        return [0, 167_000]  # utilization %, sampling period µs

    def nvmlDeviceGetDecoderUtilization(self, h: Any) -> list[int]:
        self._full("nvmlDeviceGetDecoderUtilization", h)
        return [3, 167_000]

    def nvmlDeviceGetTemperatureThreshold(self, h: Any, threshold: int) -> int:
        self._full("nvmlDeviceGetTemperatureThreshold", h)
        if threshold != pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return 87

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: Any) -> int:
        self._full("nvmlDeviceGetCurrentClocksEventReasons", h)
        return 0

    def nvmlDeviceGetViolationStatus(self, h: Any, policy: int) -> Any:
        self._full("nvmlDeviceGetViolationStatus", h)
        status = pynvml.c_nvmlViolationTime_t()
        status.referenceTime, status.violationTime = 0, 0
        return status

    def nvmlDeviceGetTotalEccErrors(self, h: Any, error: int, counter: int) -> int:
        self._full("nvmlDeviceGetTotalEccErrors", h)
        return 0

    def nvmlDeviceGetRetiredPages(self, h: Any, cause: int) -> list[int]:
        self._full("nvmlDeviceGetRetiredPages", h)
        return []

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: Any) -> int:
        self._full("nvmlDeviceGetRetiredPagesPendingStatus", h)
        return 0

    def nvmlDeviceGetRemappedRows(self, h: Any) -> tuple[int, int, int, int]:
        gpu = self._full("nvmlDeviceGetRemappedRows", h)
        return gpu.remapped or (0, 0, 0, 0)

    # --- NVLink, recovery action, fabric -------------------------------------------------------------------------

    def _link(self, fn: str, h: Any, link: int) -> FakeLink:
        gpu = self._full(fn, h)
        links = gpu.links if gpu.links is not None else _H100_LINKS
        if link >= len(links):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return links[link]

    def nvmlDeviceGetNvLinkState(self, h: Any, link: int) -> int:
        return int(self._link("nvmlDeviceGetNvLinkState", h, link).active)

    def nvmlDeviceGetNvLinkErrorCounter(self, h: Any, link: int, counter: int) -> int:
        found = self._link("nvmlDeviceGetNvLinkErrorCounter", h, link)
        if not found.active:  # NVML answers no counters for an inactive link
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return found.counter(counter)

    def nvmlDeviceGetFieldValues(self, h: Any, field_ids: list[Any]) -> Any:
        gpu = self._gpu("nvmlDeviceGetFieldValues", h)
        values = (pynvml.c_nvmlFieldValue_t * len(field_ids))()
        for value, fid in zip(values, field_ids, strict=True):
            value.fieldId = fid if isinstance(fid, int) else fid[0]
            if value.fieldId == pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION and gpu.recovery is not None:
                value.nvmlReturn, value.valueType = pynvml.NVML_SUCCESS, pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
                value.value.uiVal = gpu.recovery
            elif value.fieldId == pynvml.NVML_FI_DEV_MEMORY_TEMP and gpu.memory_temp_c is not None:
                value.nvmlReturn, value.valueType = pynvml.NVML_SUCCESS, pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
                value.value.uiVal = gpu.memory_temp_c
            elif value.fieldId in _LINK_TOTALS and gpu.temperature_c is not None and gpu.links != []:
                # NVML's per-GPU sum of one link error counter over the GPU's links
                value.nvmlReturn, value.valueType = pynvml.NVML_SUCCESS, pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
                counter = _LINK_TOTALS[value.fieldId]  # _H100_LINKS (gpu.links None) count no errors
                value.value.ullVal = sum(getattr(link, counter) for link in gpu.links or ())
            else:  # a field this driver does not give: the value's own return says so, the call succeeds
                value.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
        return values

    def _fabric(self, fn: str, h: Any, info: Any, v2: bool) -> int:
        gpu = self._gpu(fn, h)
        if gpu.fabric is None or (v2 and not gpu.fabric.v2):
            raise pynvml.NVMLError(
                pynvml.NVML_ERROR_NOT_SUPPORTED if gpu.fabric else pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
            )
        out = info._obj  # nvidia-ml-py passes the caller's byref() through to the driver
        out.state, out.status, out.cliqueId = gpu.fabric.state, gpu.fabric.status, gpu.fabric.clique_id
        raw = uuid.UUID(gpu.fabric.cluster_uuid).bytes
        for k, byte in enumerate(raw):
            out.clusterUuid[k] = byte
        return pynvml.NVML_SUCCESS

    def nvmlDeviceGetGpuFabricInfoV(self, h: Any, info: Any) -> int:
        return self._fabric("nvmlDeviceGetGpuFabricInfoV", h, info, v2=True)

    def nvmlDeviceGetGpuFabricInfo(self, h: Any, info: Any) -> int:
        return self._fabric("nvmlDeviceGetGpuFabricInfo", h, info, v2=False)

    def nvmlDeviceGetUtilizationRates(self, h: Any) -> Any:
        gpu = self._gpu("nvmlDeviceGetUtilizationRates", h)
        if gpu.util_pct is None or (gpu.mig_mode is not None and gpu.mig_mode[0] == 1):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        rates = pynvml.c_nvmlUtilization_t()
        rates.gpu, rates.memory = round(gpu.util_pct), 0
        return rates

    def nvmlDeviceGetPowerUsage(self, h: Any) -> int:
        gpu = self._gpu("nvmlDeviceGetPowerUsage", h)
        if gpu.power_w is None or isinstance(h, tuple):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return int(gpu.power_w * 1000)

    def nvmlDeviceGetMigMode(self, h: int) -> list[int]:
        gpu = self._gpu("nvmlDeviceGetMigMode", h)
        if gpu.mig_mode is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return list(gpu.mig_mode)

    def nvmlDeviceGetMaxMigDeviceCount(self, h: int) -> int:
        gpu = self._gpu("nvmlDeviceGetMaxMigDeviceCount", h)
        if gpu.mig_mode is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: int, slot: int) -> tuple[int, int]:
        gpu = self._gpu("nvmlDeviceGetMigDeviceHandleByIndex", h)
        if not any(m.slot == slot for m in gpu.migs):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return (h, slot)

    def nvmlDeviceGetGpuInstanceId(self, h: tuple[int, int]) -> int:
        gpu = self._gpu("nvmlDeviceGetGpuInstanceId", h)
        mig = self._mig(gpu, h)
        assert mig is not None
        return mig.gpu_instance_id

    def nvmlDeviceGetComputeInstanceId(self, h: tuple[int, int]) -> int:
        gpu = self._gpu("nvmlDeviceGetComputeInstanceId", h)
        mig = self._mig(gpu, h)
        assert mig is not None
        return mig.compute_instance_id

    def nvmlDeviceGetGpuInstanceById(self, h: int, gi: int) -> tuple[int, int]:
        self._gpu("nvmlDeviceGetGpuInstanceById", h)
        return (h, gi)

    def nvmlGpuInstanceGetInfo(self, instance: tuple[int, int]) -> Any:
        self._gpu("nvmlGpuInstanceGetInfo", instance[0])
        info = pynvml.c_nvmlGpuInstanceInfo_t()
        info.id, info.profileId = instance[1], instance[1]  # the fake's profile id is the GI id
        return info

    def nvmlDeviceGetGpuInstanceProfileInfoById(self, h: int, profile_id: int) -> Any:
        gpu = self._gpu("nvmlDeviceGetGpuInstanceProfileInfoById", h)
        mig = next(m for m in gpu.migs if m.gpu_instance_id == profile_id)
        info = pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
        info.id, info.name = profile_id, f"MIG {mig.profile.split('c.')[-1]}".encode()  # the GPU instance's profile
        return info

    # --- processes ---------------------------------------------------------------------------------------------

    def _listed(self, fn: str, h: Any, mps: bool) -> list[Any]:
        gpu = self._gpu(fn, h)
        mig = self._mig(gpu, h)
        out = []
        for p in gpu.processes:
            if not (p.mps if mps else p.compute):
                continue
            if mig is not None and (p.gpu_instance_id, p.compute_instance_id) != (
                mig.gpu_instance_id,
                mig.compute_instance_id,
            ):
                continue
            used = NOT_AVAILABLE if p.used_mib is None else int(p.used_mib * 2**20)
            if mig is None and not gpu.instance_ids_in_list:
                v1 = {"pid": p.pid, "usedGpuMemory": None if p.used_mib is None else used}
                out.append(pynvml.nvmlFriendlyObject(v1))
                continue
            info = pynvml.c_nvmlProcessInfo_v2_t()
            info.pid, info.usedGpuMemory = p.pid, used
            info.gpuInstanceId = NO_INSTANCE if p.gpu_instance_id is None else p.gpu_instance_id
            info.computeInstanceId = NO_INSTANCE if p.compute_instance_id is None else p.compute_instance_id
            obj = pynvml.nvmlStructToFriendlyObject(info)
            if obj.usedGpuMemory == NOT_AVAILABLE:
                obj.usedGpuMemory = None  # what nvidia-ml-py does with NVML_VALUE_NOT_AVAILABLE
            out.append(obj)
        return out

    def nvmlDeviceGetComputeRunningProcesses(self, h: Any) -> list[Any]:
        return self._listed("nvmlDeviceGetComputeRunningProcesses", h, mps=False)

    def nvmlDeviceGetComputeRunningProcesses_v2(self, h: Any) -> list[Any]:
        return self._listed("nvmlDeviceGetComputeRunningProcesses_v2", h, mps=False)

    def nvmlDeviceGetMPSComputeRunningProcesses(self, h: Any) -> list[Any]:
        return self._listed("nvmlDeviceGetMPSComputeRunningProcesses", h, mps=True)

    def nvmlDeviceGetProcessUtilization(self, h: int, last_seen: int) -> list[Any]:
        gpu = self._gpu("nvmlDeviceGetProcessUtilization", h)
        if self.record_calls:
            self.calls.append(("lastSeenTimeStamp", last_seen))
        if (gpu.mig_mode is not None and gpu.mig_mode[0] == 1) or not gpu.sampling:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        out = []
        for pid, stamp, sm, mem in gpu.samples:
            if stamp > last_seen:
                sample = pynvml.c_nvmlProcessUtilizationSample_t()
                sample.pid, sample.timeStamp, sample.smUtil, sample.memUtil = pid, stamp, sm, mem
                out.append(sample)
        if not out:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return out


# --- from captures ----------------------------------------------------------------------------------------------

_GPU_LINE = re.compile(r"^GPU (?P<index>\d+): (?P<name>.+?) \(UUID: (?P<uuid>[^)]+)\)")
_MIG_LINE = re.compile(r"^\s+MIG (?P<profile>\S+)\s+Device\s+(?P<slot>\d+): \(UUID: (?P<uuid>[^)]+)\)")


def host_from_capture(
    table: str, gpu_list: str | None = None, pmon: str | None = None, uuids: tuple[str, ...] = (), name: str = ""
) -> list[FakeGpu]:
    """The GPUs a capture shows. Without `nvidia-smi -L`, `uuids` and `name` stand in for what it would say."""
    names: dict[int, str] = {}
    ids: dict[int, str] = dict(enumerate(uuids))
    mig_names: dict[tuple[int, int], tuple[str, str]] = {}  # (GPU, slot) -> (profile, MIG UUID)
    gpu = -1
    for line in (gpu_list or "").splitlines():
        if m := _GPU_LINE.match(line):
            gpu = int(m["index"])
            names[gpu], ids[gpu] = m["name"], m["uuid"]
        elif m := _MIG_LINE.match(line):
            mig_names[(gpu, int(m["slot"]))] = (m["profile"], m["uuid"])
    rows = parse_process_table(table)
    devices = parse_mig_devices(table)
    count = max([*ids, *(r.gpu for r in rows), *(d.gpu for d in devices), -1]) + 1
    gpus = [FakeGpu(uuid=ids[i], name=names.get(i, name), minor=i, bus=f"00000000:{i:02X}:00.0") for i in range(count)]
    for d in devices:
        profile, uuid = mig_names[(d.gpu, d.mig_device)]
        g = gpus[d.gpu]
        g.mig_mode = (1, 1)
        g.migs.append(
            FakeMig(
                d.mig_device, d.gpu_instance_id, d.compute_instance_id, uuid, profile, f"{g.name} MIG {profile}",
                d.memory_used_mib, d.memory_total_mib,
            )
        )  # fmt: skip
    for r in rows:
        parts = r.type.split("+")
        if "C" in parts or "M" in parts:
            gpus[r.gpu].processes.append(
                FakeProcess(
                    r.pid, r.used_memory_mib, r.gpu_instance_id, r.compute_instance_id,
                    compute="C" in parts, mps="M" in parts, name=r.name,
                )
            )  # fmt: skip
    for s in parse_pmon(pmon) if pmon else []:
        if s.sampled and s.gpu < count:
            gpus[s.gpu].samples.append((s.pid, (s.cycle + 1) * SECOND_US, int(s.sm_util or 0), int(s.mem_util or 0)))
    return gpus


def mig_handle_count(fake: FakeNvml) -> int:
    """How many MIG device handles the code under test asked for."""
    return sum(1 for fn, _ in fake.calls if fn == "nvmlDeviceGetMigDeviceHandleByIndex")


# --- NVLink, recovery action, fabric from captures ----------------------------------------------------------------

_ERRORS_LINE = re.compile(r"^\s*Link (?P<link>\d+): (?P<what>Replay|Recovery|CRC|CRC Flit|CRC Data) Errors: (?P<n>\d+)")
_FABRIC_LINE = re.compile(r"^\s*(?P<key>State|Status|CliqueId|ClusterUUID)\s*: (?P<value>.+?)\s*$")
_FABRIC_STATES = {"not supported": 0, "not started": 1, "in progress": 2, "completed": 3}
_STATUSES = {"success": 0, "insufficient resources": pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES}
_ACTIONS = {"none": 0, "reset": 1, "reboot": 2, "drain p2p": 3, "drain and reset": 4}  # nvidia-smi's names


def links_from_capture(errors: str, status: str, count: int = 18) -> list[FakeLink]:
    """A GPU's links from `nvidia-smi nvlink -e` and `-s` of its first GPU. A link `[...]` elides reads as the
    printed ones (active, the counters of the last link printed before it)."""
    printed: dict[int, FakeLink] = {}
    names = {"Replay": "replay", "Recovery": "recovery", "CRC": "crc_flit", "CRC Flit": "crc_flit",
             "CRC Data": "crc_data"}  # fmt: skip
    for line in errors.splitlines():
        if line.startswith("GPU ") and printed:
            break
        if m := _ERRORS_LINE.match(line):
            setattr(printed.setdefault(int(m["link"]), FakeLink()), names[m["what"]], int(m["n"]))
    inactive = {s.link for g in parse_nvlink_status(status)[:1] for s in g.links if not s.active}
    out, last = [], FakeLink()
    for link in range(count):
        last = printed.get(link, last)
        out.append(FakeLink(link not in inactive, last.replay, last.recovery, last.crc_flit, last.crc_data))
    return out


def fabric_from_capture(text: str) -> FakeFabric:
    """A GPU's fabric registration from the Fabric section of `nvidia-smi -q`."""
    got = {m["key"]: m["value"] for line in text.splitlines() if (m := _FABRIC_LINE.match(line))}
    return FakeFabric(
        _FABRIC_STATES[got["State"].lower()], _STATUSES[got["Status"].lower()], int(got["CliqueId"]),
        got["ClusterUUID"],
    )  # fmt: skip


def recovery_from_csv(text: str) -> dict[int, int]:
    """Each GPU's recovery action from `nvidia-smi --query-gpu=index,gpu_recovery_action --format=csv,noheader`."""
    out = {}
    for line in text.splitlines():
        index, _, action = line.partition(", ")
        if index.strip().isdigit():
            out[int(index)] = _ACTIONS[action.strip().lower()]
    return out


def remapped_from_capture(text: str) -> tuple[int, int, int, int]:
    """(correctable, uncorrectable, pending, failure) from the Remapped Rows section of `nvidia-smi -q`."""
    got = dict(re.findall(r"^\s*(Correctable Error|Uncorrectable Error|Pending|Remapping Failure Occurred)\s*: (\S+)",
                          text, re.MULTILINE))  # fmt: skip
    yes = {"Yes": 1, "No": 0}
    failure = yes[got.get("Remapping Failure Occurred", "No")]
    return int(got["Correctable Error"]), int(got["Uncorrectable Error"]), yes[got["Pending"]], failure


def memory_temps_from_capture(text: str) -> list[int | None]:
    """Each GPU's "Memory Current Temp" from `nvidia-smi -q -d temperature`, in order; None where it prints N/A."""
    found = re.findall(r"^\s*Memory Current Temp\s*: (\d+) C|^\s*Memory Current Temp\s*: N/A", text, re.MULTILINE)
    return [int(t) if t else None for t in found]


# === GPM (GPU Performance Monitoring) ================================================================================
# nvidia-ml-py's GPM calls answered from recorded data, for sources/gpu/nvml_gpm.py. FakeNvml itself has none of them:
# nvidia-ml-py raises FUNCTION_NOT_FOUND for each, as a driver without GPM would. GpmFakeNvml is a driver with GPM:
# nvmlGpmQueryDeviceSupport says yes for a GPU (or its GPU instances) with a recording and no for the others (a
# pre-Hopper GPU); nvmlGpmSampleAlloc hands out nvidia-ml-py's own opaque sample pointer (c_nvmlGpmSample_t) to a
# buffer of its own; nvmlGpmSampleGet and nvmlGpmMigSampleGet mark the buffer as the next sample of that GPU or GPU
# instance; nvmlGpmMetricsGet fills the caller's c_nvmlGpmMetricsGet_t from the recording of the interval between
# its two samples (the k-th interval for samples k and k+1, round the recording again after its last), each metric
# with its own nvmlReturn (NOT_SUPPORTED for one the recording lacks), checking what the driver checks: the struct's
# version, two samples of one GPU or instance, the second later than the first.

GpmKey = int | tuple[int, int]  # a GPU's index, or (GPU index, GPU instance id)


@dataclass
class GpmRecording:
    """What nvmlGpmMetricsGet answered for one GPU or GPU instance, interval after interval: GPM metric id -> value
    in GPM's own units (percent 0-100, MiB/s)."""

    intervals: list[dict[int, float]]


class GpmFakeNvml(FakeNvml):
    def __init__(self, gpus: list[FakeGpu], gpm: dict[GpmKey, GpmRecording], driver: str = "590.48.01") -> None:
        super().__init__(gpus, driver)
        self.gpm = gpm
        self._buffers: dict[int, Any] = {}  # address -> the buffer a sample pointer points at
        self._samples: dict[int, tuple[GpmKey, int]] = {}  # address -> (whose sample, its number)
        self._taken: dict[GpmKey, int] = {}

    def _has_gpm(self, gpu: int) -> bool:
        return any(key == gpu or (isinstance(key, tuple) and key[0] == gpu) for key in self.gpm)

    @staticmethod
    def _address(sample: Any) -> int:
        return ctypes.cast(sample, ctypes.c_void_p).value or 0

    def nvmlGpmQueryDeviceSupport(self, h: Any) -> Any:
        self._gpu("nvmlGpmQueryDeviceSupport", h)
        support = pynvml.c_nvmlGpmSupport_t()
        support.version = pynvml.NVML_GPM_SUPPORT_VERSION
        support.isSupportedDevice = int(not isinstance(h, tuple) and self._has_gpm(h))
        return support

    def nvmlGpmSampleAlloc(self) -> Any:
        buffer = ctypes.create_string_buffer(64)
        sample = ctypes.cast(buffer, pynvml.c_nvmlGpmSample_t)
        self._buffers[self._address(sample)] = buffer
        return sample

    def nvmlGpmSampleFree(self, sample: Any) -> None:
        address = self._address(sample)
        if self._buffers.pop(address, None) is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        self._samples.pop(address, None)

    def _take(self, fn: str, h: Any, key: GpmKey, sample: Any) -> Any:
        self._gpu(fn, h)
        if isinstance(h, tuple) or not self._has_gpm(h):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        address = self._address(sample)
        if address not in self._buffers:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        self._taken[key] = self._taken.get(key, 0) + 1
        self._samples[address] = (key, self._taken[key])
        return sample

    def nvmlGpmSampleGet(self, h: Any, sample: Any) -> Any:
        return self._take("nvmlGpmSampleGet", h, h, sample)

    def nvmlGpmMigSampleGet(self, h: Any, gpu_instance: int, sample: Any) -> Any:
        gpu = self.gpus[h]
        if not any(m.gpu_instance_id == gpu_instance for m in gpu.migs):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return self._take("nvmlGpmMigSampleGet", h, (h, gpu_instance), sample)

    def nvmlGpmMetricsGet(self, request: Any) -> Any:
        if request.version != pynvml.NVML_GPM_METRICS_GET_VERSION:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        first = self._samples.get(self._address(request.sample1))
        second = self._samples.get(self._address(request.sample2))
        if first is None or second is None or first[0] != second[0] or second[1] <= first[1]:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if self.record_calls:
            self.calls.append(("nvmlGpmMetricsGet", first[0]))
        recording = self.gpm.get(first[0])
        interval = recording.intervals[(first[1] - 1) % len(recording.intervals)] if recording else {}
        for k in range(request.numMetrics):
            metric = request.metrics[k]
            if metric.metricId in interval:
                metric.nvmlReturn, metric.value = pynvml.NVML_SUCCESS, interval[metric.metricId]
            else:
                metric.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
        return request


# --- GPM recordings from captures -------------------------------------------------------------------------------------
# DCGM's profiling fields as DCGM read them through GPM on Hopper (DCGM 3.3.9 and later: dcgmlib/src/dcgm_fields.cpp
# DcgmFieldIdToNvmlGpmMetricId), with DCGM's conversion to undo: GPM's percent / 100 (DcgmGpmManager.cpp), GPM's
# MiB/s * 1024 * 1024 (DcgmCacheManager.cpp). Keyed by the names the captured Python session gives the fields.
_DCGM_READ_AS = {
    "sm_active": (pynvml.NVML_GPM_METRIC_SM_UTIL, 100.0),
    "sm_occupancy": (pynvml.NVML_GPM_METRIC_SM_OCCUPANCY, 100.0),
    "tensor_active": (pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL, 100.0),
    "dram_active": (pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL, 100.0),
    "fp64_active": (pynvml.NVML_GPM_METRIC_FP64_UTIL, 100.0),
    "fp32_active": (pynvml.NVML_GPM_METRIC_FP32_UTIL, 100.0),
    "fp16_active": (pynvml.NVML_GPM_METRIC_FP16_UTIL, 100.0),
    "pcie_tx_bytes": (pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC, 1 / 2**20),
    "pcie_rx_bytes": (pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC, 1 / 2**20),
    "nvlink_tx_bytes": (pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC, 1 / 2**20),
    "nvlink_rx_bytes": (pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC, 1 / 2**20),
}


def gpm_from_dcgm_session(text: str) -> list[tuple[FakeGpu, GpmRecording, dict[str, float]]]:
    """The GPUs of a printed DCGM field dict (`print(gpus)`: UUID -> {name, uuid, fp64_active, ...}), each with the
    GPM answers DCGM converted, and the DCGM values themselves."""
    body = text.split("\n", 1)[1].rstrip().rstrip(",")
    records = ast.literal_eval(body if body.endswith("}}") else body + "}")
    out = []
    for i, (gpu_uuid, rec) in enumerate(records.items()):
        metrics = {metric: float(rec[name]) * factor for name, (metric, factor) in _DCGM_READ_AS.items()}
        gpu = FakeGpu(uuid=gpu_uuid, name=rec["name"], minor=i, bus=f"00000000:{0x18 + i:02X}:00.0")
        out.append((gpu, GpmRecording([metrics]), {name: float(rec[name]) for name in _DCGM_READ_AS}))
    return out


def gpm_from_gpud_scan(text: str) -> list[tuple[str, GpmRecording]]:
    """Each GPU's UUID and GPM answers from `gpud scan --poll-gpm-events` (metric id -> value, GPM's units)."""
    return [
        (item["uuid"], GpmRecording([{int(k): float(v) for k, v in item["metrics"].items()}]))
        for item in yaml.safe_load(text)["metrics"]
    ]


_GI_SERIES = re.compile(r'^DCGM_FI_PROF_GR_ENGINE_ACTIVE\{[^}]*GPU_I_ID="(?P<gi>\d+)"[^}]*\} (?P<value>\S+)$', re.M)


def gpm_mig_from_exporter(text: str) -> dict[int, GpmRecording]:
    """Each GPU instance's GRAPHICS_UTIL (percent) from dcgm-exporter's DCGM_FI_PROF_GR_ENGINE_ACTIVE (a ratio)."""
    return {
        int(m["gi"]): GpmRecording([{pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL: float(m["value"]) * 100.0}])
        for m in _GI_SERIES.finditer(text)
    }
