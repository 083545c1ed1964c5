"""AmdSmiSource over a fake `amdsmi` module that answers in the real bindings' shapes (amdsmi_interface.py of
amdsmi 7.0.2: dicts with "N/A" for unsupported values, enum-typed arguments checked with isinstance, errors as
AmdSmiLibraryException), and the missing-library path against the real package when it is installed."""

from __future__ import annotations

import importlib.util
import math
import sys
from dataclasses import dataclass, field
from enum import IntEnum
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from gpufleet.errors import BackendError, DependencyMissingError
from gpufleet.sources.gpu.amdsmi import READINGS, AmdSmiSource, amd_gpu_inventory, load_amdsmi

NOT_SUPPORTED = 2


class AmdSmiException(Exception):
    pass


class AmdSmiLibraryException(AmdSmiException):
    def __init__(self, err_code: int) -> None:
        super().__init__(err_code)
        self.err_code = err_code

    def __str__(self) -> str:
        return f"Error code:\n\t{self.err_code} | AMDSMI_STATUS_NOT_SUPPORTED - Feature not supported"


class AmdSmiParameterException(AmdSmiException):
    pass


class AmdSmiInitFlags(IntEnum):
    INIT_AMD_GPUS = 2


class AmdSmiTemperatureType(IntEnum):
    EDGE = 0
    HOTSPOT = 1
    VRAM = 2
    HBM_0 = 3


class AmdSmiTemperatureMetric(IntEnum):
    CURRENT = 0
    CRITICAL = 5


class AmdSmiClkType(IntEnum):
    GFX = 0
    MEM = 4


@dataclass
class FakeGpu:
    """One device's answers. `unsupported` names the functions (or function:argument) that raise NOT_SUPPORTED."""

    bdf: str
    uuid: str
    market_name: str = "AMD Instinct MI300X"
    device_id: int = 0x74A1
    serial: str = "0xAF54E92B0A5D57C8"
    compute: str = "SPX"
    memory: str = "NPS1"
    partition_id: int = 0
    render: int = 128
    gfx: int = 0
    umc: int = 0
    vram_total: int = 196592  # MB
    vram_used: int = 283
    temps: dict[str, int] = field(default_factory=lambda: {"HOTSPOT": 40, "EDGE": 0, "VRAM": 35, "HBM_0": 36})
    slowdown: int = 100
    current_power: Any = 180
    average_power: Any = "N/A"
    energy: int = 5_000_000  # accumulator ticks of 15.259 uJ
    gfx_clk: int = 2106
    mem_clk: int = 900
    ecc: tuple[int, int, int] = (0, 0, 0)
    pcie: tuple[int, int, int] = (16, 32000, 0)  # width, MT/s, replays
    power_cap_uw: int = 750_000_000
    unsupported: set[str] = field(default_factory=set)


def fake_amdsmi(gpus: list[FakeGpu], *, init_fails: bool = False) -> ModuleType:
    lib = ModuleType("amdsmi")
    handles = [SimpleNamespace(gpu=g) for g in gpus]
    lib.AmdSmiException = AmdSmiException  # type: ignore[attr-defined]
    lib.AmdSmiLibraryException = AmdSmiLibraryException  # type: ignore[attr-defined]
    for enum in (AmdSmiInitFlags, AmdSmiTemperatureType, AmdSmiTemperatureMetric, AmdSmiClkType):
        setattr(lib, enum.__name__, enum)
    calls: list[str] = []
    lib.calls = calls  # type: ignore[attr-defined]

    def api(name: str, answer: Any) -> None:
        def call(handle: Any, *args: Any) -> Any:
            calls.append(name)
            gpu: FakeGpu = handle.gpu
            tag = f"{name}:{args[0].name}" if args and isinstance(args[0], IntEnum) else name
            if name in gpu.unsupported or tag in gpu.unsupported:
                raise AmdSmiLibraryException(NOT_SUPPORTED)
            return answer(gpu, *args)

        setattr(lib, name, call)

    def init(flag: Any) -> None:
        if not isinstance(flag, AmdSmiInitFlags):
            raise AmdSmiParameterException(flag)
        if init_fails:
            raise AmdSmiLibraryException(8)

    lib.amdsmi_init = init  # type: ignore[attr-defined]
    lib.amdsmi_shut_down = lambda: None  # type: ignore[attr-defined]
    lib.amdsmi_get_processor_handles = lambda: list(handles)  # type: ignore[attr-defined]

    def temp(g: FakeGpu, sensor: Any, metric: Any) -> int:
        if not isinstance(sensor, AmdSmiTemperatureType) or not isinstance(metric, AmdSmiTemperatureMetric):
            raise AmdSmiParameterException((sensor, metric))
        return g.slowdown if metric is AmdSmiTemperatureMetric.CRITICAL else g.temps[sensor.name]

    def clock(g: FakeGpu, kind: Any) -> dict[str, Any]:
        if not isinstance(kind, AmdSmiClkType):
            raise AmdSmiParameterException(kind)
        clk = g.gfx_clk if kind is AmdSmiClkType.GFX else g.mem_clk
        return {"clk": clk, "min_clk": 500, "max_clk": 2100, "clk_locked": False, "clk_deep_sleep": "N/A"}

    api("amdsmi_get_gpu_activity", lambda g: {"gfx_activity": g.gfx, "umc_activity": g.umc, "mm_activity": "N/A"})
    api("amdsmi_get_gpu_vram_usage", lambda g: {"vram_total": g.vram_total, "vram_used": g.vram_used})
    api("amdsmi_get_temp_metric", temp)
    api("amdsmi_get_power_info", lambda g: {
        "socket_power": g.current_power, "current_socket_power": g.current_power,
        "average_socket_power": g.average_power, "gfx_voltage": "N/A", "soc_voltage": "N/A", "mem_voltage": "N/A",
        "power_limit": 750,
    })  # fmt: skip
    api("amdsmi_get_energy_count", lambda g: {
        "energy_accumulator": g.energy, "counter_resolution": 15.259, "timestamp": 1,
    })  # fmt: skip
    api("amdsmi_get_clock_info", clock)
    api("amdsmi_get_gpu_total_ecc_count", lambda g: dict(zip(
        ("correctable_count", "uncorrectable_count", "deferred_count"), g.ecc, strict=True
    )))  # fmt: skip
    api("amdsmi_get_pcie_info", lambda g: {
        "pcie_static": {"max_pcie_width": 16, "max_pcie_speed": 32000, "pcie_interface_version": 5, "slot_type": 1},
        "pcie_metric": {"pcie_width": g.pcie[0], "pcie_speed": g.pcie[1], "pcie_bandwidth": 120,
                        "pcie_replay_count": g.pcie[2], "pcie_l0_to_recovery_count": 0},
    })  # fmt: skip
    api("amdsmi_get_gpu_asic_info", lambda g: {
        "market_name": g.market_name, "vendor_id": 0x1002, "device_id": g.device_id, "rev_id": "0x00",
        "asic_serial": g.serial, "oam_id": 7, "num_compute_units": 304, "target_graphics_version": "gfx942",
    })  # fmt: skip
    api("amdsmi_get_gpu_board_info", lambda g: {"product_name": "N/A", "product_serial": "N/A"})
    api("amdsmi_get_gpu_device_bdf", lambda g: g.bdf)
    api("amdsmi_get_gpu_device_uuid", lambda g: g.uuid)
    api("amdsmi_get_gpu_enumeration_info", lambda g: {
        "drm_render": g.render, "drm_card": g.render - 128, "hsa_id": 2, "hip_id": 0, "hip_uuid": "GPU-x",
    })  # fmt: skip
    api("amdsmi_get_gpu_kfd_info", lambda g: {"kfd_id": 63274, "node_id": 2, "current_partition_id": g.partition_id})
    api("amdsmi_get_gpu_compute_partition", lambda g: g.compute)
    api("amdsmi_get_gpu_memory_partition", lambda g: g.memory)
    api(
        "amdsmi_get_gpu_driver_info",
        lambda g: {"driver_name": "amdgpu", "driver_version": "6.10.5", "driver_date": "x"},
    )
    api("amdsmi_get_power_cap_info", lambda g: {"power_cap": g.power_cap_uw, "default_power_cap": g.power_cap_uw})
    return lib


def cpx_node() -> list[FakeGpu]:
    """One MI300X in CPX/NPS4: eight partitions at 0000:05:00.0 .. .7, render nodes 128..135."""
    return [
        FakeGpu(
            bdf=f"0000:05:00.{p}", uuid=f"afff74a1-0000-1000-8054-e92b0a5d57c{p}", compute="CPX", memory="NPS4",
            partition_id=p, render=128 + p, gfx=11 * p, umc=p, vram_used=1000 * p, vram_total=24574,
        )
        for p in range(8)
    ]  # fmt: skip


def test_entities_name_vendor_partition_and_render_node() -> None:
    source = AmdSmiSource("node-a", amdsmi=fake_amdsmi(cpx_node()))
    entities = source.entities()
    assert len(entities) == 8 and {e.vendor for e in entities} == {"amd"}
    assert {e.partition for e in entities} == {"CPX_NPS4"} and [e.partition_id for e in entities] == list(range(8))
    assert [e.device for e in entities] == [f"renderD{128 + p}" for p in range(8)]
    first = entities[0]
    assert (first.model_name, first.serial, first.pci_bus_id, first.hostname) == (
        "AMD Instinct MI300X", "0xAF54E92B0A5D57C8", "0000:05:00.0", "node-a",
    )  # fmt: skip
    assert first.label_fields == (("DCGM_FI_DRIVER_VERSION", "6.10.5"),)


def test_collect_fills_the_canonical_fields_in_their_units() -> None:
    lib = fake_amdsmi(cpx_node())
    source = AmdSmiSource("node-a", amdsmi=lib)
    frame = source.new_frame()
    source.collect(frame)
    assert list(frame.gpu("DCGM_FI_DEV_GPU_UTIL")) == [11.0 * p for p in range(8)]
    assert list(frame.gpu("DCGM_FI_DEV_MEM_COPY_UTIL")) == [float(p) for p in range(8)]
    assert frame.gpu("DCGM_FI_DEV_FB_USED")[3] == 3000 and frame.gpu("DCGM_FI_DEV_FB_FREE")[3] == 24574 - 3000
    assert frame.gpu("DCGM_FI_DEV_GPU_TEMP")[0] == 40 and frame.gpu("DCGM_FI_DEV_MEMORY_TEMP")[0] == 35
    assert frame.gpu("DCGM_FI_DEV_POWER_USAGE")[0] == 180  # current_socket_power on MI300
    assert frame.gpu("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")[0] == pytest.approx(5_000_000 * 15.259 / 1000)  # mJ
    assert (frame.gpu("DCGM_FI_DEV_SM_CLOCK")[0], frame.gpu("DCGM_FI_DEV_MEM_CLOCK")[0]) == (2106, 900)
    assert frame.gpu("DCGM_FI_DEV_PCIE_LINK_GEN")[0] == 5 and frame.gpu("DCGM_FI_DEV_PCIE_LINK_WIDTH")[0] == 16
    assert frame.gpu("DCGM_FI_DEV_PCIE_MAX_LINK_GEN")[0] == 5
    assert frame.gpu("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")[0] == 0
    # one library call per device per tick, however many fields it answers
    assert lib.calls.count("amdsmi_get_pcie_info") == 8 and lib.calls.count("amdsmi_get_gpu_activity") == 8


def test_errors_counts_and_fallbacks() -> None:
    mi250 = FakeGpu(
        bdf="0000:c1:00.0", uuid="u-250", market_name="AMD Instinct MI250X", device_id=0x740C,
        current_power="N/A", average_power=310, ecc=(12, 1, 0), pcie=(16, 16000, 147),
        temps={"HOTSPOT": 0, "EDGE": 51, "VRAM": 48, "HBM_0": 48},
        unsupported={"amdsmi_get_temp_metric:HOTSPOT", "amdsmi_get_energy_count"},
    )  # fmt: skip
    source = AmdSmiSource("n", amdsmi=fake_amdsmi([mi250]))
    frame = source.new_frame()
    source.collect(frame)
    assert frame.gpu("DCGM_FI_DEV_GPU_TEMP")[0] == 51  # the edge sensor, when there is no junction one
    assert frame.gpu("DCGM_FI_DEV_POWER_USAGE")[0] == 310  # average_socket_power when current is "N/A"
    assert math.isnan(frame.gpu("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")[0])  # the error leaves NaN
    for field_name in ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL"):
        assert frame.gpu(field_name)[0] == 12
    assert frame.gpu("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL")[0] == 1
    assert frame.gpu("DCGM_FI_DEV_PCIE_REPLAY_COUNTER")[0] == 147 and frame.gpu("DCGM_FI_DEV_PCIE_LINK_GEN")[0] == 4
    assert source.entities()[0].model_name == "AMD Instinct MI250X" and source.entities()[0].partition == "SPX_NPS1"


def test_a_failing_field_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    gpu = FakeGpu(bdf="0000:05:00.0", uuid="u", unsupported={"amdsmi_get_energy_count"})
    source = AmdSmiSource("n", amdsmi=fake_amdsmi([gpu]))
    frame = source.new_frame()
    for _ in range(3):
        source.collect(frame)
    warnings = [r for r in caplog.records if "TOTAL_ENERGY" in r.getMessage()]
    assert len(warnings) == 1 and "not supported" in warnings[0].getMessage().lower()


def test_inventory_names_partitions_and_their_parent() -> None:
    gpus = [*cpx_node(), FakeGpu(bdf="0000:26:00.0", uuid="solo")]
    inventory = amd_gpu_inventory(AmdSmiSource("n", amdsmi=fake_amdsmi(gpus)))
    assert [g.parent for g in inventory] == [0] * 8 + [None]
    assert {g.vendor for g in inventory} == {"amd"} and inventory[0].partition == "CPX_NPS4"
    assert inventory[8].partition == "SPX_NPS1" and inventory[8].power_limit_w == 750  # uW -> W
    assert inventory[0].memory_mib == 24574 and inventory[0].model == "AMD Instinct MI300X"


def test_the_mapping_is_data_with_a_call_per_canonical_field() -> None:
    assert {
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    } <= set(READINGS)
    assert all(call.function.startswith("amdsmi_") for calls in READINGS.values() for call in calls)


def test_a_library_that_will_not_start_is_a_backend_error() -> None:
    with pytest.raises(BackendError, match="AMD SMI could not start") as info:
        AmdSmiSource("n", amdsmi=fake_amdsmi([], init_fails=True))
    assert "amd-smi list" in (info.value.fix or "")


def test_missing_package_is_one_dependency_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "amdsmi", None)  # import amdsmi -> ImportError
    with pytest.raises(DependencyMissingError, match="not installed") as info:
        load_amdsmi()
    assert "amd-smi-lib" in (info.value.fix or "")


def test_real_package_without_libamd_smi_is_one_clean_error(capsys: pytest.CaptureFixture[str]) -> None:
    if importlib.util.find_spec("amdsmi") is None:
        pytest.skip("the amdsmi wheel is not installed (pip install amdsmi==7.0.2 to run this against it)")
    with pytest.raises(DependencyMissingError, match=r"libamd_smi\.so") as info:
        AmdSmiSource("n")
    assert "amd-smi-lib" in (info.value.fix or "")
    assert capsys.readouterr().out == ""  # the package's own dlopen noise is swallowed
