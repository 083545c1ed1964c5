"""AMD SMI through its Python bindings (`amdsmi`): the live GPU source on an AMD Instinct node.

The frame speaks DCGM's field names, so `READINGS` below says, as data, which amdsmi call answers each field and
how its unit becomes the field's: gfx activity is GPU_UTIL, UMC activity MEM_COPY_UTIL, the junction (hotspot)
temperature GPU_TEMP (edge on parts without one), socket power POWER_USAGE, the energy accumulator times its
resolution (uJ) TOTAL_ENERGY_CONSUMPTION in mJ, the PCIe rate in MT/s a link generation. AMD keeps one ECC
count per GPU (since the driver loaded), so it fills both DCGM's volatile and aggregate totals.

Each reading is taken per device and per field: an error on one leaves that value NaN (never exported) and the
others stand; "N/A" answers are NaN quietly. A partition (MI300 in CPX mode) is its own device to the library,
with its own handle, render node and KFD partition id; its parent is the handle that shares its PCI address.

A missing library is one clear error: the `amdsmi` package raises KeyError('libamd_smi.so'), not ImportError,
and prints its dlopen failure to stdout, when ROCm's libamd_smi.so is absent.
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from gpufleet.errors import BackendError, DependencyMissingError
from gpufleet.model.observe import GpuInfo
from gpufleet.model.pci import normalise_pci
from gpufleet.parsers.amd.amd_smi import PCIE_GEN_BY_GTS
from gpufleet.parsers.amd_gaudi_values import catalog_model, number, partition_mode
from gpufleet.sources.gpu.failing_readings import FailingReadings
from gpufleet.telemetry.field_sources import SourceFields
from gpufleet.telemetry.frame import GpuEntity, MetricFrame

log = logging.getLogger("gpufleet.amdsmi")

MIB = 2**20


def _ident(value: Any) -> float | None:
    return number(value)


def _gen(mts: Any) -> float | None:
    """The library's per-lane rate in MT/s (32000) -> PCIe generation (5)."""
    rate = number(mts)
    return None if rate is None else PCIE_GEN_BY_GTS.get(rate / 1000)


def _energy_mj(counter: Mapping[str, Any]) -> float | None:
    accumulator, resolution = number(counter.get("energy_accumulator")), number(counter.get("counter_resolution"))
    if accumulator is None or resolution is None:
        return None
    return accumulator * resolution / 1000.0  # uJ -> mJ


def _vram_free(usage: Mapping[str, Any]) -> float | None:
    total, used = number(usage.get("vram_total")), number(usage.get("vram_used"))
    return None if total is None or used is None else total - used


@dataclass(frozen=True)
class Call:
    """One amdsmi call: `function(handle, *args)`, then `key` into the dict it returns, then `convert`."""

    function: str
    args: tuple[str, ...] = ()  # library attributes passed after the handle, e.g. "AmdSmiClkType.GFX"
    key: tuple[str, ...] = ()
    convert: Callable[[Any], float | None] = field(default=_ident)


_TEMP = "amdsmi_get_temp_metric"
_CURRENT = "AmdSmiTemperatureMetric.CURRENT"
_ECC = "amdsmi_get_gpu_total_ecc_count"
_PCIE = "amdsmi_get_pcie_info"

# DCGM field -> the calls that answer it, tried in order until one gives a number
READINGS: dict[str, tuple[Call, ...]] = {
    "DCGM_FI_DEV_GPU_UTIL": (Call("amdsmi_get_gpu_activity", key=("gfx_activity",)),),
    "DCGM_FI_DEV_MEM_COPY_UTIL": (Call("amdsmi_get_gpu_activity", key=("umc_activity",)),),
    # amdsmi_vram_usage_t is in MB (MiB), as amd-smi prints it
    "DCGM_FI_DEV_FB_USED": (Call("amdsmi_get_gpu_vram_usage", key=("vram_used",)),),
    "DCGM_FI_DEV_FB_FREE": (Call("amdsmi_get_gpu_vram_usage", convert=_vram_free),),
    "DCGM_FI_DEV_GPU_TEMP": (
        Call(_TEMP, ("AmdSmiTemperatureType.HOTSPOT", _CURRENT)),  # junction, MI300
        Call(_TEMP, ("AmdSmiTemperatureType.EDGE", _CURRENT)),  # MI200 and Radeon
    ),
    "DCGM_FI_DEV_MEMORY_TEMP": (
        Call(_TEMP, ("AmdSmiTemperatureType.VRAM", _CURRENT)),
        Call(_TEMP, ("AmdSmiTemperatureType.HBM_0", _CURRENT)),
    ),
    "DCGM_FI_DEV_SLOWDOWN_TEMP": (
        Call(_TEMP, ("AmdSmiTemperatureType.HOTSPOT", "AmdSmiTemperatureMetric.CRITICAL")),  # amd-smi's slowdown
    ),
    # W: current_socket_power on MI300, average_socket_power on MI200 and earlier ("N/A" where not)
    "DCGM_FI_DEV_POWER_USAGE": (
        Call("amdsmi_get_power_info", key=("current_socket_power",)),
        Call("amdsmi_get_power_info", key=("average_socket_power",)),
    ),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": (Call("amdsmi_get_energy_count", convert=_energy_mj),),
    "DCGM_FI_DEV_SM_CLOCK": (Call("amdsmi_get_clock_info", ("AmdSmiClkType.GFX",), key=("clk",)),),
    "DCGM_FI_DEV_MEM_CLOCK": (Call("amdsmi_get_clock_info", ("AmdSmiClkType.MEM",), key=("clk",)),),
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": (Call(_ECC, key=("correctable_count",)),),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": (Call(_ECC, key=("uncorrectable_count",)),),
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": (Call(_ECC, key=("correctable_count",)),),
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": (Call(_ECC, key=("uncorrectable_count",)),),
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": (Call(_PCIE, key=("pcie_metric", "pcie_replay_count")),),
    "DCGM_FI_DEV_PCIE_LINK_GEN": (Call(_PCIE, key=("pcie_metric", "pcie_speed"), convert=_gen),),
    "DCGM_FI_DEV_PCIE_LINK_WIDTH": (Call(_PCIE, key=("pcie_metric", "pcie_width")),),
    "DCGM_FI_DEV_PCIE_MAX_LINK_GEN": (Call(_PCIE, key=("pcie_static", "pcie_interface_version")),),
    "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH": (Call(_PCIE, key=("pcie_static", "max_pcie_width")),),
}

# What this source writes (telemetry.field_sources), and why it leaves the two AMD Device Metrics Exporter families that
# are the exporter's own verdicts, not amdsmi readings, empty. As read in ROCm/device-metrics-exporter (2026-08):
# - gpu_health: pkg/amdgpu/gpuagent/gpuagent_health.go processHealthValidation: healthy unless a per-block uncorrectable
#   ECC count from gpuagent passes the configured threshold (0 by default), gpuagent reports a critical event, the
#   latest CPER record is fatal (and recent enough), gpuagent lists no GPU, or the node is marked unhealthy.
# - gpu_afid_errors{severity, afid_index}: gpuagent_gpu_metrics.go, the AFIDs of the GPU's latest CPER record, only
#   with CPER enabled (initAfidMetrics); docs/configuration/metricslist.md GPU_AFID_ERRORS.
# amdsmi has the CPER records and their AFIDs (amdsmi 7.0.2, amdsmi_interface.py: amdsmi_get_gpu_cper_entries,
# amdsmi_get_afids_from_cper) but no health verdict; this source reads neither, so on a real AMD node these stay
# unexported and the alerts on them (AmdGpuUnhealthy, AmdGpuFatalRasEvent) are DME's to feed, as their descriptions say.
FIELDS = SourceFields(
    "amdsmi",
    fills=frozenset(READINGS),
    leaves=(
        (
            "gpufleet_gpu_health",
            "AMD Device Metrics Exporter's own health verdict (gpuagent's per-block uncorrectable ECC counts against "
            "its thresholds, critical events, a recent fatal CPER record); amdsmi gives no verdict and this source "
            "makes none up: run DME for gpu_health",
        ),
        (
            "gpufleet_gpu_afid_*",
            "the AFIDs of the GPU's latest CPER record, which AMD Device Metrics Exporter reads from gpuagent with "
            "CPER enabled; this source does not read CPER records (amdsmi_get_gpu_cper_entries): run DME for "
            "gpu_afid_errors",
        ),
        ("gpufleet_gpu_nic_port_*", "a Gaudi device's built-in network ports"),
    ),
)

_NO_LIBRARY_FIX = (
    "install ROCm's amd-smi-lib package (it provides libamd_smi.so; set ROCM_PATH if ROCm is not in /opt/rocm), "
    "or run the agent with --sim"
)


def load_amdsmi() -> ModuleType:
    """The `amdsmi` module, or one DependencyMissingError naming what is missing (the package or its library)."""
    noise = io.StringIO()
    try:
        with contextlib.redirect_stdout(noise):  # the package prints its dlopen failure before raising
            import amdsmi
    except ImportError:
        raise DependencyMissingError(
            "AMD SMI Python bindings (amdsmi) are not installed",
            fix="install ROCm's amd-smi-lib (it ships the amdsmi package) or `pip install amdsmi`, or run with --sim",
        ) from None
    except (KeyError, OSError) as exc:
        raise DependencyMissingError(
            f"the amdsmi package is installed but cannot load libamd_smi.so ({exc!r})", fix=_NO_LIBRARY_FIX
        ) from None
    return amdsmi


def _text(value: Any) -> str:
    text = value.decode(errors="replace") if isinstance(value, bytes) else str(value)
    return "" if text.strip().upper() in ("N/A", "") else text.strip()


@dataclass
class _Identity:
    bdf: str = ""
    uuid: str = ""
    market_name: str = ""
    model_name: str = ""
    serial: str = ""
    device: str = ""
    compute_partition: str = ""
    memory_partition: str = ""
    partition_id: int | None = None
    vram_total_mib: float | None = None
    power_cap_w: float | None = None


class AmdSmiSource:
    """Reads every AMD GPU (or partition) on this host through amdsmi into a MetricFrame."""

    name = "amdsmi"

    def __init__(self, hostname: str, amdsmi: ModuleType | None = None) -> None:
        self.lib = amdsmi or load_amdsmi()
        self.hostname = hostname
        try:
            self.lib.amdsmi_init(self._attr("AmdSmiInitFlags.INIT_AMD_GPUS"))
            self.handles = list(self.lib.amdsmi_get_processor_handles())
        except self.lib.AmdSmiException as exc:
            raise BackendError(
                f"AMD SMI could not start: {exc}",
                fix="check that the amdgpu driver is loaded (`amd-smi list` works) or run the agent with --sim",
            ) from None
        self._identities: list[_Identity] | None = None
        self.driver = self._driver()
        self._failing = FailingReadings(log)

    def _attr(self, dotted: str) -> Any:
        value: Any = self.lib
        for part in dotted.split("."):
            value = getattr(value, part)
        return value

    def _try(self, function: str, *args: Any) -> Any:
        try:
            return getattr(self.lib, function)(*args)
        except self.lib.AmdSmiException:
            return None

    def _driver(self) -> str:
        info = self._try("amdsmi_get_gpu_driver_info", self.handles[0]) if self.handles else None
        return _text(info.get("driver_version", "")) if isinstance(info, Mapping) else ""

    def identities(self) -> list[_Identity]:
        if self._identities is None:
            self._identities = [self._identity(i, h) for i, h in enumerate(self.handles)]
        return self._identities

    def _identity(self, index: int, handle: Any) -> _Identity:
        asic = self._try("amdsmi_get_gpu_asic_info", handle) or {}
        board = self._try("amdsmi_get_gpu_board_info", handle) or {}
        market = _text(asic.get("market_name", "")) or _text(board.get("product_name", ""))
        spec = catalog_model(market, asic.get("device_id")) or catalog_model(_text(board.get("product_name", "")))
        enumeration = self._try("amdsmi_get_gpu_enumeration_info", handle) or {}
        render = number(enumeration.get("drm_render"))
        kfd = self._try("amdsmi_get_gpu_kfd_info", handle) or {}
        vram = self._try("amdsmi_get_gpu_vram_usage", handle) or {}
        cap = self._try("amdsmi_get_power_cap_info", handle) or {}
        cap_uw = number(cap.get("power_cap"))
        return _Identity(
            bdf=_text(self._try("amdsmi_get_gpu_device_bdf", handle) or ""),
            uuid=_text(self._try("amdsmi_get_gpu_device_uuid", handle) or ""),
            market_name=market,
            model_name=spec.product_name if spec else market,
            serial=_text(asic.get("asic_serial", "")) or _text(board.get("product_serial", "")),
            # the render node: drm_render is its minor (128...); the driver numbers them in handle order
            device=f"renderD{int(render) if render is not None and render >= 128 else 128 + index}",
            compute_partition=_text(self._try("amdsmi_get_gpu_compute_partition", handle) or ""),
            memory_partition=_text(self._try("amdsmi_get_gpu_memory_partition", handle) or ""),
            partition_id=int(p) if (p := number(kfd.get("current_partition_id"))) is not None else None,
            vram_total_mib=number(vram.get("vram_total")),
            power_cap_w=None if cap_uw is None else cap_uw / 1e6,  # the library reports uW
        )

    def entities(self) -> list[GpuEntity]:
        return [
            GpuEntity(
                gpu=i,
                uuid=ident.uuid,
                model_name=ident.model_name,
                hostname=self.hostname,
                pci_bus_id=ident.bdf,
                device=ident.device,
                label_fields=(("DCGM_FI_DRIVER_VERSION", self.driver),) if self.driver else (),
                vendor="amd",
                serial=ident.serial,
                partition=partition_mode(ident.compute_partition, ident.memory_partition),
                partition_id=ident.partition_id,
            )
            for i, ident in enumerate(self.identities())
        ]

    def new_frame(self) -> MetricFrame:
        return MetricFrame(tuple(self.entities()))

    def collect(self, frame: MetricFrame) -> None:
        for i, handle in enumerate(self.handles):
            answers: dict[tuple[str, tuple[str, ...]], Any] = {}
            for field_name, calls in READINGS.items():
                if frame.has_gpu_field(field_name):
                    frame.gpu(field_name)[i] = self._reading(i, handle, field_name, calls, answers)

    def _reading(
        self,
        i: int,
        handle: Any,
        field_name: str,
        calls: tuple[Call, ...],
        answers: dict[tuple[str, tuple[str, ...]], Any],
    ) -> float:
        error: Exception | None = None
        for call in calls:
            cache_key = (call.function, call.args)
            if cache_key not in answers:  # one library call per device per tick, however many fields it answers
                try:
                    answers[cache_key] = getattr(self.lib, call.function)(handle, *(self._attr(a) for a in call.args))
                except self.lib.AmdSmiException as exc:
                    answers[cache_key] = exc
            answer = answers[cache_key]
            if isinstance(answer, Exception):
                error = answer
                continue
            for key in call.key:
                answer = answer.get(key) if isinstance(answer, Mapping) else None
            value = call.convert(answer)
            if value is not None and math.isfinite(value):
                self._failing.read(i, field_name)
                return float(value)
        if error is not None:
            self._failing.failed(i, field_name, error)
        return float("nan")

    def close(self) -> None:
        with contextlib.suppress(self.lib.AmdSmiException):
            self.lib.amdsmi_shut_down()


def amd_gpu_inventory(source: AmdSmiSource) -> list[GpuInfo]:
    """The node's AMD GPUs for its inventory. A partition names the index of its physical GPU (the first device
    at the same PCI address) as `parent`; a GPU in SPX mode, or one that cannot be partitioned, has none."""
    idents = source.identities()
    first_at: dict[str, int] = {}
    for i, ident in enumerate(idents):
        first_at.setdefault(normalise_pci(ident.bdf) or f"#{i}", i)
    out = []
    for i, ident in enumerate(idents):
        partitioned = ident.compute_partition.upper() not in ("", "SPX")
        out.append(
            GpuInfo(
                index=i,
                uuid=ident.uuid,
                model=ident.model_name,
                pci_bus_id=ident.bdf,
                serial=ident.serial,
                memory_mib=ident.vram_total_mib,
                power_limit_w=ident.power_cap_w,
                vendor="amd",
                partition=partition_mode(ident.compute_partition, ident.memory_partition),
                parent=first_at.get(normalise_pci(ident.bdf) or f"#{i}") if partitioned else None,
            )
        )
    return out
