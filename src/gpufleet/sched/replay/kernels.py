"""Compiled FGD kernels: fragmentation of node states and the best fragmentation decrease a pod allows on each.

The same arithmetic as :meth:`gpufleet.sched.replay.frag.FragModel.frag` and the FGD policy's numpy path, in the same
order (group sums accumulated one group after the other), so both give the same bits and the same integer scores;
tests replay the openb trace both ways and require identical placements. Compiled with numba on first use and cached
on disk.

``model`` below is :meth:`FragModel.kernel_args`: (milli values, group milli index, group GPU count, access[model,
group], CPU steps, memory steps, cumulative weight table[group, cpu step, memory step], weight sum, uses memory).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
from numba import njit

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
_ANY_MODEL = np.ones(1, dtype=np.bool_)  # not read when the filter is off


@njit(cache=True, nogil=True)
def _frag(cpu, mem, row, model_id, mvals, group_m, group_n, access, cpu_steps, mem_steps, table, weight_sum, use_mem):  # type: ignore[no-untyped-def]
    total = 0
    for v in row:
        total += v
    n_groups = len(group_m)
    if n_groups == 0:
        return float(total) * weight_sum
    n_m = len(mvals)
    count = np.zeros(n_m, dtype=np.int64)
    usable = np.zeros(n_m, dtype=np.int64)
    for k in range(n_m):
        m = mvals[k]
        for v in row:
            if v >= m:
                count[k] += 1
                usable[k] += v
    i = np.searchsorted(cpu_steps, cpu, side="right")
    j = np.searchsorted(mem_steps, mem, side="right") if use_mem else len(mem_steps)
    acc = 0.0
    for g in range(n_groups):
        gm = group_m[g]
        ok = 1.0 if count[gm] >= group_n[g] else 0.0
        acc += table[g, i, j] * ok * float(usable[gm]) * access[model_id, g]
    return float(total) * weight_sum - acc


@njit(cache=True, nogil=True)
def _frag_rows(cpu, mem, gpu, model_idx, mvals, group_m, group_n, access, cpu_steps, mem_steps, table, wsum, use_mem):  # type: ignore[no-untyped-def]
    out = np.empty(len(cpu), dtype=np.float64)
    for r in range(len(cpu)):
        out[r] = _frag(
            cpu[r], mem[r], gpu[r], model_idx[r], mvals, group_m, group_n, access, cpu_steps, mem_steps, table, wsum,
            use_mem,
        )  # fmt: skip
    return out


@njit(cache=True, nogil=True)
def _steps_at_or_below(steps, value):  # type: ignore[no-untyped-def]
    return np.searchsorted(steps, value, side="right")


@njit(cache=True, nogil=True)
def _deltas(  # type: ignore[no-untyped-def]
    ids, cpu, mem, gpu, model_idx, pod_cpu, pod_mem, milli, n_gpu, sharing, allowed, check_fit, score_steps,
    mvals, group_m, group_n, access, cpu_steps, mem_steps, table, wsum, use_mem,
):  # fmt: skip
    """Per row ``ids[k]``: frag(before) - frag(after placing the pod), -inf where the pod's GPUs do not fit (and, with
    ``check_fit``, where its CPU, memory or GPU model does not: ``allowed[model]``); for a sharing pod the first GPU
    (in row order) with the best integer score, and that GPU's id."""
    n_rows = len(ids)
    width = gpu.shape[1]
    delta = np.full(n_rows, -np.inf)
    chosen = np.full(n_rows, -1, dtype=np.int64)
    tmp = np.empty(width, dtype=np.int64)
    taken = np.zeros(width, dtype=np.bool_)
    for k_row in range(n_rows):
        r = ids[k_row]
        row = gpu[r]
        if check_fit and (cpu[r] < pod_cpu or mem[r] < pod_mem or (n_gpu > 0 and not allowed[model_idx[r]])):
            continue
        before = _frag(
            cpu[r], mem[r], row, model_idx[r], mvals, group_m, group_n, access, cpu_steps, mem_steps, table, wsum,
            use_mem,
        )  # fmt: skip
        cpu_after = cpu[r] - pod_cpu
        mem_after = mem[r] - pod_mem
        if n_gpu == 0:
            after = _frag(
                cpu_after, mem_after, row, model_idx[r], mvals, group_m, group_n, access, cpu_steps, mem_steps, table,
                wsum, use_mem,
            )  # fmt: skip
            delta[k_row] = before - after
            continue
        if sharing:
            best = -1
            for k in range(width):
                v = row[k]
                if v < milli:
                    continue
                seen = False
                for e in range(k):
                    if row[e] == v:
                        seen = True
                        break
                if seen:
                    continue
                for e in range(width):
                    tmp[e] = row[e]
                tmp[k] = v - milli
                after = _frag(
                    cpu_after, mem_after, tmp, model_idx[r], mvals, group_m, group_n, access, cpu_steps, mem_steps,
                    table, wsum, use_mem,
                )  # fmt: skip
                d = before - after
                score = _steps_at_or_below(score_steps, d)
                if score > best:
                    best = score
                    delta[k_row] = d
                    chosen[k_row] = k
            continue
        fits = 0
        for v in row:
            if v >= milli:
                fits += 1
        if fits < n_gpu:
            continue
        # the GPUs with the least free share that fit, lowest index first among equals
        for e in range(width):
            tmp[e] = row[e]
            taken[e] = False
        for _ in range(n_gpu):
            pick = -1
            for e in range(width):
                if not taken[e] and row[e] >= milli and (pick < 0 or row[e] < row[pick]):
                    pick = e
            taken[pick] = True
            tmp[pick] -= milli
        after = _frag(
            cpu_after, mem_after, tmp, model_idx[r], mvals, group_m, group_n, access, cpu_steps, mem_steps, table,
            wsum, use_mem,
        )  # fmt: skip
        delta[k_row] = before - after
    return delta, chosen


def frag_rows(model: tuple[Any, ...], cpu: IntArray, mem: IntArray, gpu: IntArray, model_idx: IntArray) -> FloatArray:
    """Fragmented GPU milli of each state (as FragModel.frag)."""
    return _frag_rows(
        np.ascontiguousarray(cpu, dtype=np.int64),
        np.ascontiguousarray(mem, dtype=np.int64),
        np.ascontiguousarray(gpu, dtype=np.int64),
        np.ascontiguousarray(model_idx, dtype=np.int64),
        *model,
    )


def fgd_deltas(
    model: tuple[Any, ...],
    cpu: IntArray,
    mem: IntArray,
    gpu: IntArray,
    model_idx: IntArray,
    pod: tuple[int, int, int, int, bool],
    score_steps: FloatArray,
) -> tuple[FloatArray, IntArray]:
    """Per state: the fragmentation decrease of the pod's best placement there (-inf: its GPUs do not fit) and,
    for a sharing pod, the GPU it takes. ``pod`` is (CPU milli, memory MiB, per-GPU milli, GPU count, sharing)."""
    pod_cpu, pod_mem, milli, n_gpu, sharing = pod
    return _deltas(
        np.arange(len(cpu)),
        np.ascontiguousarray(cpu, dtype=np.int64),
        np.ascontiguousarray(mem, dtype=np.int64),
        np.ascontiguousarray(gpu, dtype=np.int64),
        np.ascontiguousarray(model_idx, dtype=np.int64),
        pod_cpu, pod_mem, milli, n_gpu, sharing, _ANY_MODEL, False, score_steps,
        *model,
    )  # fmt: skip


def fgd_feasible_deltas(
    model: tuple[Any, ...],
    ids: IntArray,
    cpu: IntArray,
    mem: IntArray,
    gpu: IntArray,
    model_idx: IntArray,
    pod: tuple[int, int, int, int, bool],
    allowed: npt.NDArray[np.bool_],
    score_steps: FloatArray,
) -> FloatArray:
    """As :func:`fgd_deltas` for the states ``ids`` of the given arrays, and -inf also where the pod's CPU, memory or
    GPU model (``allowed[model]``) does not fit: the whole filter and FGD's delta in one pass."""
    pod_cpu, pod_mem, milli, n_gpu, sharing = pod
    delta, _ = _deltas(ids, cpu, mem, gpu, model_idx, pod_cpu, pod_mem, milli, n_gpu, sharing, allowed, True,
                       score_steps, *model)  # fmt: skip
    return delta
