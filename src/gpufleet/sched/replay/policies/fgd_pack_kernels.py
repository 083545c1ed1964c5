"""FGD-Pack's compiled kernel: a node's packing value from its GPUs' fillings (numba, imported on first use)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numba import njit

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@njit(cache=True, nogil=True)
def _node_values(cpu, gpus, table, fill, fill_cpu):  # type: ignore[no-untyped-def]
    n, width = gpus.shape
    out = np.zeros(n)
    value = np.empty(width)
    need = np.empty(width)
    per_cpu = np.empty(width)
    order = np.empty(width, dtype=np.int64)
    for r in range(n):
        t = table[r]
        for k in range(width):
            g = gpus[r, k]
            value[k] = fill[t, g]
            need[k] = fill_cpu[t, g]
            per_cpu[k] = value[k] / max(need[k], 1.0) if need[k] > 0 else np.inf
            order[k] = k
        # best value per CPU first; a stable insertion sort (equal ones keep the GPUs' order)
        for i in range(1, width):
            j = i
            while j > 0 and per_cpu[order[j - 1]] < per_cpu[order[j]]:
                order[j - 1], order[j] = order[j], order[j - 1]
                j -= 1
        taken = 0.0
        total = 0.0
        for i in range(width):
            k = order[i]
            part = 1.0
            if need[k] > 0:
                part = min(max((cpu[r] - taken) / max(need[k], 1.0), 0.0), 1.0)
            total += value[k] * part
            taken += need[k]
        out[r] = total
    return out


def node_values(cpu: IntArray, gpus: IntArray, table: IntArray, fill: FloatArray, fill_cpu: FloatArray) -> FloatArray:
    """Per row: the sum over its GPUs (``gpus``: free milli, sorted) of ``fill[table[row], g]``, the GPUs taken best
    value per CPU first (``fill_cpu``: the CPU each filling needs) until ``cpu`` runs out, the last one in part."""
    return _node_values(
        np.ascontiguousarray(cpu, dtype=np.float64),
        np.ascontiguousarray(gpus, dtype=np.int64),
        np.ascontiguousarray(table, dtype=np.int64),
        fill,
        fill_cpu,
    )
