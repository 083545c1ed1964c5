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


@njit(cache=True, nogil=True)
def _placements(gpus, milli, n_gpu, sharing):  # type: ignore[no-untyped-def]
    n, width = gpus.shape
    most = n * width if sharing else n
    src = np.empty(most, dtype=np.int64)
    col = np.full(most, -1, dtype=np.int64)
    after = np.empty((most, width), dtype=np.int64)
    taken = np.zeros(width, dtype=np.bool_)
    m = 0
    for r in range(n):
        if n_gpu == 0:
            src[m] = r
            after[m] = gpus[r]
            m += 1
            continue
        if sharing:
            for k in range(width):
                v = gpus[r, k]
                if v < milli:
                    continue
                seen = False
                for e in range(k):
                    if gpus[r, e] == v:
                        seen = True
                        break
                if seen:
                    continue
                src[m] = r
                col[m] = k
                after[m] = gpus[r]
                after[m, k] = v - milli
                m += 1
            continue
        fits = 0
        for k in range(width):
            if gpus[r, k] >= milli:
                fits += 1
        if fits < n_gpu:
            continue
        # the GPUs with the least free share that fit, lowest index first among equals
        for k in range(width):
            taken[k] = False
        src[m] = r
        after[m] = gpus[r]
        for _ in range(n_gpu):
            pick = -1
            for k in range(width):
                if not taken[k] and gpus[r, k] >= milli and (pick < 0 or gpus[r, k] < gpus[r, pick]):
                    pick = k
            taken[pick] = True
            after[m, pick] -= milli
        m += 1
    return src[:m], col[:m], after[:m]


def placements(gpus: IntArray, milli: int, n_gpu: int, sharing: bool) -> tuple[IntArray, IntArray, IntArray]:
    """Every placement of a pod on the rows (as :func:`gpufleet.sched.replay.policies.fgd.after_placement`): (row,
    GPU a sharing pod takes or -1, GPUs' free milli after). A sharing pod has one per distinct free share that fits
    (the lowest index for equal shares); a pod of whole GPUs one per row, on the fitting GPUs with the least free."""
    return _placements(np.ascontiguousarray(gpus, dtype=np.int64), milli, n_gpu, sharing)
