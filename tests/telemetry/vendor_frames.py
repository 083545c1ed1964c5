"""Frames for the vendor rendering tests: an all-NVIDIA reference frame (for the byte-identity check against the
renderer as it was before vendor names existed) and a mixed 8 H100 + 8 MI300X + 8 Gaudi 3 node set."""

from __future__ import annotations

import numpy as np

from gpufleet.model.attribution import Attribution
from gpufleet.telemetry.fields import IB_PORT_RATE
from gpufleet.telemetry.frame import GpuEntity, IbPort, MetricFrame

# The per-GPU value fields the catalog had before vendor rendering: the reference frame fills exactly these, so
# fields added since stay empty and the old renderer's output stays the expected one.
NVIDIA_REFERENCE_FIELDS = (
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_MEM_CLOCK",
    "DCGM_FI_DEV_MEMORY_TEMP",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_PCIE_LINK_GEN",
    "DCGM_FI_DEV_PCIE_LINK_WIDTH",
    "DCGM_FI_DEV_PCIE_MAX_LINK_GEN",
    "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_ENC_UTIL",
    "DCGM_FI_DEV_DEC_UTIL",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_POWER_VIOLATION",
    "DCGM_FI_DEV_THERMAL_VIOLATION",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_RESERVED",
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
    "DCGM_FI_DEV_RETIRED_SBE",
    "DCGM_FI_DEV_RETIRED_DBE",
    "DCGM_FI_DEV_RETIRED_PENDING",
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",
    "DCGM_FI_PROF_PCIE_TX_BYTES",
    "DCGM_FI_PROF_PCIE_RX_BYTES",
    "gpufleet_gpu_idle_cost_dollars_per_hour",
)
H100 = "NVIDIA H100 80GB HBM3"
MI300X = "AMD Instinct MI300X"
GAUDI3 = "Intel Gaudi 3"


def nvidia_entities(host: str = "gpu-node-01") -> list[GpuEntity]:
    """Three whole H100s and two MIG instances of a fourth, as dcgm-exporter names them."""
    out = [
        GpuEntity(
            gpu=i,
            uuid=f"GPU-{i:08x}-6d3c-22ed-0ec8-d3b864870b8b",
            model_name=H100,
            hostname=host,
            pci_bus_id=f"00000000:{0x18 + i:02X}:00.0",
            label_fields=(("DCGM_FI_DRIVER_VERSION", "550.144.03"),),
        )
        for i in range(3)
    ]
    for gi, profile in ((1, "3g.40gb"), (2, "1g.10gb")):
        out.append(
            GpuEntity(
                gpu=3,
                uuid="GPU-00000003-6d3c-22ed-0ec8-d3b864870b8b",
                model_name=H100,
                hostname=host,
                pci_bus_id="00000000:1B:00.0",
                mig_profile=profile,
                gpu_instance_id=gi,
                label_fields=(("DCGM_FI_DRIVER_VERSION", "550.144.03"),),
            )
        )
    return out


def fill_reference(frame: MetricFrame, columns: list[int] | None = None) -> None:
    """Deterministic values for the reference fields: integers, halves and a few large counters."""
    cols = list(range(len(frame.entities))) if columns is None else columns
    for k, name in enumerate(NVIDIA_REFERENCE_FIELDS):
        if not frame.has_gpu_field(name):
            continue
        row = frame.gpu(name)
        for j, i in enumerate(cols):
            row[i] = (k * 37 + j * 11) % 97 + (0.5 if k % 3 == 0 else 0.0)
    if frame.has_gpu_field("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"):
        for j, i in enumerate(cols):
            frame.gpu("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")[i] = 123_456_789_012 + j * 1_000_003


def nvidia_reference_frame() -> MetricFrame:
    """Every part of the NVIDIA rendering: MIG labels, attribution, HPC jobs, Xids, clock events, IB ports, plain
    gauges (a NaN loss among them) and a histogram."""
    frame = MetricFrame(
        nvidia_entities(), ib_ports=[IbPort("mlx5_0", 1, "0", "gpu-node-01"), IbPort("mlx5_1", 1, "1", "gpu-node-01")]
    )
    fill_reference(frame)
    frame.gpu("DCGM_FI_DEV_GPU_TEMP")[1] = np.nan  # one GPU without a reading this tick
    frame.clock_event_row("sw_thermal")[:] = [1, 0, 0, 2, 0]
    frame.set_xid_count(79, [0, 0, 1, 0, 0])
    frame.set_xid_count(13, [0, 2, 0, 0, 1])
    frame.set_attribution(0, Attribution("trainer-0", "ml", "pytorch", workload="llm-pretrain"))
    frame.set_attribution(4, Attribution("notebook-1", "research", "jupyter"))
    frame.set_jobs(2, ("4411", "4412"))
    frame.ib_values[:] = np.arange(frame.ib_values.size, dtype=np.float64).reshape(frame.ib_values.shape) * 1024
    frame.ib_up[:] = 1
    frame.ib(IB_PORT_RATE)[:] = 400e9 / 8  # 4X NDR
    frame.set_gauge("gpufleet_source_up", {"source": "nvml"}, 1)
    frame.set_gauge("training_loss", {"job": "llm-pretrain"}, float("nan"))
    frame.set_gauge("training_step_duration_seconds", {"job": "llm-pretrain"}, 1.25)
    hist = frame.histogram("gpufleet_inference_request_duration_seconds", {"model": "llama"}, (0.1, 0.5, 1.0))
    hist.observe([0.05, 0.2, 0.7, 3.0])
    return frame


def mi300x_entities(host: str = "mi300x-node-01", partition: str = "", per_gpu: int = 1) -> list[GpuEntity]:
    """Eight MI300X, or with a partition mode eight times `per_gpu` partitions (each its own logical GPU)."""
    out = []
    for physical in range(8):
        for pid in range(per_gpu):
            index = physical * per_gpu + pid
            out.append(
                GpuEntity(
                    gpu=index,
                    uuid=f"{0x5F + physical:02x}ff74a1-0000-1000-80e6-b5bb3c3ce0{pid:02x}",
                    model_name=MI300X,
                    hostname=host,
                    pci_bus_id=f"0000:{0x1C + physical * 0x10:02x}:00.{pid}",
                    device=f"renderD{128 + index}",
                    vendor="amd",
                    serial=f"692251001{physical:03d}",
                    partition=partition,
                    partition_id=pid if partition else None,
                )
            )
    return out


def gaudi3_entities(host: str = "gaudi3-node-01") -> list[GpuEntity]:
    return [
        GpuEntity(
            gpu=i,
            uuid=f"01P0-HL3090A0-15-U4V193-22-07-0{i}",
            model_name=GAUDI3,
            hostname=host,
            pci_bus_id=f"0000:{0x19 + i * 0x10:02x}:00.0",
            device=f"accel{i}",
            label_fields=(("DCGM_FI_DRIVER_VERSION", "1.21.0-fw-59.2.1"),),
            vendor="intel",
            serial=f"AN2101000{i}",
        )
        for i in range(8)
    ]


def h100_entities(host: str = "h100-node-01") -> list[GpuEntity]:
    return [
        GpuEntity(
            gpu=i,
            uuid=f"GPU-{i:08x}-6d3c-22ed-0ec8-d3b864870b8b",
            model_name=H100,
            hostname=host,
            pci_bus_id=f"00000000:{0x18 + i:02X}:00.0",
            label_fields=(("DCGM_FI_DRIVER_VERSION", "550.144.03"),),
        )
        for i in range(8)
    ]


# Canonical readings every accelerator of the mixed frame reports (temperature and power vary by index).
READINGS = {
    "DCGM_FI_DEV_GPU_UTIL": 87.0,
    "DCGM_FI_DEV_MEM_COPY_UTIL": 41.0,
    "DCGM_FI_DEV_FB_USED": 65536.0,  # MiB
    "DCGM_FI_DEV_FB_FREE": 131072.0,
    "DCGM_FI_DEV_MEMORY_TEMP": 52.0,
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 987_654_321.0,  # mJ
    "DCGM_FI_DEV_SM_CLOCK": 2100.0,
    "DCGM_FI_DEV_MEM_CLOCK": 1300.0,
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": 3.0,
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 0.0,
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 7.0,
    "DCGM_FI_DEV_PCIE_LINK_GEN": 5.0,
    "DCGM_FI_DEV_PCIE_MAX_LINK_GEN": 5.0,
    "DCGM_FI_DEV_PCIE_LINK_WIDTH": 16.0,
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 2.0,
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 1.0,
}


def fill_readings(frame: MetricFrame) -> None:
    for name, value in READINGS.items():
        frame.gpu(name)[:] = value
    n = len(frame.entities)
    frame.gpu("DCGM_FI_DEV_GPU_TEMP")[:] = 60 + np.arange(n) % 8
    frame.gpu("DCGM_FI_DEV_POWER_USAGE")[:] = 500.5 + np.arange(n) % 8


def mixed_frame() -> MetricFrame:
    """8 H100 + 8 MI300X + 8 Gaudi 3 (one frame per node in a real agent; one here, as the twin's cluster frame)."""
    frame = MetricFrame([*h100_entities(), *mi300x_entities(), *gaudi3_entities()])
    fill_readings(frame)
    frame.gpu("gpufleet_gpu_health")[8:16] = 1
    frame.gpu("DCGM_FI_DEV_SLOWDOWN_TEMP")[16:] = 95
    gaudi = slice(16, 24)
    frame.gpu("gpufleet_gpu_nic_port_mask")[gaudi] = (1 << 24) - 1
    frame.gpu("gpufleet_gpu_nic_port_external_mask")[gaudi] = (1 << 8) | (1 << 22) | (1 << 23)
    frame.gpu("gpufleet_gpu_nic_port_up_mask")[gaudi] = (1 << 24) - 1
    return frame
