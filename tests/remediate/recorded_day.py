"""A day the twin records with remediation on: 10 nodes of 8 GPUs, a 30 s tick (the control plane's pass over
paused runbooks), and faults that exercise the runbooks, the drain spacing and the breaker's window. The control
plane keeps its state database in `directory` (as `gpufleet up --state DIR` would), so the replay reads what a real
run left behind."""

from __future__ import annotations

from pathlib import Path

from gpufleet.model import TrainingJob
from gpufleet.sim.faults import InjectedFault
from gpufleet.sim.runner import run_headless
from gpufleet.sim.twin import Twin
from gpufleet.spec.builder import build_cluster
from gpufleet.spec.cluster_spec import ClusterBody
from gpufleet.spec.scenario_spec import FaultType
from gpufleet.state import DB_NAME, Database
from tests.twins import door

NODES = 10
TICK_S = 30.0
H = 3600.0
# (type, at, node, gpu): a GPU off the bus (drain, reboot, diag, return), two ECC faults at once (the second
# drain waits out the 30 s spacing), and two nodes losing a GPU 4 minutes apart (under the default breaker's floor
# of 3 nodes; over a threshold of 2 in 10 minutes, not over 2 in 3 minutes), then one more ECC fault
FAULTS = [
    (FaultType.gpu_off_bus, 1 * H, "n-001", 2),
    (FaultType.ecc_dbe, 3 * H, "n-003", 1),
    (FaultType.ecc_dbe, 3 * H, "n-004", 5),
    (FaultType.gpu_off_bus, 6 * H, "n-005", 0),
    (FaultType.gpu_off_bus, 6 * H + 240, "n-006", 3),
    (FaultType.ecc_dbe, 12 * H, "n-007", 2),
]


def twin() -> Twin:
    body = ClusterBody.model_validate(
        {
            "nodePools": [
                {"name": "n", "count": NODES, "gpu": {"model": "h100-sxm", "count": 8}, "nics": {"count": 8}}
            ],
            "fabric": {"leafRadix": 16},
        }
    )
    faults = [InjectedFault(k, t, at, node=node, gpu=gpu) for k, (t, at, node, gpu) in enumerate(FAULTS)]
    job = TrainingJob(name="job", nodes=["n-008", "n-009"], gpus_per_node=8, nccl_timeout_s=1800.0)
    return Twin(build_cluster("t", body), seed=1, tick=TICK_S, jobs=[job], faults=faults, restart_backoff_s=None)


def record_day(directory: Path, hours: float = 24.0) -> Path:
    """Run the day through the door with remediation on; the data directory its state database is in."""
    directory.mkdir(parents=True, exist_ok=True)
    t = twin()
    db = Database(directory / DB_NAME)
    plane, fleet = door(t, remediation="on", db=db)
    run_headless(t, fleet, plane.ingest, plane.tick, hours * H)  # type: ignore[attr-defined]
    plane.close()  # type: ignore[attr-defined]
    db.close()
    return directory
