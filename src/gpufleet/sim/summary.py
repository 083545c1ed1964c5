"""What happened in a run, for `gpufleet sim run`: faults with their consequences, jobs, fleet figures."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from gpufleet.sim.twin import Twin
from gpufleet.spec.base import format_duration


def summarize(twin: Twin, wall_seconds: float) -> dict[str, Any]:
    g = twin.gpus
    minutes = twin.recorder.minutes
    kinds = Counter(e.kind for e in twin.events)
    xids = Counter(int(e.attrs["xid"]) for e in twin.events if e.kind == "kmsg" and "xid" in e.attrs)
    job_events = Counter(e.attrs.get("state") for e in twin.events if e.kind == "job_state")
    return {
        "simulated": format_duration(twin.time),
        "simulated_seconds": twin.time,
        "wall_seconds": round(wall_seconds, 2),
        "speedup": round(twin.time / wall_seconds, 1) if wall_seconds > 0 else None,
        "cluster": {
            "name": twin.cluster.name,
            "nodes": len(twin.cluster.nodes),
            "gpus": g.n,
            "ports": twin.ports.n,
        },
        "faults": [
            {
                "at": format_duration(f.time),
                "type": f.type.value,
                "target": f.target,
                "code": f.code,
                "effects": f.effects,
            }
            for f in twin.injected
            if f.time <= twin.time
        ],
        "jobs": [
            {
                "name": j.name,
                "state": j.state.value,
                "steps": j.step,
                "restarts": j.restarts,
                "last_step_age_s": round(twin.time - j.last_step_time, 1),
            }
            for j in twin.cluster.jobs
        ],
        "events": dict(kinds),
        "xid_counts": {str(k): v for k, v in sorted(xids.items())},
        "job_transitions": {str(k): v for k, v in job_events.items()},
        "fleet": {
            "gpu_util_mean_pct": round(float(np.mean([m.util_mean for m in minutes])), 1) if minutes else None,
            "gpu_temp_max_c": round(max((m.temp_max for m in minutes), default=float("nan")), 1),
            "energy_kwh": round(float(g.energy_mj.sum()) / 3.6e9, 1),
            "gpus_lost": int((~g.alive).sum()),
            "gpus_throttled_peak": max((m.throttled for m in minutes), default=0),
            "ecc_dbe_total": int(g.ecc_dbe_agg.sum()),
            "pcie_replays_total": int(g.pcie_replay.sum()),
            "nvlink_crc_errors_total": int(g.nvlink_crc_flit.sum()),
            "ib_symbol_errors_total": int(twin.ports.counters["symbol_errors"].sum()),
            "ib_link_downs_total": int(twin.ports.counters["link_downed"].sum()) // 2,
        },
    }
