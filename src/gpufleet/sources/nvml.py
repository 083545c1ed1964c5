"""NVML through nvidia-ml-py: the real GPU source on a GPU node.

Every reading is taken per device and per field: an NVML error on one GPU or one field leaves that value empty
(NaN, never exported) and the others stand. A missing library or driver is one clear error, not a traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from types import ModuleType
from typing import Any

import numpy as np

from gpufleet.errors import BackendError, DependencyMissingError
from gpufleet.sources.failing import FailingReadings
from gpufleet.telemetry.frame import GpuEntity, MetricFrame

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


def _convert(convert: Callable[[Any], float], call: Callable[..., Any], *args: Any) -> float:
    return convert(call(*args))


# (DCGM field, NVML function, extra arguments after the handle, conversion to the field's unit)
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

    def entities(self) -> list[GpuEntity]:
        out = []
        for i, h in enumerate(self.handles):
            pci = self.nvml.nvmlDeviceGetPciInfo(h)
            out.append(
                GpuEntity(
                    gpu=i,
                    uuid=_text(self.nvml.nvmlDeviceGetUUID(h)),
                    model_name=_text(self.nvml.nvmlDeviceGetName(h)),
                    hostname=self.hostname,
                    pci_bus_id=_text(pci.busId),
                    device=f"nvidia{self.nvml.nvmlDeviceGetMinorNumber(h)}",
                    label_fields=(("DCGM_FI_DRIVER_VERSION", self.driver),),
                )
            )
        return out

    def new_frame(self) -> MetricFrame:
        return MetricFrame(tuple(self.entities()))

    def _read(self, i: int, field: str, fn: Callable[[], float]) -> float:
        try:
            value = float(fn())
        except self.nvml.NVMLError as exc:
            self._failing.failed(i, field, exc)
            return float("nan")
        self._failing.read(i, field)
        return value

    def collect(self, frame: MetricFrame) -> None:
        for i, h in enumerate(self.handles):
            for field, function, args, convert in READINGS:
                if frame.has_gpu_field(field):
                    call = getattr(self.nvml, function)
                    frame.gpu(field)[i] = self._read(i, field, partial(_convert, convert, call, h, *args))
            self._remapped_rows(frame, i, h)
            self._nvlink(frame, i, h)

    def _remapped_rows(self, frame: MetricFrame, i: int, h: Any) -> None:
        try:
            corr, unc, _pending, failure = self.nvml.nvmlDeviceGetRemappedRows(h)
        except self.nvml.NVMLError:
            return  # pre-Ampere GPUs retire pages instead; the fields stay empty
        for field, value in (
            ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", corr),
            ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", unc),
            ("DCGM_FI_DEV_ROW_REMAP_FAILURE", failure),
        ):
            if frame.has_gpu_field(field):
                frame.gpu(field)[i] = float(value)

    def _nvlink(self, frame: MetricFrame, i: int, h: Any) -> None:
        totals = np.zeros(4)
        links = 0
        for link in range(NVLINK_MAX_LINKS):
            try:
                if not self.nvml.nvmlDeviceGetNvLinkState(h, link):
                    continue
                for k, counter in enumerate(
                    (
                        NVLINK_ERROR_DL_CRC_FLIT,
                        NVLINK_ERROR_DL_CRC_DATA,
                        NVLINK_ERROR_DL_REPLAY,
                        NVLINK_ERROR_DL_RECOVERY,
                    )
                ):
                    totals[k] += self.nvml.nvmlDeviceGetNvLinkErrorCounter(h, link, counter)
                links += 1
            except self.nvml.NVMLError:
                break  # past the last link, or no NVLink on this GPU
        if not links:
            return
        names = (
            "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
            "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
            "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
            "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
        )
        for name, value in zip(names, totals, strict=True):
            if frame.has_gpu_field(name):
                frame.gpu(name)[i] = value
