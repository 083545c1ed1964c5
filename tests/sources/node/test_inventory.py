"""A node's GPU inventory through NVML: the enforced power limit and, on a MIG-enabled GPU, every GPU instance with
its profile, placement and MIG device. NVML here is nvidia-ml-py's own module (its error classes, constants and
ctypes structures) with the functions that would reach the driver answering from a host's values instead."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

import pynvml
import pytest

from gpufleet.model.observe import Batch, MigInfo, NodeInventory
from gpufleet.model.wire import decode_batch, encode
from gpufleet.sched.partition.mig import MigLayout, geometry_of
from gpufleet.sources.node.inventory import gpu_inventory

NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED

# H100 80GB HBM3 as `nvidia-smi mig -lgip` lists it: NVML profile enum -> (profile id, name, instances, memory MiB)
H100_PROFILES = {
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE: (19, "MIG 1g.10gb", 7, 9984),
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1: (20, "MIG 1g.10gb+me", 1, 9984),
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2: (15, "MIG 1g.20gb", 4, 20096),
    pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE: (14, "MIG 2g.20gb", 3, 20096),
    pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE: (9, "MIG 3g.40gb", 2, 40448),
    pynvml.NVML_GPU_INSTANCE_PROFILE_4_SLICE: (5, "MIG 4g.40gb", 1, 40448),
    pynvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE: (0, "MIG 7g.80gb", 1, 81152),
}
# A balanced layout: 2g.20gb on slices 0-1, two 1g.10gb on 2 and 3, 3g.40gb on 4-7 (GI id, profile id, start, size)
BALANCED = [(3, 14, 0, 2), (9, 19, 2, 1), (10, 19, 3, 1), (2, 9, 4, 4)]


def _mig_uuid(gi: int) -> str:
    return f"MIG-5c8b2f3e-7d1a-5e39-9a0c-4b6d{gi:08x}"


@dataclass
class FakeGpu:
    name: str
    uuid: str
    bus: str
    power_limit_mw: int | None
    mig_mode: tuple[int, int] | None = None  # None: the GPU has no MIG (NotSupported)
    profiles: dict[int, tuple[int, str, int, int]] = field(default_factory=dict)
    instances: list[tuple[int, int, int, int]] = field(default_factory=list)
    devices: list[tuple[int, int, str]] = field(default_factory=list)  # MIG devices: GI id, CI id, UUID
    max_mig_devices: int = 7
    failing: set[str] = field(default_factory=set)  # NVML functions that answer NoPermission on this GPU
    v2_profile_info: bool = True  # older drivers have only the v1 profile info (no names)


class FakeNvml:
    """nvidia-ml-py with the driver replaced by `gpus`. Functions it does not define are missing, as they are
    from bindings older than them."""

    def __init__(self, gpus: list[FakeGpu]) -> None:
        self.gpus = gpus
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        if name.startswith("nvml"):
            raise AttributeError(name)
        return getattr(pynvml, name)  # NVMLError and its subclasses, constants, ctypes structures

    def _gpu(self, fn: str, handle: Any) -> FakeGpu:
        self.calls.append(fn)
        gpu = self.gpus[handle]
        if fn in gpu.failing:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)
        return gpu

    def _mig(self, fn: str, handle: int) -> FakeGpu:
        gpu = self._gpu(fn, handle)
        if gpu.mig_mode is None:
            raise pynvml.NVMLError(NOT_SUPPORTED)
        return gpu

    # --- the device --------------------------------------------------------------------------------------------

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return self._gpu("nvmlDeviceGetName", h).name.encode()

    def nvmlDeviceGetUUID(self, h: Any) -> bytes:
        if isinstance(h, tuple):  # a MIG device handle
            gpu_index, slot = h
            return self._gpu("nvmlDeviceGetUUID", gpu_index).devices[slot][2].encode()
        return self._gpu("nvmlDeviceGetUUID", h).uuid.encode()

    def nvmlDeviceGetSerial(self, h: int) -> bytes:
        return f"165422{h:07d}".encode()

    def nvmlDeviceGetPciInfo(self, h: int) -> Any:
        info = pynvml.nvmlPciInfo_t()
        info.busId = self._gpu("nvmlDeviceGetPciInfo", h).bus.encode()
        return info

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        self._gpu("nvmlDeviceGetMemoryInfo", h)
        info = pynvml.c_nvmlMemory_t()
        info.total = 81559 * 2**20
        return info

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        limit = self._gpu("nvmlDeviceGetEnforcedPowerLimit", h).power_limit_mw
        if limit is None:
            raise pynvml.NVMLError(NOT_SUPPORTED)
        return limit

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return 12040

    # --- MIG ---------------------------------------------------------------------------------------------------

    def nvmlDeviceGetMigMode(self, h: int) -> list[int]:
        mode = self._mig("nvmlDeviceGetMigMode", h).mig_mode
        assert mode is not None
        return list(mode)

    def nvmlDeviceGetGpuInstanceProfileInfo(self, h: int, profile: int, version: int = 2) -> Any:
        gpu = self._mig("nvmlDeviceGetGpuInstanceProfileInfo", h)
        if version == 2 and not gpu.v2_profile_info:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        if profile not in gpu.profiles:
            raise pynvml.NVMLError(NOT_SUPPORTED)
        pid, name, count, mib = gpu.profiles[profile]
        info = pynvml.c_nvmlGpuInstanceProfileInfo_v2_t() if version == 2 else pynvml.c_nvmlGpuInstanceProfileInfo_t()
        info.id, info.instanceCount, info.memorySizeMB = pid, count, mib
        info.sliceCount = int(name.split()[-1][0])
        if version == 2:
            info.name = name.encode()
        return info

    def nvmlDeviceGetGpuInstances(self, h: int, profile_id: int, instances: Any, count: Any) -> int:
        gpu = self._mig("nvmlDeviceGetGpuInstances", h)
        mine = [gi for gi, pid, _, _ in gpu.instances if pid == profile_id]
        for k, gi in enumerate(mine):
            instances[k] = ctypes.cast(ctypes.c_void_p(self._address(h, gi)), pynvml.c_nvmlGpuInstance_t)
        count._obj.value = len(mine)
        return pynvml.NVML_SUCCESS

    def nvmlGpuInstanceGetInfo(self, instance: Any) -> Any:
        address = ctypes.cast(instance, ctypes.c_void_p).value or 0
        h, gi = divmod(address - 0x100000, 0x10000)
        gpu = self._mig("nvmlGpuInstanceGetInfo", h)
        _, pid, start, size = next(x for x in gpu.instances if x[0] == gi)
        info = pynvml.c_nvmlGpuInstanceInfo_t()
        info.id, info.profileId = gi, pid
        info.placement.start, info.placement.size = start, size
        return info

    def nvmlDeviceGetMaxMigDeviceCount(self, h: int) -> int:
        return self._mig("nvmlDeviceGetMaxMigDeviceCount", h).max_mig_devices

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: int, index: int) -> tuple[int, int]:
        gpu = self._mig("nvmlDeviceGetMigDeviceHandleByIndex", h)
        if index >= len(gpu.devices):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return (h, index)

    def nvmlDeviceGetGpuInstanceId(self, device: tuple[int, int]) -> int:
        return self._mig("nvmlDeviceGetGpuInstanceId", device[0]).devices[device[1]][0]

    def nvmlDeviceGetComputeInstanceId(self, device: tuple[int, int]) -> int:
        return self._mig("nvmlDeviceGetComputeInstanceId", device[0]).devices[device[1]][1]

    @staticmethod
    def _address(h: int, gi: int) -> int:
        return 0x100000 + h * 0x10000 + gi


@dataclass
class Source:
    """What gpu_inventory takes: an NvmlSource's bindings and device handles."""

    nvml: FakeNvml
    handles: list[int]


def read(*gpus: FakeGpu) -> tuple[list[Any], FakeNvml]:
    fake = FakeNvml(list(gpus))
    found, cuda = gpu_inventory(Source(fake, list(range(len(gpus)))))
    assert cuda == "12.4"
    return found, fake


def h100(**kw: Any) -> FakeGpu:
    base: dict[str, Any] = {
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": "GPU-2f0a7c61-3c1d-5b7e-8e42-0d9f6a1b2c3d",
        "bus": "00000000:18:00.0",
        "power_limit_mw": 700000,
        "mig_mode": (1, 1),
        "profiles": dict(H100_PROFILES),
        "instances": list(BALANCED),
        "devices": [(gi, 0, _mig_uuid(gi)) for gi, _, _, _ in BALANCED],
    }
    return FakeGpu(**(base | kw))


def test_a_mig_enabled_h100_lists_its_gpu_instances_with_placement_and_mig_device() -> None:
    (gpu,), _ = read(h100())
    assert gpu.model == "NVIDIA H100 80GB HBM3" and gpu.mig_mode is True
    assert gpu.power_limit_w == 700.0  # NVML says milliwatts
    assert gpu.mig == [
        MigInfo("2g.20gb", gi_id=3, start=0, size=2, uuid=_mig_uuid(3), ci_id=0),
        MigInfo("1g.10gb", gi_id=9, start=2, size=1, uuid=_mig_uuid(9), ci_id=0),
        MigInfo("1g.10gb", gi_id=10, start=3, size=1, uuid=_mig_uuid(10), ci_id=0),
        MigInfo("3g.40gb", gi_id=2, start=4, size=4, uuid=_mig_uuid(2), ci_id=0),
    ]
    # what NVML reported is a layout the catalog's geometry accepts
    layout = MigLayout.of(geometry_of(gpu.model), [(m.profile, m.start) for m in gpu.mig])
    assert layout.free_slices == []


def test_the_inventory_passes_the_contract_on_the_wire() -> None:
    gpus, _ = read(h100(), h100(mig_mode=(0, 0), instances=[], devices=[]))
    batch = Batch(1, "n", "i", "n", 1.0, inventory=NodeInventory(hostname="n", gpus=gpus))
    back = decode_batch(encode(batch))
    assert back.inventory is not None and back.inventory.gpus == gpus


def test_a_gpu_without_mig_says_so_by_leaving_mig_unknown() -> None:
    v100 = FakeGpu("Tesla V100-SXM2-32GB", "GPU-0b1c", "00000000:1A:00.0", 300000, mig_mode=None)
    (gpu,), fake = read(v100)
    assert (gpu.mig_mode, gpu.mig, gpu.power_limit_w) == (None, [], 300.0)
    assert gpu.uuid == "GPU-0b1c" and gpu.pci_bus_id == "00000000:1A:00.0" and gpu.memory_mib == 81559.0
    assert "nvmlDeviceGetGpuInstances" not in fake.calls


def test_mig_off_reads_no_instances() -> None:
    (gpu,), fake = read(h100(mig_mode=(0, 1)))  # enabled on the next reset: not yet
    assert (gpu.mig_mode, gpu.mig) == (False, [])
    assert not any("Instance" in c or "MigDevice" in c for c in fake.calls)


def test_a_gpu_instance_without_a_compute_instance_is_listed_without_a_mig_device() -> None:
    (gpu,), _ = read(h100(devices=[(2, 0, _mig_uuid(2))]))
    by_gi = {m.gi_id: m for m in gpu.mig}
    assert (by_gi[2].uuid, by_gi[2].ci_id) == (_mig_uuid(2), 0)
    assert (by_gi[9].uuid, by_gi[9].ci_id) == ("", None)
    assert len(gpu.mig) == 4


def test_a_gpu_instance_split_into_compute_instances_names_its_first() -> None:
    devices = [(2, 1, "MIG-second"), (2, 0, "MIG-first"), (3, 0, _mig_uuid(3))]
    (gpu,), _ = read(h100(instances=BALANCED[:1] + BALANCED[3:], devices=devices))
    assert [(m.gi_id, m.uuid, m.ci_id) for m in gpu.mig] == [(3, _mig_uuid(3), 0), (2, "MIG-first", 0)]


@pytest.mark.parametrize(
    "failing",
    [
        {"nvmlDeviceGetGpuInstances"},
        {"nvmlDeviceGetGpuInstanceProfileInfo"},
        {"nvmlGpuInstanceGetInfo"},
    ],
)
def test_mig_readings_that_fail_leave_the_instances_unknown(failing: set[str]) -> None:
    (gpu,), _ = read(h100(failing=failing))
    assert gpu.mig_mode is True and gpu.mig == []
    assert gpu.uuid and gpu.power_limit_w == 700.0  # the rest of the GPU stands


@pytest.mark.parametrize(
    "failing",
    [{"nvmlDeviceGetMaxMigDeviceCount"}, {"nvmlDeviceGetMigDeviceHandleByIndex"}, {"nvmlDeviceGetGpuInstanceId"}],
)
def test_mig_devices_that_cannot_be_read_leave_uuids_empty(failing: set[str]) -> None:
    (gpu,), _ = read(h100(failing=failing))
    assert [(m.profile, m.start) for m in gpu.mig] == [("2g.20gb", 0), ("1g.10gb", 2), ("1g.10gb", 3), ("3g.40gb", 4)]
    assert {(m.uuid, m.ci_id) for m in gpu.mig} == {("", None)}


def test_a_failing_power_limit_is_unknown() -> None:
    gpus, _ = read(h100(power_limit_mw=None), h100(failing={"nvmlDeviceGetEnforcedPowerLimit"}))
    assert [g.power_limit_w for g in gpus] == [None, None]


def test_without_v2_profile_info_the_catalog_names_profiles_by_id() -> None:
    (gpu,), _ = read(h100(v2_profile_info=False))
    assert [m.profile for m in gpu.mig] == ["2g.20gb", "1g.10gb", "1g.10gb", "3g.40gb"]


def test_bindings_without_the_mig_functions_still_give_an_inventory() -> None:
    class Old(FakeNvml):
        def __getattribute__(self, name: str) -> Any:
            if name in ("nvmlDeviceGetMaxMigDeviceCount", "nvmlDeviceGetGpuInstances"):
                raise AttributeError(name)
            return super().__getattribute__(name)

    fake = Old([h100()])
    (gpu,), _ = gpu_inventory(Source(fake, [0]))
    assert gpu.mig_mode is True and gpu.mig == [] and gpu.power_limit_w == 700.0


def test_instances_outside_the_contract_are_left_out() -> None:
    (gpu,), _ = read(h100(instances=[*BALANCED[:3], (300, 9, 4, 4)], devices=[]))
    assert [m.gi_id for m in gpu.mig] == [3, 9, 10]


def test_gpus_in_an_nvlink_domain_carry_its_clique_and_cluster_uuid() -> None:
    """NVML's fabric info through nvidia-ml-py's own module, answered from recorded nvidia-smi -q Fabric sections
    (tests/captures/nvml_state/*.source.txt): a GB200 that joined its domain, and one whose registration failed."""
    from pathlib import Path

    from gpufleet.sources.gpu.nvml import NvmlSource
    from tests.sources.gpu import fake_nvml

    captures = Path(__file__).parents[2] / "captures" / "nvml_state"
    joined = fake_nvml.fabric_from_capture((captures / "fabric_gb200_unhealthy_dra626.txt").read_text())
    failed = fake_nvml.fabric_from_capture((captures / "fabric_insufficient_resources_azhpc506.txt").read_text())
    fake = fake_nvml.FakeNvml(
        [
            fake_nvml.FakeGpu(f"GPU-{i}", "NVIDIA GB200", minor=i, fabric=fabric)
            for i, fabric in enumerate((joined, failed, None))
        ]
    )
    gpus, _ = gpu_inventory(NvmlSource("node-a", fake))
    assert [(g.clique_id, g.cluster_uuid) for g in gpus] == [
        (2, "dc6e40c4-d722-4357-9ba6-5291dd461278"),
        (None, ""),  # registration failed: not in a domain
        (None, ""),  # no fabric (no NVSwitch): nothing to say
    ]
    batch = Batch(1, "n", "i", "n", 1.0, inventory=NodeInventory(hostname="n", gpus=gpus))
    back = decode_batch(encode(batch))
    assert back.inventory is not None and back.inventory.gpus[0].clique_id == 2
