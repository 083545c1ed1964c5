"""FGD-Pack's compiled kernels (numba, imported on first use): a node's packing value from its GPUs' fillings, the
candidate placements of a pod, and every candidate scored in one pass."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numba import njit

from gpufleet.sched.replay.kernels import _frag  # FGD's fragmentation, the same bits as the FGD policy's

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@njit(cache=True, nogil=True)
def _fill_needs(sizes, prices, cpus, milli_max):  # type: ignore[no-untyped-def]
    value = np.zeros(milli_max + 1)
    cpu = np.zeros(milli_max + 1)
    for g in range(1, milli_max + 1):
        best, need = value[g - 1], cpu[g - 1]
        for k in range(len(sizes)):
            size = sizes[k]
            if size <= g:
                v, c = value[g - size] + prices[k], cpu[g - size] + cpus[k]
                if v > best + 1e-12 or (v >= best - 1e-12 and c < need):
                    best, need = v, c
        value[g], cpu[g] = best, need
    return value, cpu


def fill_needs(sizes: IntArray, prices: FloatArray, cpus: FloatArray) -> tuple[FloatArray, FloatArray]:
    """:func:`gpufleet.sched.replay.policies.fgd_pack.fill_needs` compiled, the shares given in ascending order."""
    return _fill_needs(
        np.ascontiguousarray(sizes, dtype=np.int64),
        np.ascontiguousarray(prices, dtype=np.float64),
        np.ascontiguousarray(cpus, dtype=np.float64),
        1000,
    )


@njit(cache=True, nogil=True)
def _row_value(cpu, row, t, fill, fill_cpu):  # type: ignore[no-untyped-def]
    """One state's value: ``row`` its GPUs' free milli, sorted high to low."""
    width = len(row)
    value = np.empty(width)
    need = np.empty(width)
    per_cpu = np.empty(width)
    order = np.empty(width, dtype=np.int64)
    for k in range(width):
        g = row[k]
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
            part = min(max((cpu - taken) / max(need[k], 1.0), 0.0), 1.0)
        total += value[k] * part
        taken += need[k]
    return total


@njit(cache=True, nogil=True)
def _node_values(cpu, gpus, table, fill, fill_cpu):  # type: ignore[no-untyped-def]
    out = np.zeros(len(cpu))
    for r in range(len(cpu)):
        out[r] = _row_value(cpu[r], gpus[r], table[r], fill, fill_cpu)
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


@njit(cache=True, nogil=True)
def _sorted_high_first(row, out):  # type: ignore[no-untyped-def]
    for k in range(len(row)):
        out[k] = row[k]
    for i in range(1, len(out)):
        j = i
        while j > 0 and out[j - 1] < out[j]:
            out[j - 1], out[j] = out[j], out[j - 1]
            j -= 1


@njit(cache=True, nogil=True)
def _table_of(cpu, mem, need_cpu, need_mem, table_of_step):  # type: ignore[no-untyped-def]
    i = np.searchsorted(need_cpu, cpu, side="right")
    j = np.searchsorted(need_mem, mem, side="right") if len(need_mem) else 0
    return table_of_step[i, j]


@njit(cache=True, nogil=True)
def _best(  # type: ignore[no-untyped-def]
    cpu, mem, gpus, model_idx, used, pod, allowed, price, cpu_per_gpu, need_cpu, need_mem, table_of_step, fill,
    fill_cpu, score_steps, mvals, group_m, group_n, access, cpu_steps, mem_steps, table, wsum, use_mem,
):  # fmt: skip
    pod_cpu, pod_mem, milli, n_gpu, sharing = pod
    src, col, after = _placements(gpus, milli, n_gpu, sharing)
    n, width = gpus.shape
    best = np.full(n, -np.inf)
    share = np.full(n, -1, dtype=np.int64)
    frag_before = np.empty(n)
    value_before = np.empty(n)
    ordered = np.empty(width, dtype=np.int64)
    t_before = np.empty(n, dtype=np.int64)
    t_after = np.empty(n, dtype=np.int64)
    for r in range(n):
        t_before[r] = _table_of(cpu[r], mem[r], need_cpu, need_mem, table_of_step)
        t_after[r] = _table_of(cpu[r] - pod_cpu, mem[r] - pod_mem, need_cpu, need_mem, table_of_step)
        frag_before[r] = _frag(cpu[r], mem[r], gpus[r], model_idx[r], mvals, group_m, group_n, access, cpu_steps,
                               mem_steps, table, wsum, use_mem)  # fmt: skip
        if n_gpu > 0:
            _sorted_high_first(gpus[r], ordered)
            value_before[r] = _row_value(cpu[r], ordered, t_before[r], fill, fill_cpu)
    for c in range(len(src)):
        r = src[c]
        cpu_after = cpu[r] - pod_cpu
        if cpu_after < 0 or mem[r] < pod_mem or (n_gpu > 0 and not allowed[model_idx[r]]):
            continue  # the node's filters: CPU, memory, GPU model and vendor (the GPUs fit: it is a candidate)
        frag_after = _frag(cpu_after, mem[r] - pod_mem, after[c], model_idx[r], mvals, group_m, group_n, access,
                           cpu_steps, mem_steps, table, wsum, use_mem)  # fmt: skip
        fgd = float(np.searchsorted(score_steps, frag_before[r] - frag_after, side="right"))
        loss = 0.0
        last = 0.0
        if n_gpu > 0:
            _sorted_high_first(after[c], ordered)
            value_after = _row_value(cpu_after, ordered, t_after[r], fill, fill_cpu)
            loss = np.round((value_before[r] - value_after - price) * 1000.0)
            if sharing:
                last = -float(gpus[r, col[c]] - milli)  # the tightest GPU
        else:
            free = 0
            for k in range(width):
                free += after[c, k]
            spare = (cpu_after - cpu_per_gpu * free / 1000.0) // 1000.0
            last = min(max(spare, -499.0), 499.0)
        score = ((-loss * 101.0 + fgd) * 2.0 + (1.0 if used[r] else 0.0)) * 1001.0 + last
        if score > best[r]:
            best[r] = score
            share[r] = gpus[r, col[c]] if sharing else -1
    return best, share


def best_placements(
    cpu: IntArray,
    mem: IntArray,
    gpus: IntArray,
    model_idx: IntArray,
    used: npt.NDArray[np.bool_],
    pod: tuple[int, int, int, int, bool],
    allowed: npt.NDArray[np.bool_],
    price: float,
    cpu_per_gpu: float,
    tables: tuple[IntArray, IntArray, IntArray, FloatArray, FloatArray],
    score_steps: FloatArray,
    frag_model: tuple[object, ...],
) -> tuple[FloatArray, IntArray]:
    """Per row: FGD-Pack's best score for the pod (-inf where it does not fit: CPU, memory, GPU model and vendor per
    ``allowed`` - per model - and GPUs, as :meth:`NodeStates.feasible`) and, for a sharing pod, the free share of the
    GPU that gives it (the first candidate with that score). ``pod`` is (CPU milli, memory MiB, per-GPU milli, GPU
    count, sharing); ``tables`` the sizes' distinct CPU and memory needs (no memory needs: memory not
    counted), the fill-table row of each (CPU step, memory step), and the stacked fill tables; ``frag_model``
    :meth:`FragModel.kernel_args`."""
    need_cpu, need_mem, table_of_step, fill, fill_cpu = tables
    return _best(
        np.ascontiguousarray(cpu, dtype=np.int64),
        np.ascontiguousarray(mem, dtype=np.int64),
        np.ascontiguousarray(gpus, dtype=np.int64),
        np.ascontiguousarray(model_idx, dtype=np.int64),
        np.ascontiguousarray(used, dtype=np.bool_),
        pod,
        np.ascontiguousarray(allowed, dtype=np.bool_),
        price,
        cpu_per_gpu,
        need_cpu,
        need_mem,
        table_of_step,
        fill,
        fill_cpu,
        score_steps,
        *frag_model,
    )
