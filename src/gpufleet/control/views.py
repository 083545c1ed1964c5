"""Read-only views of a running twin, as rows the CLI renders and the API returns. One shape for both."""

from __future__ import annotations

from typing import Any

import numpy as np

from gpufleet.model import JobState
from gpufleet.sim.throttle import describe as describe_clock_events
from gpufleet.sim.twin import Twin


def _gpu_slice(twin: Twin, node_index: int) -> np.ndarray:
    return np.flatnonzero(twin.gpus.node_of == node_index)


def node_rows(twin: Twin) -> list[dict[str, Any]]:
    twin.sync_model()
    g = twin.gpus
    jobs_on: dict[str, list[str]] = {}
    for job in twin.cluster.jobs:
        if job.state in (JobState.running, JobState.hung):
            for n in job.nodes:
                jobs_on.setdefault(n, []).append(job.name)
    rows = []
    for ni, node in enumerate(twin.cluster.nodes):
        idx = _gpu_slice(twin, ni)
        alive = idx[g.alive[idx]]
        status = "Ready" if node.ready else "NotReady"
        if node.unschedulable:
            status += ",SchedulingDisabled"
        links_up = sum(bool(twin.ports.up[twin.port_of(node.name, nic.rail)]) for nic in node.nics)
        rows.append(
            {
                "name": node.name,
                "pool": node.pool,
                "status": status,
                "gpu_model": node.gpus[0].model.product_name if node.gpus else None,
                "gpus": len(node.gpus),
                "gpus_allocatable": node.allocatable().get("nvidia.com/gpu", 0),
                "gpu_util_pct": round(float(g.util[alive].mean()), 1) if alive.size else None,
                "gpu_temp_max_c": round(float(g.temp_c[alive].max()), 1) if alive.size else None,
                "power_kw": round(float(g.power_w[idx].sum()) / 1000.0, 2),
                "links_up": f"{links_up}/{len(node.nics)}",
                "jobs": jobs_on.get(node.name, []),
                "rack": node.rack,
                "driver": node.software.driver_version,
                "cuda": node.software.cuda_version,
            }
        )
    return rows


def gpu_rows(twin: Twin, node: str | None = None) -> list[dict[str, Any]]:
    twin.sync_model()
    if node is not None:
        twin.cluster.node(node)
        idx = _gpu_slice(twin, twin.node_index[node])
    else:
        idx = np.arange(twin.gpus.n)
    rows = []
    for k in idx:
        row = twin.gpu_row(int(k))
        row["clock_events"] = describe_clock_events(int(row["clock_events"]))  # type: ignore[call-overload]
        rows.append(row)
    return rows


def job_rows(twin: Twin) -> list[dict[str, Any]]:
    rows = []
    for job in twin.cluster.jobs:
        hang = twin.training.hang.get(job.name)
        rows.append(
            {
                "name": job.name,
                "state": job.state.value,
                "nodes": len(job.nodes),
                "ranks": job.world_size,
                "step": job.step,
                "step_time_s": round(job.step_time_s, 2),
                "last_step_age_s": round(twin.time - job.last_step_time, 1),
                "restarts": job.restarts,
                "hang_cause": f"{hang.kind}: {hang.detail}" if hang else None,
                "node_list": job.nodes,
            }
        )
    return rows


def describe_node(twin: Twin, name: str, events: int = 20) -> dict[str, Any]:
    twin.sync_model()
    node = twin.cluster.node(name)
    nics = []
    for nic in node.nics:
        p = twin.port_of(name, nic.rail)
        c = twin.ports.counters
        nics.append(
            {
                "name": nic.name,
                "rail": nic.rail,
                "guid": nic.guid,
                "state": "Active" if twin.ports.up[p] else "Down",
                "speed_gbps": nic.ports[0].speed_gbps,
                "leaf": twin.ports.leaf_of(p),
                "symbol_errors": int(c["symbol_errors"][p]),
                "link_downed": int(c["link_downed"][p]),
                "rcv_errors": int(c["rcv_errors"][p]),
            }
        )
    return {
        "name": node.name,
        "pool": node.pool,
        "rack": node.rack,
        "labels": node.labels,
        "taints": [{"key": t.key, "value": t.value, "effect": t.effect.value} for t in node.taints],
        "unschedulable": node.unschedulable,
        "conditions": [{"type": c.type, "status": c.status, "reason": c.reason} for c in node.conditions],
        "capacity": node.capacity(),
        "allocatable": node.allocatable(),
        "software": {
            "driver": node.software.driver_version,
            "cuda": node.software.cuda_version,
            "kernel": node.software.kernel,
            "nccl": node.software.nccl_version,
        },
        "gpus": gpu_rows(twin, name),
        "nics": nics,
        "kernel_log": twin.kmsg[name][-events:],
    }
