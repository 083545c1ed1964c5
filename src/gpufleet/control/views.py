"""What the API returns and the CLI renders, built only from what the control plane knows: agents' reports, the
incidents, and the backend's node states. One shape for every reader."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from gpufleet.catalog.clock_events import clock_events_of
from gpufleet.catalog.gpus import get_gpu_model
from gpufleet.catalog.mig import mig_profiles_for
from gpufleet.control import fabric as fabric_views
from gpufleet.control import paging
from gpufleet.control.fleet import NodeState
from gpufleet.errors import NotFoundError
from gpufleet.health.detectors.seen import JobView
from gpufleet.health.detectors.slo import ServiceStatus
from gpufleet.health.detectors.training import slow_ranks
from gpufleet.model import EntityKind, IncidentState, Severity
from gpufleet.model.affinity import HostAffinity
from gpufleet.model.observe import GpuInfo, PendingWork, ServiceFact, TrainingSignals

if TYPE_CHECKING:
    from gpufleet.control.service import ControlPlane

HISTORY_S = 4 * 3600.0


def _num(value: float, digits: int = 1) -> float | None:
    return None if np.isnan(value) else round(float(value), digits)


def _clock_events(bits: float) -> list[str]:
    if np.isnan(bits):
        return []
    return clock_events_of(int(bits))


def _gpu_problems(plane: ControlPlane) -> dict[tuple[str, int], Severity]:
    """The worst open incident on each GPU."""
    worst: dict[tuple[str, int], Severity] = {}
    for inc in plane.book.open_incidents():
        e = inc.entity
        if e.kind is EntityKind.gpu and e.index is not None:
            key = (e.node, e.index)
            if key not in worst or inc.severity.rank > worst[key].rank:
                worst[key] = inc.severity
    return worst


def _gpu_xids(plane: ControlPlane) -> dict[tuple[str, int], int]:
    """The last Xid the control plane holds an incident for on each GPU (open or closed, the latest opened wins):
    what a GPU that fell off the bus reported last, when it has no readings any more."""
    last: dict[tuple[str, int], tuple[float, int]] = {}
    for inc in plane.book.incidents.values():
        e = inc.entity
        if inc.xid is None or e.kind is not EntityKind.gpu or e.index is None:
            continue
        key = (e.node, e.index)
        if key not in last or inc.first_seen >= last[key][0]:
            last[key] = (inc.first_seen, inc.xid)
    return {key: xid for key, (_, xid) in last.items()}


# the libraries a node's GPUs are listed and read through (the agent's GPU sources, agent/host.py): one down means
# the node cannot see its GPUs, however many it has
GPU_SOURCES = ("nvml", "amdsmi", "hlml")


def sources_down(node: NodeState) -> dict[str, str]:
    """The node's sources its agent says are down now (gpufleet_source_up 0), each with why; none for a silent agent
    (what it last said is not now)."""
    if node.lost or node.metrics is None:
        return {}
    return dict(node.metrics.sources_down)


def gpu_source_down(node: NodeState) -> dict[str, str]:
    """The GPU sources down on the node, each with why: the node is degraded, blind to its GPUs."""
    return {name: why for name, why in sources_down(node).items() if name in GPU_SOURCES}


def _node_status(plane: ControlPlane, node: NodeState) -> str:
    status = "AgentLost" if node.lost else "Degraded" if gpu_source_down(node) else "Ready"
    if node.name in plane.unavailable:
        status += ",SchedulingDisabled"
    return status


def gpu_rows(plane: ControlPlane, node: str | None = None) -> list[dict[str, Any]]:
    with plane.lock:
        nodes = [plane.fleet.node(node)] if node is not None else list(plane.fleet.nodes.values())
        problems = _gpu_problems(plane)
        xids = _gpu_xids(plane)
        return [row for n in nodes for row in _gpus_of(n, problems, xids)]


@lru_cache(maxsize=64)
def _memory_slices(model: str) -> int | None:
    """The width of a GPU model's memory-slice axis (8 on A100 and H100), from the catalog's MIG geometry; None for a
    GPU without MIG or one the catalog does not know."""
    try:
        geometry = get_gpu_model(model).mig_geometry
    except NotFoundError:
        return None
    if geometry is None:
        return None
    return max(p.starts[-1] + p.size for p in mig_profiles_for(geometry).values())


def _mig_rows(g: GpuInfo) -> list[dict[str, Any]]:
    return [
        {"profile": m.profile, "gi_id": m.gi_id, "start": m.start, "size": m.size, "uuid": m.uuid, "ci_id": m.ci_id}
        for m in g.mig
    ]


def _gpus_of(
    node: NodeState, problems: dict[tuple[str, int], Severity], xids: dict[tuple[str, int], int] | None = None
) -> list[dict[str, Any]]:
    """A row per GPU. A lost GPU (it stopped reporting while its agent did not) has no current readings: its
    values are None and `readings` says "lost", never its last ones shown as current; its last Xid is the one its
    incident recorded when the metric no longer has it."""
    rows = []
    blind = bool(gpu_source_down(node))  # its GPU source is down: no reading says anything of a GPU
    held = dict(zip(node.metrics.gpus, node.metrics.held, strict=False)) if node.metrics and node.metrics.held else {}
    for g in node.inventory.gpus if node.inventory else []:
        value = lambda f, i=g.index: node.gpu_value(f, i)  # noqa: E731
        util = value("DCGM_FI_DEV_GPU_UTIL")
        lost = (
            not node.lost and not blind and node.metrics is not None
            and np.isnan(util) and np.isnan(value("DCGM_FI_DEV_GPU_TEMP"))
        )  # fmt: skip
        severity = problems.get((node.name, g.index))
        health = (
            "lost" if lost else "unknown" if node.lost or blind else
            "unhealthy" if severity is Severity.critical else "degraded" if severity is Severity.warning else "healthy"
        )  # fmt: skip
        gen, width = value("DCGM_FI_DEV_PCIE_LINK_GEN"), value("DCGM_FI_DEV_PCIE_LINK_WIDTH")
        xid = _num(value("DCGM_FI_DEV_XID_ERRORS"), 0)
        if not xid:
            xid = (xids or {}).get((node.name, g.index)) or xid
        rows.append(
            {
                "node": node.name,
                "gpu": g.index,
                "uuid": g.uuid,
                "serial": g.serial,
                "pci_bus_id": g.pci_bus_id,
                "model": g.model,
                "vendor": g.vendor,
                "partition": g.partition or None,
                "health": health,
                "util_pct": _num(util),
                "temp_c": _num(value("DCGM_FI_DEV_GPU_TEMP")),
                "power_w": _num(value("DCGM_FI_DEV_POWER_USAGE")),
                "sm_clock_mhz": _num(value("DCGM_FI_DEV_SM_CLOCK"), 0),
                "fb_used_mib": _num(value("DCGM_FI_DEV_FB_USED"), 0),
                "clock_events": _clock_events(value("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")),
                "ecc_dbe_volatile": _num(value("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"), 0),
                "pcie": "-" if np.isnan(gen) else f"gen{int(gen)} x{int(width)}",
                "xid_last": xid,
                "readings": "lost" if lost else "none" if node.lost or blind or node.metrics is None else "current",
                "held_by": held.get(g.index) or None,
                "fb_total_mib": None if g.memory_mib is None else round(g.memory_mib),
                "power_limit_w": None if g.power_limit_w is None else round(g.power_limit_w, 1),
                "mig_mode": g.mig_mode,
                "clique_id": g.clique_id,
                "cluster_uuid": g.cluster_uuid or None,
                "mig": _mig_rows(g),
                "slices": _memory_slices(g.model),
            }
        )
    return rows


def node_rows(plane: ControlPlane) -> list[dict[str, Any]]:
    with plane.lock:
        problems, xids = _gpu_problems(plane), _gpu_xids(plane)
        jobs_on: dict[str, list[str]] = {}
        for job in plane.fleet.jobs():
            for n in dict.fromkeys(n for n, _ in job.ranks):
                jobs_on.setdefault(n, []).append(job.name)
        rows = []
        for node in sorted(plane.fleet.nodes.values(), key=lambda n: n.name):
            inv = node.inventory
            gpus = _gpus_of(node, problems, xids)
            util = [g["util_pct"] for g in gpus if g["util_pct"] is not None]
            temp = [g["temp_c"] for g in gpus if g["temp_c"] is not None]
            power = [g["power_w"] for g in gpus if g["power_w"] is not None]
            ports = list(node.ports_up.values())
            rows.append(
                {
                    "name": node.name,
                    "status": _node_status(plane, node),
                    "pool": inv.labels.get("pool", "") if inv else "",
                    "rack": inv.labels.get("rack", "") if inv else "",
                    "gpu_model": inv.gpus[0].model if inv and inv.gpus else None,
                    "gpu_vendor": inv.gpus[0].vendor if inv and inv.gpus else None,
                    "gpus": len(gpus),
                    "gpus_allocatable": sum(1 for g in gpus if g["health"] in ("healthy", "degraded")),
                    "gpu_util_pct": round(float(np.mean(util)), 1) if util else None,
                    "gpu_temp_max_c": max(temp) if temp else None,
                    "power_kw": round(sum(power) / 1000.0, 2),
                    "links_up": f"{sum(ports)}/{len(ports)}",
                    "jobs": jobs_on.get(node.name, []),
                    "driver": inv.driver if inv else "",
                    "cuda": inv.cuda if inv else "",
                    "agent": node.agent,
                    "last_seen_ago_s": round(max(0.0, plane.clock() - node.last_seen), 1) if node.last_seen else None,
                }
            )
        return rows


def job_rows(plane: ControlPlane) -> list[dict[str, Any]]:
    now = plane.clock()
    with plane.lock:
        cause_of: dict[str, str] = {}
        live = plane.book.open_incidents()
        # an incident whose effect is the job's own ("job X hung: ...") names it first; one that only mentions
        # the job is the cause only when none does
        for inc in live:
            for effect in inc.effects:
                if effect.startswith("job "):
                    cause_of.setdefault(effect.split()[1], f"{inc.id} {inc.cause.value} on {inc.entity}")
        for inc in live:
            for effect in inc.effects:
                for job in plane.fleet.jobs():
                    if job.name in effect.split():
                        cause_of.setdefault(job.name, f"{inc.id} {inc.cause.value} on {inc.entity}")
        signals = plane.fleet.job_signals()
        rows = []
        for job in sorted(plane.fleet.jobs(), key=lambda j: j.name):
            facts = [f for n in plane.fleet.nodes.values() for f in n.jobs if f.job == job.name]
            age = now - job.last_step_time
            stalled = age > max(plane.thresholds.training.hang_min_s, 1.5 * job.step_seconds)
            rows.append(
                {
                    "name": job.name,
                    "state": "Stalled" if stalled else "Running",
                    "nodes": len({n for n, _ in job.ranks}),
                    "ranks": len(job.ranks),
                    "step": max((f.step for f in facts), default=0),
                    "step_time_s": round(job.step_seconds, 2),
                    "last_step_age_s": round(age, 1),
                    "restarts": max((f.restarts for f in facts), default=0),
                    "cause": cause_of.get(job.name) if stalled else None,
                    "node_list": sorted({n for n, _ in job.ranks}),
                    **_stragglers(job, plane.thresholds.training.straggler_ratio),
                    **_signal_columns(signals.get(job.name)),
                }
            )
        return rows


def _signal_columns(entry: tuple[TrainingSignals, float] | None) -> dict[str, Any]:
    """What the job's own metrics say, beside what the hardware says (None where it does not export a value)."""
    s = entry[0] if entry is not None else TrainingSignals()
    return {
        "loss": _finite_or_text(s.loss, "loss", s.nonfinite),
        "validation_loss": _finite_or_text(s.validation_loss, "validation_loss", s.nonfinite),
        "learning_rate": s.learning_rate,
        "grad_norm": _finite_or_text(s.grad_norm, "grad_norm", s.nonfinite),
        "samples_per_s": None if s.samples_per_s is None else round(s.samples_per_s, 1),
        "tokens_per_s": None if s.tokens_per_s is None else round(s.tokens_per_s, 1),
        "data_wait_s": s.data_wait_s,
        "checkpoints_ok": s.checkpoints_ok,
        "checkpoints_failed": s.checkpoints_failed,
    }


def _finite_or_text(value: float | None, name: str, nonfinite: list[str]) -> float | str | None:
    return "NaN/inf" if name in nonfinite else (None if value is None else round(value, 5))


def _stragglers(job: JobView, ratio: float) -> dict[str, Any]:
    """The ranks computing clearly slower than the job's median right now (the detector also waits for it to last
    before it opens an incident)."""
    times = np.array(job.rank_compute, dtype=np.float64)
    if not np.isfinite(times).any():
        return {"rank_compute_median_s": None, "stragglers": []}
    median, mask = slow_ranks(times, ratio)
    slow = np.flatnonzero(mask)
    return {
        "rank_compute_median_s": round(median, 3),
        "stragglers": [
            {
                "rank": int(r),
                "node": job.ranks[r][0],
                "gpu": job.ranks[r][1],
                "compute_s": round(float(times[r]), 3),
                "ratio": round(float(times[r]) / median, 2) if median > 0 else None,
            }
            for r in slow[np.argsort(-times[slow])][:20]
        ],
    }


def service_rows(plane: ControlPlane) -> list[dict[str, Any]]:
    """Inference services joined across the nodes hosting their replicas: the last minute's traffic and
    percentiles (the worst replica's), and the SLO detector's judgement over its own windows (summed across
    replicas): which objectives are breached, or why nothing can be said (too little traffic, stale)."""
    with plane.lock:
        merged: dict[str, list[tuple[str, ServiceFact]]] = {}
        for node in plane.fleet.nodes.values():
            if node.lost:
                continue
            for fact in node.services:
                merged.setdefault(fact.service, []).append((node.name, fact))
        statuses: dict[str, list[ServiceStatus]] = {}
        for status in plane.correlator.slo.statuses():
            statuses.setdefault(status.service, []).append(status)
    rows = []
    for name in sorted(merged.keys() | statuses.keys()):
        parts = merged.get(name, [])
        facts = [f for _, f in parts]
        rate = sum(f.requests_per_s for f in facts)

        def worst(attr: str, facts: list[ServiceFact] = facts) -> float | None:
            values = [v for f in facts if (v := getattr(f, attr)) is not None]
            return max(values) if values else None  # replicas' percentiles cannot be merged; the worst is honest

        p99 = worst("p99_s")
        requests = sum(f.requests for f in facts)
        errors = sum(f.errors for f in facts)
        judged = statuses.get(name, [])
        slo = _slo_columns(judged)
        if judged and all(s.stale for s in judged):
            state = "Stale"
        elif slo["breaches"] or (not slo["p99_5m_s"] and _over_declared(facts)):
            state = "SLO breached"
        elif p99 is None and not slo["p99_5m_s"]:
            state = "Idle" if rate == 0 else "Too little traffic"
        else:
            state = "Serving"
        rows.append(
            {
                "name": name,
                "state": state,
                "replicas": len(parts),
                "nodes": sorted({n for n, _ in parts}),
                "gpus": [f"{n}/{g}" for n, f in parts for g in f.gpus],
                "requests_per_s": round(rate, 2),
                "requests": requests,
                "errors": errors,
                "error_ratio": round(errors / requests, 6) if requests else None,
                "p50_s": worst("p50_s"),
                "p95_s": worst("p95_s"),
                "p99_s": p99,
                "slo_p99_s": min(
                    (f.slo_p99_s for f in facts if f.slo_p99_s is not None), default=slo["objective_p99_s"]
                ),
                "window_s": max((f.window_s for f in facts), default=0.0),
                "versions": sorted({f.version for f in facts if f.version}),
                "queue_depth": sum(f.queue_depth for f in facts if f.queue_depth is not None) if facts else None,
                **slo,
            }
        )
    return rows


def _over_declared(facts: list[ServiceFact]) -> bool:
    """A service that exports percentiles but no histogram the detector can window: its worst replica's p99 of the
    last minute against the p99 it declares."""
    declared = [f.slo_p99_s for f in facts if f.slo_p99_s is not None]
    return bool(declared) and any(f.p99_s is not None and f.p99_s > min(declared) for f in facts)


def _slo_columns(judged: list[ServiceStatus]) -> dict[str, Any]:
    """The SLO detector's view of a service: the worst of its versions, its breaches and what it could not say."""

    def worst(attr: str) -> float | None:
        values = [float(v) for s in judged if (v := getattr(s, attr)) is not None]
        return max(values) if values else None

    availability = [float(s.availability) for s in judged if s.availability is not None]
    burn = [b for s in judged for b in s.burn]
    first = judged[0].objectives if judged else None
    return {
        "objective_p99_s": first.p99_s if first else None,
        "objective_ttft_s": first.ttft_s if first else None,
        "objective_availability": first.availability if first else None,
        "p95_5m_s": _num(worst("p95_s") or float("nan"), 4),
        "p99_5m_s": _num(worst("p99_s") or float("nan"), 4),
        "ttft_5m_s": _num(worst("ttft_s") or float("nan"), 4),
        "error_ratio_5m": worst("error_ratio"),
        "availability_1h": min(availability) if availability else None,
        "burn_rates": [
            {
                "windows": f"{b.long_s / 3600:g}h/{b.short_s / 60:g}m",
                "threshold": float(b.threshold),
                "long": _plain(b.long),
                "short": _plain(b.short),
                "firing": bool(b.firing),
            }
            for b in burn
        ],
        "breaches": sorted({c.value for s in judged for c in s.breaches}),
        "slo_note": "; ".join(dict.fromkeys(s.note for s in judged if s.note)),
        "problems": sorted({p for s in judged for p in s.problems}),
    }


def _plain(value: float | None) -> float | None:
    return None if value is None else round(float(value), 4)


def describe_node(plane: ControlPlane, name: str, kernel_lines: int = 20) -> dict[str, Any]:
    with plane.lock:
        node = plane.fleet.node(name)
        inv = node.inventory
        ports = []
        for p in inv.ports if inv else []:
            key = p.name
            ports.append(
                {
                    "name": p.hca,
                    "port": p.port,
                    "rail": p.rail,
                    "guid": p.guid,
                    "state": "Active" if node.ports_up.get(key, True) else "Down",
                    "speed_gbps": p.rate_gbps,
                    "peer": p.peer,
                    "symbol_errors": _num(node.port_value("infiniband_port_symbol_errors_total", key), 0),
                    "link_downed": _num(node.port_value("infiniband_port_link_downed_total", key), 0),
                    "rcv_errors": _num(node.port_value("infiniband_port_receive_errors_total", key), 0),
                }
            )
        blind = gpu_source_down(node)
        conditions = [
            {
                "type": "Ready",
                "status": "False" if node.lost else "True",
                "reason": "AgentLost" if node.lost else "AgentReporting",
            },
            {
                "type": "SchedulingDisabled",
                "status": "True" if name in plane.unavailable else "False",
                "reason": f"{plane.backend.name} backend",
            },
            {
                "type": "GpuSourceDown",
                "status": "Unknown" if node.lost else "True" if blind else "False",
                "reason": "; ".join(f"{source}: {why}" for source, why in blind.items()) if blind else
                          "the agent reads its GPUs" if not node.lost else "AgentLost",
            },
        ]  # fmt: skip
        open_incidents = [plane.aged(plane.row(i)) for i in plane.book.open_incidents() if i.node == name]
        body = {
            "name": name,
            "agent": node.agent,
            "status": _node_status(plane, node),
            "labels": dict(inv.labels) if inv else {},
            "conditions": conditions,
            "software": {
                "driver": inv.driver if inv else "",
                "cuda": inv.cuda if inv else "",
                "kernel": inv.kernel if inv else "",
                "fabric_manager": inv.fabric_manager if inv else "",
            },
            "gpus": _gpus_of(node, _gpu_problems(plane), _gpu_xids(plane)),
            "sources_down": sources_down(node),
            "nics": ports,
            "affinity": affinity_view(inv.affinity) if inv and inv.affinity else None,
            "incidents": open_incidents,
            "kernel_log": [r.raw for r in list(node.kernel_log)[-kernel_lines:]],
        }
    return body


def affinity_view(affinity: HostAffinity) -> dict[str, Any]:
    """The node's GPU<->NIC<->CPU affinity as its agent reported it, each GPU with its nearest NICs."""
    return {
        "source": affinity.source,
        "gpus": [
            {
                "gpu": g.index,
                "pci_bus_id": g.pci_bus_id,
                "numa_node": g.numa_node,
                "cpus": g.cpus,
                "nearest_nics": g.nearest_nics(),
                "nic_links": dict(g.nic_links),
            }
            for g in affinity.gpus
        ],
        "nics": [
            {"name": n.name, "pci_bus_id": n.pci_bus_id, "numa_node": n.numa_node, "cpus": n.cpus, "netdev": n.netdev}
            for n in affinity.nics
        ],
    }


def summary(plane: ControlPlane, with_history: bool = True) -> dict[str, Any]:
    """The dashboard's page: headline figures, the per-GPU grid, fleet history from the metric store, jobs,
    open incidents."""
    now = plane.clock()
    with plane.lock:
        problems, xids = _gpu_problems(plane), _gpu_xids(plane)
        grid: list[dict[str, Any]] = []
        util: list[float] = []
        temp: list[float] = []
        power = 0.0
        lost = throttled = idle_held = 0
        links_down = 0
        for node in sorted(plane.fleet.nodes.values(), key=lambda n: n.name):
            gpus = _gpus_of(node, problems, xids)
            if not gpus:
                continue
            grid.append(
                {
                    "node": node.name,
                    "status": _node_status(plane, node),
                    "cordoned": node.name in plane.unavailable,
                    "util": [None if g["util_pct"] is None else round(g["util_pct"]) for g in gpus],
                    "temp": [None if g["temp_c"] is None else round(g["temp_c"]) for g in gpus],
                    "throttled": [
                        bool(set(g["clock_events"]) & {"hw_slowdown", "hw_thermal", "hw_power_brake"}) for g in gpus
                    ],
                    "allocated": [g["held_by"] is not None for g in gpus],
                }
            )
            for g in gpus:
                lost += g["health"] == "lost"
                if g["util_pct"] is not None:
                    util.append(g["util_pct"])
                    idle_held += g["held_by"] is not None and g["util_pct"] < 5
                if g["temp_c"] is not None:
                    temp.append(g["temp_c"])
                power += g["power_w"] or 0.0
            throttled += sum(grid[-1]["throttled"])
            links_down += sum(1 for up in node.ports_up.values() if not up)
        jobs = job_rows(plane)
        open_incidents = sorted(plane.book.open_incidents(), key=lambda i: i.first_seen, reverse=True)
        incidents = []
        for inc in open_incidents[:30]:
            incidents.append(plane.aged(plane.row(inc)))
        body: dict[str, Any] = {
            "time": now,
            "nodes": len(plane.fleet.nodes),
            "nodes_lost": sum(1 for n in plane.fleet.nodes.values() if n.lost),
            "gpus": sum(len(row["util"]) for row in grid),
            "gpus_lost": lost,
            "gpus_throttled": throttled,
            "gpus_idle_held": idle_held,
            "util_mean": round(float(np.mean(util)), 1) if util else 0.0,
            "temp_max": max(temp) if temp else None,
            "power_kw": round(power / 1000.0, 1),
            "jobs": {
                "Running": sum(1 for j in jobs if j["state"] == "Running"),
                "Stalled": sum(1 for j in jobs if j["state"] == "Stalled"),
            },
            "links_down": links_down,
            "incidents_open": len(open_incidents),
            "incidents_critical": sum(1 for i in open_incidents if i.severity is Severity.critical),
            "grid": grid,
            "job_rows": jobs,
            "incidents": incidents,
            "remediation": plane.remediation.mode,
            "backend": plane.backend.name,
            "nodes_degraded": [
                {"node": n.name, "sources_down": down}
                for n in sorted(plane.fleet.nodes.values(), key=lambda n: n.name)
                if (down := gpu_source_down(n))
            ],
            "simulated_time": simulated_time(plane),
        }
    body["history"] = history(plane, now) if with_history else []
    return body


def simulated_time(plane: ControlPlane) -> bool:
    """Whether the control plane's clock is the digital twin's (gpufleet up, --backend twin): simulated time, which
    may run ahead of or behind the wall clock, and the dashboard says so beside it."""
    return plane.backend.name == "twin"


def history(plane: ControlPlane, now: float) -> list[dict[str, Any]]:
    """Fleet utilization, hottest GPU and power over the last hours, a point a minute, from the metric store."""
    if plane.metrics is None:
        return []
    start = now - HISTORY_S
    columns: dict[float, dict[str, Any]] = {}
    for key, series in (
        ("util", "gpufleet_fleet_gpu_utilization_avg"),
        ("temp", "gpufleet_fleet_gpu_temp_max"),
        ("power", "gpufleet_fleet_power_watts"),
    ):
        for s in plane.metrics.range(series, start, now, 60.0):
            for t, v in zip(s.timestamps, s.values, strict=True):
                columns.setdefault(float(t), {"t": float(t)})[key] = round(
                    float(v) / (1000.0 if key == "power" else 1.0), 1
                )
    return [columns[t] for t in sorted(columns)]


PORT_COUNTERS = (
    ("symbol_errors", "infiniband_port_symbol_errors_total"),
    ("link_downed", "infiniband_port_link_downed_total"),
    ("rcv_errors", "infiniband_port_receive_errors_total"),
)


def fabric(plane: ControlPlane) -> dict[str, Any]:
    """Every HCA port the agents reported, the switch at its other end, its state and error counters, and the open
    incident on it; switches with how many of their links are down or erring."""
    with plane.lock:
        on_port: dict[tuple[str, str, int | None], tuple[str, Severity]] = {}
        for inc in plane.book.open_incidents():
            e = inc.entity
            if e.kind is EntityKind.port and e.node:
                key = (e.node, e.name, e.index)
                if key not in on_port or inc.severity.rank > on_port[key][1].rank:
                    on_port[key] = (inc.id, inc.severity)
        links = []
        for node in sorted(plane.fleet.nodes.values(), key=lambda n: n.name):
            for p in node.inventory.ports if node.inventory else []:
                counters = {k: _num(node.port_value(series, p.name), 0) for k, series in PORT_COUNTERS}
                incident = on_port.get((node.name, p.hca, p.port))
                links.append(
                    {
                        "node": node.name,
                        "hca": p.hca,
                        "port": p.port,
                        "rail": p.rail,
                        "guid": p.guid,
                        "switch": p.peer or None,
                        "state": "Unknown" if node.lost else "Active" if node.ports_up.get(p.name, True) else "Down",
                        "speed_gbps": p.rate_gbps,
                        **counters,
                        "incident": incident[0] if incident else None,
                        "severity": incident[1].value if incident else None,
                    }
                )
    switches: dict[str, dict[str, Any]] = {}
    for link in links:
        peer = link["switch"]
        if not isinstance(peer, str):
            continue
        sw = switches.setdefault(peer, {"name": peer, "links": 0, "down": 0, "erring": 0})
        sw["links"] += 1
        sw["down"] += link["state"] == "Down"
        sw["erring"] += bool(link["symbol_errors"] or link["rcv_errors"] or link["link_downed"])
    return {
        "switches": sorted(switches.values(), key=lambda s: s["name"]),
        "links": links,
        "counts": fabric_counts(plane, switches=len(switches), ports=links),
    }


def fabric_counts(plane: ControlPlane, switches: int, ports: list[dict[str, Any]]) -> dict[str, Any]:
    """One count of the fabric's switches and links for every page: the fabric watcher's (every switch and cable
    it discovered, the spines and their cables included) when one reports, else what the nodes' agents see (the
    switches their HCA ports face, a link per HCA port). `hca_ports` is the agents' ports, always."""
    found = fabric_views.counts(plane.fabric)
    down = sum(1 for p in ports if p["state"] == "Down")
    if found is not None:
        return {"source": "fabric watcher", "switches": found["switches"], "links": found["links"],
                "links_down": found["links_down"], "hca_ports": len(ports)}  # fmt: skip
    return {"source": "node agents", "switches": switches, "links": len(ports), "links_down": down,
            "hca_ports": len(ports)}  # fmt: skip


def incident_states() -> list[str]:
    return [s.value for s in IncidentState]


SCHEDULER_STALE_S = 120.0  # a watcher reads every 15 s: this many seconds without a report is a watcher in trouble


def scheduler(plane: ControlPlane, limit: int | None = None, after: str | None = None) -> dict[str, Any]:
    """Per workload manager, its latest report: pending work longest-waiting first (work with no known start
    last), and its queues with their use of quota. `stale` when the report is old or its agent went silent.

    The pending work of every manager is one list, longest-waiting first across them, given `limit` rows a page
    (None: all) after the `continue` token `after`; each manager's counts and queues are on every page."""
    now = plane.clock()
    with plane.lock:
        reports = [
            (manager, node, report, plane.fleet.nodes[node].lost if node in plane.fleet.nodes else True)
            for manager, (node, report) in sorted(plane.fleet.scheduler.items())
        ]
    waiting = sorted(((manager, p) for manager, _, report, _ in reports for p in report.pending), key=_waiting_key)
    shown = paging.page(waiting, _waiting_key, limit, after)
    pending: dict[str, list[dict[str, Any]]] = {}
    for manager, p in shown.items:
        pending.setdefault(manager, []).append(
            {
                "manager": manager,
                "name": p.name,
                "queue": p.queue,
                "namespace": p.namespace,
                "gpus": p.gpus,
                "since": p.since,
                "waiting_s": round(max(0.0, now - p.since), 1) if p.since is not None else None,
                "reason": p.reason,
                "message": p.message,
                "priority": p.priority,
            }
        )
    managers = []
    for manager, node, report, lost in reports:
        age = max(0.0, now - report.time)
        queues = [
            {
                "manager": manager,
                "name": q.name,
                "gpus_used": q.gpus_used,
                "gpus_pending": q.gpus_pending,
                "quota": q.quota,
                "borrowing_limit": q.borrowing_limit,
                "use_pct": round(100.0 * q.gpus_used / q.quota, 1) if q.quota else None,
                "pending": q.pending,
                "running": q.running,
            }
            for q in sorted(report.queues, key=lambda q: q.name)
        ]
        managers.append(
            {
                "manager": manager,
                "node": node,
                "time": report.time,
                "age_s": round(age, 1),
                "stale": lost or age > SCHEDULER_STALE_S,
                "pending_count": len(report.pending),
                "gpus_pending": sum(p.gpus for p in report.pending),
                "pending": pending.get(manager, []),
                "queues": queues,
            }
        )
    return {"time": now, "managers": managers, "metadata": shown.metadata()}


def _waiting_key(row: tuple[str, PendingWork]) -> tuple[Any, ...]:
    """Longest-waiting first, work with no known start last; then by manager and name, so the order is total."""
    manager, p = row
    return (p.since is None, p.since or 0.0, manager, p.name, p.namespace, p.queue)
