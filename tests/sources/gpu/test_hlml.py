"""HlmlSource over a fake `pyhlml` module that answers in habana-pyhlml 1.24's shapes (ctypes structs with
`aip`/`memory`, `total`/`used`/`free` in bytes, bytes strings, mW, HLMLError carrying `.value`), and the
missing-library path against the real package when it is installed."""

from __future__ import annotations

import importlib.util
import math
import sys
from dataclasses import dataclass, field
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from gpufleet.errors import BackendError, DependencyMissingError
from gpufleet.sources.gpu.hlml import READINGS, HlmlSource, gaudi_inventory, load_pyhlml

NOT_SUPPORTED, DRIVER_NOT_LOADED = 3, 9


class HLMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return f"HLML Error with code {self.value}"


@dataclass
class FakeAip:
    name: bytes = b"HL-225"
    serial: bytes = b"AM50016138"
    uuid: bytes = b"01P0-HL2080A0-15-TF8A81-09-07-06"
    bus_id: bytes = b"0000:43:00.0"
    minor: int = 0
    module_id: int = 0
    util: int = 0
    total: int = 98304 * 2**20
    used: int = 768 * 2**20
    temps: dict[int, int] = field(default_factory=lambda: {0: 30, 3: 32})  # on AIP, HBM
    power_mw: int = 84_000
    energy_mj: int = 123_456
    soc_mhz: int = 1650
    ecc: dict[tuple[int, int], int] = field(default_factory=dict)
    rows: tuple[int, int] = (0, 0)
    pending: int = 0
    ports: tuple[int, int] = (0xFFFFFF, 0x700000)  # 24 ports, 3 of them scale-out (20, 21, 22)
    down_ports: set[int] = field(default_factory=set)
    unsupported: set[str] = field(default_factory=set)


def fake_pyhlml(aips: list[FakeAip], *, init_error: int | None = None) -> ModuleType:
    lib = ModuleType("pyhlml")
    lib.HLMLError = HLMLError  # type: ignore[attr-defined]
    handles = [SimpleNamespace(aip=a) for a in aips]

    def init() -> None:
        if init_error is not None:
            print("Failed to load libhlml")  # what pyhlml prints before raising
            raise HLMLError(init_error)

    lib.hlmlInit = init  # type: ignore[attr-defined]
    lib.hlmlShutdown = lambda: None  # type: ignore[attr-defined]
    lib.hlmlDeviceGetCount = lambda: len(handles)  # type: ignore[attr-defined]
    lib.hlmlDeviceGetHandleByIndex = lambda i: handles[i]  # type: ignore[attr-defined]
    lib.hlmlGetDriverVersion = lambda: b"1.21.1-bfcec49"  # type: ignore[attr-defined]

    def api(name: str, answer: Any) -> None:
        def call(handle: Any, *args: Any) -> Any:
            aip: FakeAip = handle.aip
            if name in aip.unsupported:
                raise HLMLError(NOT_SUPPORTED)
            return answer(aip, *args)

        setattr(lib, name, call)

    api("hlmlDeviceGetName", lambda a: a.name)
    api("hlmlDeviceGetSerial", lambda a: a.serial)
    api("hlmlDeviceGetUUID", lambda a: a.uuid)
    api("hlmlDeviceGetPCIInfo", lambda a: SimpleNamespace(bus_id=a.bus_id, pci_device_id=0x10201DA3))
    api("hlmlDeviceGetMinorNumber", lambda a: a.minor)
    api("hlmlDeviceGetModuleID", lambda a: a.module_id)
    api("hlmlDeviceGetPowerManagementDefaultLimit", lambda a: 600_000)
    api("hlmlDeviceGetUtilizationRates", lambda a: SimpleNamespace(aip=a.util, memory=0))
    api("hlmlDeviceGetMemoryInfo", lambda a: SimpleNamespace(total=a.total, used=a.used, free=a.total - a.used))
    api("hlmlDeviceGetTemperature", lambda a, sensor: a.temps[sensor])
    api("hlmlDeviceGetTemperatureThreshold", lambda a, kind: 95)
    api("hlmlDeviceGetPowerUsage", lambda a: a.power_mw)
    api("hlmlDeviceGetTotalEnergyConsumption", lambda a: a.energy_mj)
    api("hlmlDeviceGetClockInfo", lambda a, kind: a.soc_mhz)
    api("hlmlDeviceGetPCIEReplayCounter", lambda a: 0)
    api("hlmlDeviceGetCurrPCIELinkGeneration", lambda a: 4)
    api("hlmlDeviceGetCurrPCIELinkWidth", lambda a: 16)
    api("hlmlDeviceGetTotalECCErrors", lambda a, kind, counter: a.ecc.get((kind, counter), 0))
    api("hlmlDeviceGetReplacedRowsCount", lambda a, cause: a.rows[cause])
    api("hlmlDeviceGetReplacedRowsPendingStatus", lambda a: a.pending)
    api("hlmlDeviceGetMacAddrInfo", lambda a: ((a.ports[0], 0), (a.ports[1], 0)))
    api("hlmlDeviceNicGetLink", lambda a, port: port not in a.down_ports)
    return lib


def node(n: int = 8) -> list[FakeAip]:
    return [
        FakeAip(minor=i, module_id=(i + 2) % n, bus_id=f"0000:{0x19 + i:02x}:00.0".encode(), uuid=f"uuid-{i}".encode())
        for i in range(n)
    ]


def test_entities_are_intel_accel_devices_with_catalog_names() -> None:
    source = HlmlSource("gaudi-1", pyhlml=fake_pyhlml(node()))
    entities = source.entities()
    assert [e.device for e in entities] == [f"accel{i}" for i in range(8)]
    assert {e.vendor for e in entities} == {"intel"} and {e.model_name for e in entities} == {"HL-225"}
    assert entities[0].serial == "AM50016138" and entities[0].pci_bus_id == "0000:19:00.0"
    assert entities[0].partition == "" and entities[0].label_fields == (("DCGM_FI_DRIVER_VERSION", "1.21.1-bfcec49"),)


def test_collect_converts_units() -> None:
    aips = node(2)
    aips[1] = FakeAip(
        minor=1, util=88, used=94963 * 2**20, power_mw=525_000, temps={0: 35, 3: 41}, rows=(2, 1), pending=1,
        ecc={(0, 0): 7, (1, 1): 1}, down_ports={21},
    )  # fmt: skip
    source = HlmlSource("g", pyhlml=fake_pyhlml(aips))
    frame = source.new_frame()
    source.collect(frame)
    assert frame.gpu("DCGM_FI_DEV_GPU_UTIL")[1] == 88
    assert frame.gpu("DCGM_FI_DEV_FB_USED")[1] == 94963 and frame.gpu("DCGM_FI_DEV_FB_FREE")[1] == 98304 - 94963
    assert frame.gpu("DCGM_FI_DEV_POWER_USAGE")[1] == 525.0  # mW -> W
    assert frame.gpu("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")[0] == 123_456  # mJ
    assert (frame.gpu("DCGM_FI_DEV_GPU_TEMP")[1], frame.gpu("DCGM_FI_DEV_MEMORY_TEMP")[1]) == (35, 41)
    assert frame.gpu("DCGM_FI_DEV_SM_CLOCK")[0] == 1650 and math.isnan(frame.gpu("DCGM_FI_DEV_MEM_CLOCK")[0])
    assert frame.gpu("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL")[1] == 7 and frame.gpu("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL")[1] == 1
    assert frame.gpu("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")[1] == 0
    assert frame.gpu("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS")[1] == 2
    assert frame.gpu("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS")[1] == 1
    assert frame.gpu("DCGM_FI_DEV_RETIRED_PENDING")[1] == 1
    assert frame.gpu("DCGM_FI_DEV_PCIE_LINK_GEN")[0] == 4 and frame.gpu("DCGM_FI_DEV_SLOWDOWN_TEMP")[0] == 95
    if frame.has_gpu_field("gpufleet_gpu_nic_port_up_mask"):
        assert frame.gpu("gpufleet_gpu_nic_port_mask")[1] == 0xFFFFFF
        assert frame.gpu("gpufleet_gpu_nic_port_external_mask")[1] == 0x700000
        assert frame.gpu("gpufleet_gpu_nic_port_up_mask")[1] == 0xFFFFFF & ~(1 << 21)


def test_an_unsupported_call_leaves_nan_and_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    aips = [FakeAip(unsupported={"hlmlDeviceGetTotalEnergyConsumption"})]
    source = HlmlSource("g", pyhlml=fake_pyhlml(aips))
    frame = source.new_frame()
    for _ in range(3):
        source.collect(frame)
    assert math.isnan(frame.gpu("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")[0])
    assert frame.gpu("DCGM_FI_DEV_POWER_USAGE")[0] == 84
    assert len([r for r in caplog.records if "TOTAL_ENERGY" in r.getMessage()]) == 1


def test_inventory() -> None:
    inventory = gaudi_inventory(HlmlSource("g", pyhlml=fake_pyhlml(node(2))))
    assert [(g.index, g.vendor, g.model, g.parent, g.partition) for g in inventory] == [
        (0, "intel", "HL-225", None, ""), (1, "intel", "HL-225", None, ""),
    ]  # fmt: skip
    assert inventory[0].memory_mib == 98304 and inventory[0].power_limit_w == 600 and inventory[1].uuid == "uuid-1"


def test_the_mapping_is_data() -> None:
    assert READINGS["DCGM_FI_DEV_POWER_USAGE"].function == "hlmlDeviceGetPowerUsage"
    assert all(r.function.startswith("hlmlDevice") for r in READINGS.values())


def test_no_libhlml_is_one_dependency_error_without_noise(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(DependencyMissingError, match=r"libhlml\.so") as info:
        HlmlSource("g", pyhlml=fake_pyhlml([], init_error=1))
    assert "habana-pyhlml" in (info.value.fix or "") and capsys.readouterr().out == ""


def test_a_driver_that_is_not_loaded_is_a_backend_error() -> None:
    with pytest.raises(BackendError, match="HLML could not start") as info:
        HlmlSource("g", pyhlml=fake_pyhlml([], init_error=DRIVER_NOT_LOADED))
    assert "hl-smi" in (info.value.fix or "")


def test_missing_package_is_one_dependency_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyhlml", None)
    with pytest.raises(DependencyMissingError, match="habana-pyhlml"):
        load_pyhlml()


def test_real_package_without_the_driver(capsys: pytest.CaptureFixture[str]) -> None:
    if importlib.util.find_spec("pyhlml") is None:
        pytest.skip("habana-pyhlml is not installed (pip install habana-pyhlml==1.24.2.481 to run this against it)")
    with pytest.raises(DependencyMissingError, match=r"libhlml\.so"):
        HlmlSource("g")
    assert "Failed to load libhlml" not in capsys.readouterr().out
