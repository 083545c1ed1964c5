"""Hand-built range series for the cost tests: GPUs with dcgm-exporter's identity labels, their utilization and the
workload info series, on one hour's grid of minutes."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpufleet.cost.usage import Usage, grid_of, measure
from gpufleet.telemetry.store.query import RangeSeries

H100 = "NVIDIA H100 80GB HBM3"
HOUR = 3600.0
STEP = 60.0
TIMES = grid_of(0.0, HOUR, STEP)  # 60 points, each the minute before it


def gpu(node: str, index: int, *, gi: str = "", profile: str = "", model: str = H100) -> dict[str, str]:
    labels = {"gpu": str(index), "UUID": f"GPU-{node}-{index}", "device": f"nvidia{index}", "modelName": model,
              "Hostname": node}  # fmt: skip
    if gi:
        labels.update(GPU_I_ID=gi, GPU_I_PROFILE=profile)
    return labels


def util(labels: dict[str, str], values: Sequence[float], name: str = "DCGM_FI_DEV_GPU_UTIL") -> RangeSeries:
    """A utilization series; NaN values are points the store did not return."""
    v = np.asarray(values, dtype=np.float64)
    keep = ~np.isnan(v)
    return RangeSeries({"__name__": name, **labels}, TIMES[keep], v[keep])


def held(labels: dict[str, str], mask: Sequence[bool], pod: str, namespace: str, workload: str = "") -> RangeSeries:
    """The workload info series, present at the points where `mask` is true."""
    keep = np.asarray(mask, dtype=bool)
    info = {**labels, "namespace": namespace, "pod": pod, **({"workload": workload} if workload else {})}
    return RangeSeries({"__name__": "gpufleet_gpu_pod_info", **info}, TIMES[keep], np.ones(int(keep.sum())))


def run(utils: list[RangeSeries], infos: list[RangeSeries], **kw: object) -> Usage:
    return measure(utils, infos, start=0.0, end=HOUR, step=STEP, **kw)  # type: ignore[arg-type]


ALL = [True] * 60
