"""Intel Gaudi through HLML's Python bindings (`habana-pyhlml`, imported as `pyhlml`): the live source on a Gaudi
node.

`READINGS` says, as data, which HLML call answers each DCGM field of the frame and how its unit becomes the
field's (pyhlml's docstrings: power in mW, energy in mJ, memory in bytes, clocks in MHz). The SoC clock stands in
for DCGM's SM clock; HLML reports no memory clock, so that field stays empty. Replaced HBM rows fill DCGM's
remapped-row fields (a row replaced for repeated single-bit errors is a correctable remap, one for a double-bit
error an uncorrectable one). The on-chip RoCE ports' presence, scale-out role and link state fill the frame's
NIC port masks.

Each reading is taken per device and per field: an HLML error on one leaves that value NaN (never exported) and
the others stand. pyhlml imports without the driver; `hlmlInit()` then prints "Failed to load libhlml" and raises
HLMLError_Uninitialized when /usr/lib/habanalabs/libhlml.so is absent: that is one DependencyMissingError.
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from gpufleet.errors import BackendError, DependencyMissingError
from gpufleet.model.observe import GpuInfo
from gpufleet.parsers.amd_gaudi_values import catalog_model
from gpufleet.sources.gpu.failing_readings import FailingReadings
from gpufleet.telemetry.frame import GpuEntity, MetricFrame

log = logging.getLogger("gpufleet.hlml")

# HLML enums (pyhlml_types_generated), by value so a fake library needs none of them
TEMPERATURE_ON_AIP, TEMPERATURE_HBM = 0, 3
THRESHOLD_SLOWDOWN = 1
CLOCK_SOC = 0
ERROR_CORRECTED, ERROR_UNCORRECTED = 0, 1
VOLATILE_ECC, AGGREGATE_ECC = 0, 1
ROWS_MULTIPLE_SBE, ROWS_DBE = 0, 1
UNINITIALIZED = 1  # HLML_ERROR_UNINITIALIZED: hlmlInit could not load libhlml.so
MAX_NIC_PORTS = 128  # the port masks are two 64-bit words


def _ident(value: Any) -> float:
    return float(value)


def _milli(value: Any) -> float:
    return float(value) / 1000.0


def _mib(value: Any) -> float:
    return float(value) / 2**20


@dataclass(frozen=True)
class Reading:
    """`function(handle, *args)`, then `attr` of the struct it returns, then `convert` to the field's unit."""

    function: str
    args: tuple[int, ...] = ()
    attr: str = ""
    convert: Callable[[Any], float] = field(default=_ident)


READINGS: dict[str, Reading] = {
    "DCGM_FI_DEV_GPU_UTIL": Reading("hlmlDeviceGetUtilizationRates", attr="aip"),
    "DCGM_FI_DEV_MEM_COPY_UTIL": Reading("hlmlDeviceGetUtilizationRates", attr="memory"),
    "DCGM_FI_DEV_FB_USED": Reading("hlmlDeviceGetMemoryInfo", attr="used", convert=_mib),  # bytes -> MiB
    "DCGM_FI_DEV_FB_FREE": Reading("hlmlDeviceGetMemoryInfo", attr="free", convert=_mib),
    "DCGM_FI_DEV_GPU_TEMP": Reading("hlmlDeviceGetTemperature", (TEMPERATURE_ON_AIP,)),
    "DCGM_FI_DEV_MEMORY_TEMP": Reading("hlmlDeviceGetTemperature", (TEMPERATURE_HBM,)),
    "DCGM_FI_DEV_SLOWDOWN_TEMP": Reading("hlmlDeviceGetTemperatureThreshold", (THRESHOLD_SLOWDOWN,)),
    "DCGM_FI_DEV_POWER_USAGE": Reading("hlmlDeviceGetPowerUsage", convert=_milli),  # mW -> W
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": Reading("hlmlDeviceGetTotalEnergyConsumption"),  # mJ
    "DCGM_FI_DEV_SM_CLOCK": Reading("hlmlDeviceGetClockInfo", (CLOCK_SOC,)),  # MHz
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": Reading("hlmlDeviceGetPCIEReplayCounter"),
    "DCGM_FI_DEV_PCIE_LINK_GEN": Reading("hlmlDeviceGetCurrPCIELinkGeneration"),
    "DCGM_FI_DEV_PCIE_LINK_WIDTH": Reading("hlmlDeviceGetCurrPCIELinkWidth"),
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": Reading("hlmlDeviceGetTotalECCErrors", (ERROR_CORRECTED, VOLATILE_ECC)),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": Reading("hlmlDeviceGetTotalECCErrors", (ERROR_UNCORRECTED, VOLATILE_ECC)),
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": Reading("hlmlDeviceGetTotalECCErrors", (ERROR_CORRECTED, AGGREGATE_ECC)),
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": Reading("hlmlDeviceGetTotalECCErrors", (ERROR_UNCORRECTED, AGGREGATE_ECC)),
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": Reading("hlmlDeviceGetReplacedRowsCount", (ROWS_MULTIPLE_SBE,)),
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": Reading("hlmlDeviceGetReplacedRowsCount", (ROWS_DBE,)),
    "DCGM_FI_DEV_RETIRED_PENDING": Reading("hlmlDeviceGetReplacedRowsPendingStatus"),
}
NIC_FIELDS = ("gpufleet_gpu_nic_port_mask", "gpufleet_gpu_nic_port_external_mask", "gpufleet_gpu_nic_port_up_mask")

_INSTALL = (
    "install the Habana driver and firmware (habanalabs-dkms, habanalabs-firmware: they provide "
    "/usr/lib/habanalabs/libhlml.so) and `pip install habana-pyhlml`, or run the agent with --sim"
)


def load_pyhlml() -> ModuleType:
    try:
        with warnings.catch_warnings():  # 1.24 warns, on import, that its own hlml_types module is deprecated
            warnings.simplefilter("ignore", DeprecationWarning)
            import pyhlml
    except ImportError:
        raise DependencyMissingError(
            "HLML bindings (habana-pyhlml) are not installed", fix="pip install habana-pyhlml, or run with --sim"
        ) from None
    return pyhlml


def _text(value: Any) -> str:
    return value.decode(errors="replace").strip("\x00 ") if isinstance(value, bytes) else str(value).strip()


def _mask(words: Any) -> int:
    """pyhlml's (low, high) pair of 64-bit words as one integer."""
    low, high = words if isinstance(words, tuple | list) else (words, 0)
    return int(low) | (int(high) << 64)


@dataclass
class _Identity:
    uuid: str = ""
    name: str = ""
    model_name: str = ""
    serial: str = ""
    bus_id: str = ""
    device: str = ""
    module_id: int | None = None
    memory_mib: float | None = None
    power_limit_w: float | None = None


class HlmlSource:
    """Reads every Gaudi device on this host through HLML into a MetricFrame."""

    name = "hlml"

    def __init__(self, hostname: str, pyhlml: ModuleType | None = None) -> None:
        self.lib = pyhlml or load_pyhlml()
        self.hostname = hostname
        noise = io.StringIO()
        try:
            with contextlib.redirect_stdout(noise):  # pyhlml prints "Failed to load libhlml" before raising
                self.lib.hlmlInit()
            self.handles = [self.lib.hlmlDeviceGetHandleByIndex(i) for i in range(self.lib.hlmlDeviceGetCount())]
        except self.lib.HLMLError as exc:
            if getattr(exc, "value", None) == UNINITIALIZED:
                raise DependencyMissingError(
                    "libhlml.so could not be loaded (the Habana driver stack is not installed)", fix=_INSTALL
                ) from None
            raise BackendError(
                f"HLML could not start: {exc}",
                fix="check that the habanalabs driver is loaded (`hl-smi` works) or run the agent with --sim",
            ) from None
        self.driver = self._driver()
        self._identities: list[_Identity] | None = None
        self._failing = FailingReadings(log, "Gaudi")

    def _try(self, function: str, *args: Any) -> Any:
        try:
            return getattr(self.lib, function)(*args)
        except self.lib.HLMLError:
            return None

    def _driver(self) -> str:
        version = self._try("hlmlGetDriverVersion")
        return _text(version) if version is not None else ""

    def identities(self) -> list[_Identity]:
        if self._identities is None:
            self._identities = [self._identity(i, h) for i, h in enumerate(self.handles)]
        return self._identities

    def _identity(self, index: int, handle: Any) -> _Identity:
        name = _text(self._try("hlmlDeviceGetName", handle) or "")
        spec = catalog_model(name)
        pci = self._try("hlmlDeviceGetPCIInfo", handle)
        minor = self._try("hlmlDeviceGetMinorNumber", handle)
        memory = self._try("hlmlDeviceGetMemoryInfo", handle)
        limit_mw = self._try("hlmlDeviceGetPowerManagementDefaultLimit", handle)
        module = self._try("hlmlDeviceGetModuleID", handle)
        return _Identity(
            uuid=_text(self._try("hlmlDeviceGetUUID", handle) or ""),
            name=name,
            model_name=spec.product_name if spec else name,
            serial=_text(self._try("hlmlDeviceGetSerial", handle) or ""),
            bus_id=_text(pci.bus_id) if pci is not None else "",
            device=f"accel{minor if minor is not None else index}",
            module_id=int(module) if module is not None else None,
            memory_mib=float(memory.total) / 2**20 if memory is not None else None,
            power_limit_w=float(limit_mw) / 1000.0 if limit_mw is not None else None,
        )

    def entities(self) -> list[GpuEntity]:
        return [
            GpuEntity(
                gpu=i,
                uuid=ident.uuid,
                model_name=ident.model_name,
                hostname=self.hostname,
                pci_bus_id=ident.bus_id,
                device=ident.device,
                label_fields=(("DCGM_FI_DRIVER_VERSION", self.driver),) if self.driver else (),
                vendor="intel",
                serial=ident.serial,
            )
            for i, ident in enumerate(self.identities())
        ]

    def new_frame(self) -> MetricFrame:
        return MetricFrame(tuple(self.entities()))

    def collect(self, frame: MetricFrame) -> None:
        for i, handle in enumerate(self.handles):
            answers: dict[tuple[str, tuple[int, ...]], Any] = {}
            for field_name, reading in READINGS.items():
                if frame.has_gpu_field(field_name):
                    frame.gpu(field_name)[i] = self._read(i, handle, field_name, reading, answers)
            if all(frame.has_gpu_field(f) for f in NIC_FIELDS):
                self._nic_ports(frame, i, handle)

    def _read(
        self, i: int, handle: Any, field_name: str, reading: Reading, answers: dict[tuple[str, tuple[int, ...]], Any]
    ) -> float:
        key = (reading.function, reading.args)
        if key not in answers:  # one call per device per tick, however many fields it answers
            try:
                answers[key] = getattr(self.lib, reading.function)(handle, *reading.args)
            except self.lib.HLMLError as exc:
                answers[key] = exc
        answer = answers[key]
        try:
            if isinstance(answer, Exception):
                raise answer
            value = reading.convert(getattr(answer, reading.attr) if reading.attr else answer)
        except (self.lib.HLMLError, TypeError, ValueError) as exc:
            self._failing.failed(i, field_name, exc)
            return float("nan")
        self._failing.read(i, field_name)
        return value if math.isfinite(value) else float("nan")

    def _nic_ports(self, frame: MetricFrame, i: int, handle: Any) -> None:
        masks = self._try("hlmlDeviceGetMacAddrInfo", handle)
        if masks is None:
            return
        present, external = _mask(masks[0]), _mask(masks[1])
        up = 0
        for port in range(MAX_NIC_PORTS):
            if present >> port & 1 and self._try("hlmlDeviceNicGetLink", handle, port):
                up |= 1 << port
        for name, value in zip(NIC_FIELDS, (present, external, up), strict=True):
            frame.gpu(name)[i] = float(value)

    def close(self) -> None:
        with contextlib.suppress(self.lib.HLMLError):
            self.lib.hlmlShutdown()


def gaudi_inventory(source: HlmlSource) -> list[GpuInfo]:
    """The node's Gaudi devices for its inventory (Gaudi has no partitions: `partition` and `parent` stay empty)."""
    return [
        GpuInfo(
            index=i,
            uuid=ident.uuid,
            model=ident.model_name,
            pci_bus_id=ident.bus_id,
            serial=ident.serial,
            memory_mib=ident.memory_mib,
            power_limit_w=ident.power_limit_w,
            vendor="intel",
        )
        for i, ident in enumerate(source.identities())
    ]
