"""Frames shared by the telemetry tests."""

from __future__ import annotations

import numpy as np
import pytest

from gpufleet.telemetry.frame import GpuEntity, IbPort, MetricFrame

MODEL = "NVIDIA H100 80GB HBM3"


def make_entities(n: int = 8, host: str = "gpu-node-01") -> list[GpuEntity]:
    return [
        GpuEntity(
            gpu=i,
            uuid=f"GPU-{i:08x}-6d3c-22ed-0ec8-d3b864870b8b",
            model_name=MODEL,
            hostname=host,
            pci_bus_id=f"00000000:{0x18 + i:02X}:00.0",
            label_fields=(("DCGM_FI_DRIVER_VERSION", "550.144.03"),),
        )
        for i in range(n)
    ]


def filled_frame(n: int = 8) -> MetricFrame:
    frame = MetricFrame(make_entities(n), ib_ports=[IbPort("mlx5_0", 1, "0", "gpu-node-01")], timestamp=1000.0)
    rng = np.random.default_rng(7)
    frame.values[:] = rng.uniform(0, 100, frame.values.shape).round(2)
    frame.ib_values[:] = 3
    return frame


@pytest.fixture
def frame() -> MetricFrame:
    return filled_frame()
