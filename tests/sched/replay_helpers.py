"""Tiny hand-built clusters for policy tests."""

from __future__ import annotations

import numpy as np

from gpufleet.sched.replay.openb import NodeList, PodList
from gpufleet.sched.replay.state import PodRequest, ReplayCluster


def make_cluster(rows: list[tuple[str, int, int, int, str]]) -> ReplayCluster:
    """rows: (name, cpu_milli, memory_mib, gpus, model)."""
    nodes = NodeList(
        names=tuple(r[0] for r in rows),
        cpu_milli=np.array([r[1] for r in rows], dtype=np.int64),
        memory_mib=np.array([r[2] for r in rows], dtype=np.int64),
        num_gpu=np.array([r[3] for r in rows], dtype=np.int64),
        model=tuple(r[4] for r in rows),
    )
    return ReplayCluster.from_nodes(nodes)


def set_free(cluster: ReplayCluster, node: int, cpu: int, gpus: list[int]) -> None:
    """Overwrite a node's free CPU and per-GPU free share (as if pods ran there)."""
    cluster.cpu_free[node] = cpu
    cluster.gpu_free[node, : len(gpus)] = gpus
    cluster.version[node] += 1


def pods_of(requests: list[PodRequest]) -> PodList:
    """A pod list of the given requests (names p0, p1, ...)."""
    return PodList(
        names=tuple(f"p{i}" for i in range(len(requests))),
        cpu_milli=np.array([r.cpu_milli for r in requests]),
        memory_mib=np.array([r.memory_mib for r in requests]),
        num_gpu=np.array([r.num_gpu for r in requests]),
        gpu_milli=np.array([r.gpu_milli for r in requests]),
        gpu_spec=tuple(r.gpu_spec for r in requests),
        qos=tuple("" for _ in requests),
    )
