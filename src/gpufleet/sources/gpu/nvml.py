"""NVML through nvidia-ml-py: the real GPU source on a GPU node.

Every reading is taken per device and per field: an NVML error on one GPU or one field leaves that value empty
(NaN, never exported) and the others stand. A missing library or driver is one clear error, not a traceback.

A GPU with MIG mode on (`nvmlDeviceGetMigMode` current 1) and GPU instances is one entity per GPU instance, as
dcgm-exporter labels them: the parent's index, UUID, PCI id and device node, GPU_I_PROFILE and GPU_I_ID, and the
MIG device's own UUID (its lowest compute instance's, the one the device plugin hands out). Only its memory is
read per instance (`nvmlDeviceGetMemoryInfo` on the MIG device handle: FB_USED, FB_FREE), and on Hopper and later
its own profiling fields through GPM (nvml_gpm.py: DCGM_FI_PROF_GR_ENGINE_ACTIVE and the like). NVML has no
per-instance temperature, power, clocks or ECC: every instance repeats its GPU's, as dcgm-exporter writes them (so
a GPU's health stays watched in MIG mode); utilization has no reading in MIG mode and stays empty. The MIG layout
is read when the entities are; a layout changed while the agent runs reads as failing MIG devices until the agent
restarts.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from types import ModuleType
from typing import Any

import numpy as np

from gpufleet.errors import BackendError, DependencyMissingError
from gpufleet.sources.gpu.failing_readings import FailingReadings
from gpufleet.sources.gpu.nvml_gpm import GPM_GPUS, GpmReader, declare
from gpufleet.sources.gpu.nvml_state import (
    FABRIC_CLIQUE,
    FABRIC_STATUS,
    MEMORY_TEMP,
    NVML_FI_DEV_GET_GPU_RECOVERY_ACTION,
    NVML_FI_DEV_MEMORY_TEMP,
    RECOVERY_ACTION,
    ROW_REMAP_PENDING,
    fabric_info,
    field_values,
)
from gpufleet.telemetry.field_sources import SourceFields
from gpufleet.telemetry.frame import GpuEntity, MetricFrame
from gpufleet.telemetry.gpm_fields import load_gpm_fields

log = logging.getLogger("gpufleet.nvml")

NVLINK_MAX_LINKS = 18
# nvmlNvLinkErrorCounter_t
NVLINK_ERROR_DL_REPLAY = 0
NVLINK_ERROR_DL_RECOVERY = 1
NVLINK_ERROR_DL_CRC_FLIT = 2
NVLINK_ERROR_DL_CRC_DATA = 3
# nvmlMemoryErrorType_t / nvmlEccCounterType_t
MEMORY_ERROR_CORRECTED, MEMORY_ERROR_UNCORRECTED = 0, 1
VOLATILE_ECC, AGGREGATE_ECC = 0, 1
# nvmlPageRetirementCause_t
PAGE_RETIREMENT_MULTIPLE_SBE, PAGE_RETIREMENT_DBE = 0, 1
# nvmlPerfPolicyType_t
PERF_POLICY_POWER, PERF_POLICY_THERMAL = 0, 1
TEMPERATURE_GPU = 0
TEMPERATURE_THRESHOLD_SLOWDOWN = 1  # nvmlTemperatureThresholds_t
CLOCK_SM, CLOCK_MEM = 1, 2


def _ident(value: Any) -> float:
    return float(value)


def _milli(value: Any) -> float:
    return float(value) / 1000.0


def _mib(value: Any) -> float:
    return float(value) / 2**20


def _count(value: Any) -> float:
    return float(len(value))


def _gpu_util(value: Any) -> float:
    return float(value.gpu)


def _mem_util(value: Any) -> float:
    return float(value.memory)


def _used(value: Any) -> float:
    return _mib(value.used)


def _free(value: Any) -> float:
    return _mib(value.free)


def _violation(value: Any) -> float:
    return float(value.violationTime)


def _sampled(value: Any) -> float:
    return float(value[0])  # (utilization %, sampling period in µs)


def _convert(convert: Callable[[Any], float], call: Callable[..., Any], *args: Any) -> float:
    return convert(call(*args))


# (DCGM field, NVML function, extra arguments after the handle, conversion to the field's unit). Each is the NVML
# call DCGM itself answers the field with (dcgmlib/src/DcgmCacheManager.cpp), so the value means what
# dcgm-exporter's does.
READINGS: tuple[tuple[str, str, tuple[int, ...], Callable[[Any], float]], ...] = (
    ("DCGM_FI_DEV_GPU_TEMP", "nvmlDeviceGetTemperature", (TEMPERATURE_GPU,), _ident),
    ("DCGM_FI_DEV_POWER_USAGE", "nvmlDeviceGetPowerUsage", (), _milli),  # mW -> W
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "nvmlDeviceGetTotalEnergyConsumption", (), _ident),  # mJ
    ("DCGM_FI_DEV_SM_CLOCK", "nvmlDeviceGetClockInfo", (CLOCK_SM,), _ident),
    ("DCGM_FI_DEV_MEM_CLOCK", "nvmlDeviceGetClockInfo", (CLOCK_MEM,), _ident),
    ("DCGM_FI_DEV_GPU_UTIL", "nvmlDeviceGetUtilizationRates", (), _gpu_util),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "nvmlDeviceGetUtilizationRates", (), _mem_util),
    ("DCGM_FI_DEV_FB_USED", "nvmlDeviceGetMemoryInfo", (), _used),
    ("DCGM_FI_DEV_FB_FREE", "nvmlDeviceGetMemoryInfo", (), _free),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "nvmlDeviceGetPcieReplayCounter", (), _ident),
    ("DCGM_FI_DEV_PCIE_LINK_GEN", "nvmlDeviceGetCurrPcieLinkGeneration", (), _ident),
    ("DCGM_FI_DEV_PCIE_LINK_WIDTH", "nvmlDeviceGetCurrPcieLinkWidth", (), _ident),
    ("DCGM_FI_DEV_PCIE_MAX_LINK_GEN", "nvmlDeviceGetMaxPcieLinkGeneration", (), _ident),  # the GPU's and slot's
    ("DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH", "nvmlDeviceGetMaxPcieLinkWidth", (), _ident),
    ("DCGM_FI_DEV_ENC_UTIL", "nvmlDeviceGetEncoderUtilization", (), _sampled),
    ("DCGM_FI_DEV_DEC_UTIL", "nvmlDeviceGetDecoderUtilization", (), _sampled),
    ("DCGM_FI_DEV_SLOWDOWN_TEMP", "nvmlDeviceGetTemperatureThreshold", (TEMPERATURE_THRESHOLD_SLOWDOWN,), _ident),
    ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "nvmlDeviceGetCurrentClocksEventReasons", (), _ident),
    ("DCGM_FI_DEV_POWER_VIOLATION", "nvmlDeviceGetViolationStatus", (PERF_POLICY_POWER,), _violation),
    ("DCGM_FI_DEV_THERMAL_VIOLATION", "nvmlDeviceGetViolationStatus", (PERF_POLICY_THERMAL,), _violation),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "nvmlDeviceGetTotalEccErrors", (MEMORY_ERROR_CORRECTED, VOLATILE_ECC), _ident),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "nvmlDeviceGetTotalEccErrors", (MEMORY_ERROR_UNCORRECTED, VOLATILE_ECC), _ident),
    ("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "nvmlDeviceGetTotalEccErrors", (MEMORY_ERROR_CORRECTED, AGGREGATE_ECC), _ident),
    ("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "nvmlDeviceGetTotalEccErrors", (MEMORY_ERROR_UNCORRECTED, AGGREGATE_ECC), _ident),
    ("DCGM_FI_DEV_RETIRED_SBE", "nvmlDeviceGetRetiredPages", (PAGE_RETIREMENT_MULTIPLE_SBE,), _count),
    ("DCGM_FI_DEV_RETIRED_DBE", "nvmlDeviceGetRetiredPages", (PAGE_RETIREMENT_DBE,), _count),
    ("DCGM_FI_DEV_RETIRED_PENDING", "nvmlDeviceGetRetiredPagesPendingStatus", (), _ident),
)
REMAPPED_ROWS = (
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
)
NVLINK_ERRORS = (
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
)
# Per NVLink link, in DCGM's link-scoped fields (telemetry/fields.py NVLINK): the four error counters as DCGM reads
# them (nvmlDeviceGetNvLinkErrorCounter with the link and NVML_NVLINK_ERROR_DL_*), and the link's state
# (nvmlDeviceGetNvLinkState: 1 active, 0 inactive; DCGM reads NVML_FI_DEV_NVLINK_GET_STATE, whose 0 and 1 mean the same)
LINK_ERRORS = (
    ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_PER_LINK_TOTAL", NVLINK_ERROR_DL_CRC_FLIT),
    ("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_PER_LINK_TOTAL", NVLINK_ERROR_DL_CRC_DATA),
    ("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_PER_LINK_TOTAL", NVLINK_ERROR_DL_REPLAY),
    ("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_PER_LINK_TOTAL", NVLINK_ERROR_DL_RECOVERY),
)
LINK_STATE = "DCGM_FI_DEV_NVLINK_GET_STATE"
LINK_FIELDS = (*(name for name, _ in LINK_ERRORS), LINK_STATE)
_STATE_ROW = len(LINK_ERRORS)
# NVML's per-GPU totals of the same four counters, in LINK_ERRORS' order (nvml.h, nvidia-ml-py 13.615.71:
# NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL 38, ..._CRC_DATA_... 45, ..._REPLAY_... 52, ..._RECOVERY_... 59): read
# each collection in one nvmlDeviceGetFieldValues call, they say whether the links need walking
NVML_LINK_ERROR_TOTALS = (38, 45, 52, 59)
# what one nvmlDeviceGetFieldValues call a GPU reads each collection
FIELD_VALUE_IDS = (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, NVML_FI_DEV_MEMORY_TEMP, *NVML_LINK_ERROR_TOTALS)
LINK_REFRESH_S = 10.0
_TOTALS = frozenset(NVML_LINK_ERROR_TOTALS)
# what NVML gives only some GPUs or drivers (sources/gpu/nvml_state.py)
GPU_STATE_PARTLY = (
    (MEMORY_TEMP, "GPUs with a memory temperature sensor (NVML_FI_DEV_MEMORY_TEMP: HBM GPUs)"),
    (RECOVERY_ACTION, "drivers that give the recovery action (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, R570 and later)"),
    (FABRIC_STATUS, "GPUs of an NVSwitch or multi-node NVLink fabric (nvmlDeviceGetGpuFabricInfoV: HGX, NVL72)"),
    (FABRIC_CLIQUE, "GPUs that joined their NVLink fabric (a clique of an NVSwitch or multi-node NVLink domain)"),
)
# dcgm-exporter's DCGM_FI_PROF_* are DCGM's profiling fields: NVML's GPM fills those it has a metric for on Hopper
# and later GPUs (sources/gpu/nvml_gpm.py, telemetry/data/gpm_fields.csv); the others need DCGM itself
_NEEDS_DCGM = "a DCGM profiling (DCP) counter NVML's GPM has no metric for: it needs DCGM (its host engine)"

# What this source writes into the frame, and why it leaves the other GPU fields of the catalog empty (a field with
# no value is not exported). NVLink counters are written for GPUs with NVLink, remapped rows from Ampere on.
FIELDS = SourceFields(
    "nvml",
    fills=frozenset(
        [
            *(field for field, *_ in READINGS),
            *REMAPPED_ROWS,
            *NVLINK_ERRORS,
            "DCGM_FI_DRIVER_VERSION",
            *LINK_FIELDS,
            ROW_REMAP_PENDING,
        ]
    ),
    partly=(
        *(
            (f.field, GPM_GPUS if f.per_instance else f"{GPM_GPUS}, whole GPUs only (a MIG instance has none)")
            for f in load_gpm_fields()
        ),
        *GPU_STATE_PARTLY,
    ),
    leaves=(
        ("DCGM_FI_PROF_*", _NEEDS_DCGM),
        ("DCGM_FI_DEV_FB_RESERVED", "not read: nvmlDeviceGetMemoryInfo (v1) has no reserved memory"),
        ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "not read by this source"),
        ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "not read by this source (vGPU licensing)"),
        (
            "DCGM_EXP_CLOCK_EVENTS_COUNT",
            "dcgm-exporter counts DCGM's samples of the clock-event reasons within its window; "
            "NVML gives the reasons now, exported as DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
        ),
        ("DCGM_*XID*", "the kernel log's source (kmsg) fills the Xid series; NVML does not read Xids"),
        ("gpufleet_gpu_health", "AMD's own health check of its devices"),
        ("gpufleet_gpu_afid_*", "an AMD device's RAS events"),
        ("gpufleet_gpu_nic_port_*", "a Gaudi device's built-in network ports"),
    ),
)


def load_pynvml() -> ModuleType:
    try:
        import pynvml
    except ImportError:
        raise DependencyMissingError(
            "NVML bindings (nvidia-ml-py) are not installed", fix="pip install 'gpufleet[nvml]', or run with --sim"
        ) from None
    return pynvml


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# a MIG device's name ends in its profile: "NVIDIA A100-SXM4-40GB MIG 1g.5gb"; a compute instance smaller than its
# GPU instance is named by both ("NVIDIA H200 MIG 1c.3g.71gb"), and GPU_I_PROFILE is the GPU instance's
_MIG_NAME = re.compile(r"\bMIG\s+(?:\d+c\.)?(?P<profile>\S+)\s*$")
UNKNOWN_PROFILE = "unknown"


@dataclass(frozen=True, slots=True)
class MigDevice:
    """A GPU instance as an entity reads it: through its first MIG device (lowest compute instance)."""

    gpu_instance_id: int
    compute_instance_id: int | None
    uuid: str
    profile: str
    handle: Any


def mig_device_handles(nvml: Any, handle: Any) -> list[tuple[int, Any]]:
    """The MIG devices of a GPU as (slot, handle); an empty slot answers NOT_FOUND and is left out."""
    try:
        count = int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))
    except (nvml.NVMLError, AttributeError):
        return []
    out = []
    for slot in range(count):
        try:
            out.append((slot, nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)))
        except nvml.NVMLError:
            continue
    return out


def mig_enabled(nvml: Any, handle: Any) -> bool:
    """Whether MIG mode is on now (not merely pending); False where the GPU or the bindings have no MIG."""
    try:
        mode = nvml.nvmlDeviceGetMigMode(handle)
    except (nvml.NVMLError, AttributeError):
        return False
    return isinstance(mode, (list, tuple)) and bool(mode) and int(mode[0]) == 1


def _profile_by_id(nvml: Any, handle: Any, gi: int) -> str:
    """The GPU instance's profile name through its profile info (drivers whose MIG devices are not named)."""
    try:
        info = nvml.nvmlGpuInstanceGetInfo(nvml.nvmlDeviceGetGpuInstanceById(handle, gi))
        profile = nvml.nvmlDeviceGetGpuInstanceProfileInfoById(handle, int(info.profileId))
    except (nvml.NVMLError, AttributeError):
        return ""
    return _text(getattr(profile, "name", b"")).strip().removeprefix("MIG ").strip()


def mig_devices(nvml: Any, handle: Any) -> list[MigDevice]:
    """One MigDevice per GPU instance of a MIG-enabled GPU, by GPU-instance id. A MIG device NVML will not
    describe is left out (logged)."""
    first: dict[int, tuple[int | None, str, Any]] = {}
    for slot, mig in mig_device_handles(nvml, handle):
        try:
            gi = int(nvml.nvmlDeviceGetGpuInstanceId(mig))
            uuid = _text(nvml.nvmlDeviceGetUUID(mig))
        except nvml.NVMLError as exc:
            log.warning("MIG device %d: not read: %s", slot, exc)
            continue
        try:
            ci: int | None = int(nvml.nvmlDeviceGetComputeInstanceId(mig))
        except (nvml.NVMLError, AttributeError):
            ci = None
        if gi not in first or _lower(ci, first[gi][0]):
            first[gi] = (ci, uuid, mig)
    out = []
    for gi in sorted(first):
        ci, uuid, mig = first[gi]
        try:
            match = _MIG_NAME.search(_text(nvml.nvmlDeviceGetName(mig)))
        except nvml.NVMLError:
            match = None
        profile = match["profile"] if match else _profile_by_id(nvml, handle, gi)
        out.append(MigDevice(gi, ci, uuid, profile or UNKNOWN_PROFILE, mig))
    return out


def _lower(ci: int | None, than: int | None) -> bool:
    """Whether compute instance `ci` comes before `than` (an unknown one comes last)."""
    return ci is not None and (than is None or ci < than)


# NVML answers NOT_SUPPORTED for a MIG-enabled GPU's utilization: not asked, rather than logged as failing
_NOT_IN_MIG_MODE = frozenset({"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL"})


@dataclass(frozen=True, slots=True)
class _LinkWalk:
    """One GPU's links as the last walk read them."""

    nvml_totals: tuple[float, ...] | None  # NVML's per-GPU totals when walked; None: the driver gives none
    at: float  # when, on the source's clock
    readings: np.ndarray  # LINK_FIELDS x NVLINK_MAX_LINKS, NaN where not read
    totals: np.ndarray | None  # the sums over the active links; None: no active link


@dataclass(frozen=True, slots=True)
class _Slot:
    """What one frame entity reads: a whole GPU, or one GPU instance of it."""

    gpu: int
    handle: Any
    mig: MigDevice | None = None


class NvmlSource:
    """Reads every GPU on this host through NVML into a MetricFrame."""

    name = "nvml"

    def __init__(self, hostname: str, nvml: ModuleType | None = None) -> None:
        self.nvml = nvml or load_pynvml()
        self.hostname = hostname
        try:
            self.nvml.nvmlInit()
        except self.nvml.NVMLError as exc:
            raise BackendError(
                f"NVML could not start: {exc}",
                fix="check that the NVIDIA driver is loaded (nvidia-smi works) or run the agent with --sim",
            ) from None
        self.handles = [self.nvml.nvmlDeviceGetHandleByIndex(i) for i in range(self.nvml.nvmlDeviceGetCount())]
        self.driver = _text(self.nvml.nvmlSystemGetDriverVersion())
        self._failing = FailingReadings(log)
        self._slots: list[_Slot] | None = None
        self.gpm = GpmReader(self.nvml, self.handles, self._failing)
        self._walks: dict[int, _LinkWalk] = {}  # GPU index -> its links' last walk
        self.clock = time.monotonic

    @property
    def fields(self) -> SourceFields:
        """What this source fills on this node: FIELDS, with the GPM fields filled or not as its GPUs have GPM."""
        names = [_text(self.nvml.nvmlDeviceGetName(h)) for h in self.handles]
        mig = {i for i, h in enumerate(self.handles) if mig_enabled(self.nvml, h)}
        return declare(FIELDS, self.gpm.why_not, names, mig, self.gpm.handed, self.gpm.handed_to)

    def entities(self) -> list[GpuEntity]:
        """One entity per GPU, or per GPU instance of a MIG-enabled GPU (see the module's note)."""
        out = []
        slots = []
        for i, h in enumerate(self.handles):
            pci = self.nvml.nvmlDeviceGetPciInfo(h)
            gpu = GpuEntity(
                gpu=i,
                uuid=_text(self.nvml.nvmlDeviceGetUUID(h)),
                model_name=_text(self.nvml.nvmlDeviceGetName(h)),
                hostname=self.hostname,
                pci_bus_id=_text(pci.busId),
                device=f"nvidia{self.nvml.nvmlDeviceGetMinorNumber(h)}",
                label_fields=(("DCGM_FI_DRIVER_VERSION", self.driver),),
            )
            instances = mig_devices(self.nvml, h) if mig_enabled(self.nvml, h) else []
            if not instances:  # MIG off, or on with no GPU instance yet: the whole GPU
                out.append(gpu)
                slots.append(_Slot(i, h))
            for mig in instances:
                out.append(
                    replace(gpu, mig_profile=mig.profile, gpu_instance_id=mig.gpu_instance_id, mig_uuid=mig.uuid)
                )
                slots.append(_Slot(i, h, mig))
        self._slots = slots
        return out

    def new_frame(self) -> MetricFrame:
        return MetricFrame(tuple(self.entities()))

    def _read(self, gpu: int, field: str, fn: Callable[[], float]) -> float:
        try:
            value = float(fn())
        except self.nvml.NVMLError as exc:
            self._failing.failed(gpu, field, exc)
            return float("nan")
        self._failing.read(gpu, field)
        return value

    def collect(self, frame: MetricFrame) -> None:
        slots = self._slots if self._slots is not None else self._read_slots()
        parent_column: dict[int, int] = {}  # a MIG GPU's first instance entity, which read the GPU's own fields
        for e, slot in enumerate(slots[: len(frame.entities)]):
            if slot.mig is None:
                self._collect_gpu(frame, e, slot.gpu, slot.handle)
                continue
            first = parent_column.setdefault(slot.gpu, e)
            if first == e:
                self._collect_gpu(frame, e, slot.gpu, slot.handle, mig=True)
            else:
                frame.values[:, e] = frame.values[:, first]
            self._collect_instance(frame, e, slot.gpu, slot.mig)

    def _read_slots(self) -> list[_Slot]:
        self.entities()
        assert self._slots is not None
        return self._slots

    def _collect_gpu(self, frame: MetricFrame, e: int, i: int, h: Any, mig: bool = False) -> None:
        for field, function, args, convert in READINGS:
            if mig and field in _NOT_IN_MIG_MODE:
                continue
            if frame.has_gpu_field(field):
                call = getattr(self.nvml, function)
                frame.gpu(field)[e] = self._read(i, field, partial(_convert, convert, call, h, *args))
        answers = field_values(self.nvml, h, FIELD_VALUE_IDS)
        self._remapped_rows(frame, e, h)
        self._nvlink(frame, e, i, h, answers)
        self._gpu_state(frame, e, h, answers)
        if not mig:  # a MIG GPU's instances read their own (_collect_instance)
            self.gpm.read(frame, e, i, h)

    def _collect_instance(self, frame: MetricFrame, e: int, i: int, mig: MigDevice) -> None:
        """A GPU instance's own memory; its utilization has no NVML reading (the GPU's is NOT_SUPPORTED in MIG
        mode); the device-wide fields are the GPU's, repeated, as dcgm-exporter writes them."""
        for field in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL"):
            if frame.has_gpu_field(field):
                frame.gpu(field)[e] = np.nan
        for field, convert in (("DCGM_FI_DEV_FB_USED", _used), ("DCGM_FI_DEV_FB_FREE", _free)):
            if frame.has_gpu_field(field):
                call = self.nvml.nvmlDeviceGetMemoryInfo
                what = f"{field} of GPU instance {mig.gpu_instance_id}"
                frame.gpu(field)[e] = self._read(i, what, partial(_convert, convert, call, mig.handle))
        self.gpm.read(frame, e, i, self.handles[i], mig.gpu_instance_id)

    def _remapped_rows(self, frame: MetricFrame, i: int, h: Any) -> None:
        try:
            corr, unc, pending, failure = self.nvml.nvmlDeviceGetRemappedRows(h)
        except self.nvml.NVMLError:
            return  # pre-Ampere GPUs retire pages instead; the fields stay empty
        if frame.has_gpu_field(ROW_REMAP_PENDING):
            frame.gpu(ROW_REMAP_PENDING)[i] = float(bool(pending))
        for field, value in zip(REMAPPED_ROWS, (corr, unc, failure), strict=True):
            if frame.has_gpu_field(field):
                frame.gpu(field)[i] = float(value)

    def _nvlink(self, frame: MetricFrame, e: int, i: int, h: Any, answers: dict[int, float]) -> None:
        """Each link's error counters and state (a MIG GPU's on its first instance's entity), and their sums over the
        active links in dcgm-exporter's per-GPU fields. The links are walked (five NVML calls a link) when NVML's own
        per-GPU totals of the four counters moved, at least every LINK_REFRESH_S, and every collection on a driver
        without those totals; between walks the last walk's readings stand, so a climbing counter is named at once
        and a link that goes down without an error is seen within LINK_REFRESH_S."""
        nvml_totals = tuple(answers[f] for f in NVML_LINK_ERROR_TOTALS) if answers.keys() >= _TOTALS else None
        walk = self._walks.get(i)
        now = self.clock()
        if walk is None or nvml_totals is None or walk.nvml_totals != nvml_totals or now - walk.at >= LINK_REFRESH_S:
            walk = self._walk_links(i, h, nvml_totals, now)
            self._walks[i] = walk
        links = min(NVLINK_MAX_LINKS, frame.link_values.shape[2])
        if frame.link_fields:
            frame.link_values[:, e, :].fill(np.nan)  # a MIG GPU's other entities: its links are written once
            for k, name in enumerate(LINK_FIELDS):
                row = frame.link_row(name)
                if row is not None:
                    frame.link_values[row, e, :links] = walk.readings[k, :links]
        if walk.totals is None:
            return
        for name, value in zip(NVLINK_ERRORS, walk.totals, strict=True):
            if frame.has_gpu_field(name):
                frame.gpu(name)[e] = value

    def _walk_links(self, i: int, h: Any, nvml_totals: tuple[float, ...] | None, now: float) -> _LinkWalk:
        """Every link's state and, for an active one, its four error counters. A link NVML will not describe ends
        the list: past the GPU's last link, or no NVLink at all."""
        readings = np.full((len(LINK_FIELDS), NVLINK_MAX_LINKS), np.nan)
        totals = np.zeros(4)
        active_links = 0
        for link in range(NVLINK_MAX_LINKS):
            try:
                active = bool(self.nvml.nvmlDeviceGetNvLinkState(h, link))
            except self.nvml.NVMLError:
                break  # past the last link, or no NVLink on this GPU
            readings[_STATE_ROW, link] = float(active)
            if not active:
                continue
            try:
                values = [float(self.nvml.nvmlDeviceGetNvLinkErrorCounter(h, link, c)) for _, c in LINK_ERRORS]
            except self.nvml.NVMLError as exc:
                self._failing.failed(i, f"NVLink {link} error counters", exc)
                continue
            self._failing.read(i, f"NVLink {link} error counters")
            readings[: len(LINK_ERRORS), link] = values
            totals += values  # dcgm-exporter's per-GPU totals: flit, data, replay, recovery (LINK_ERRORS' order)
            active_links += 1
        return _LinkWalk(nvml_totals, now, readings, totals if active_links else None)

    def _gpu_state(self, frame: MetricFrame, e: int, h: Any, answers: dict[int, float]) -> None:
        """What NVML says the GPU needs or belongs to, each collection: its recovery action, its memory temperature
        and its NVLink fabric state and clique (sources/gpu/nvml_state.py). A GPU or driver without them leaves the
        fields empty."""
        for field, field_id in (
            (RECOVERY_ACTION, NVML_FI_DEV_GET_GPU_RECOVERY_ACTION),
            (MEMORY_TEMP, NVML_FI_DEV_MEMORY_TEMP),
        ):
            if frame.has_gpu_field(field):
                frame.gpu(field)[e] = answers.get(field_id, np.nan)
        if frame.has_gpu_field(FABRIC_STATUS) or frame.has_gpu_field(FABRIC_CLIQUE):
            fabric = fabric_info(self.nvml, h)
            if fabric is not None:
                if frame.has_gpu_field(FABRIC_STATUS):
                    frame.gpu(FABRIC_STATUS)[e] = float(fabric.dcgm_status)
                if frame.has_gpu_field(FABRIC_CLIQUE) and fabric.joined:
                    frame.gpu(FABRIC_CLIQUE)[e] = float(fabric.clique_id)
