"""Tiny hand-built clusters for policy tests."""

from __future__ import annotations

import numpy as np

from gpufleet.sched.replay.openb import NodeList
from gpufleet.sched.replay.state import ReplayCluster


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
