"""Small twins for tests: `nodes` nodes of 8 GPUs and 8 rails, one training job over the first `job_nodes`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from gpufleet.model import InferenceService, TrainingJob
from gpufleet.sim.faults import InjectedFault
from gpufleet.sim.twin import Twin
from gpufleet.spec.builder import build_cluster
from gpufleet.spec.cluster_spec import ClusterBody

TwinFactory = Callable[..., Twin]


def small_twin(
    nodes: int = 3,
    job_nodes: int = 2,
    faults: list[InjectedFault] | None = None,
    seed: int = 1,
    model: str = "h100-sxm",
    restart: float | None = None,
    timeout: float = 1800.0,
    service_node: str | None = None,
) -> Twin:
    body = ClusterBody.model_validate(
        {
            "nodePools": [{"name": "n", "count": nodes, "gpu": {"model": model, "count": 8}, "nics": {"count": 8}}],
            "fabric": {"leafRadix": 16},
        }
    )
    cluster = build_cluster("t", body)
    jobs = []
    if job_nodes:
        names = [f"n-{i:03d}" for i in range(job_nodes)]
        jobs.append(TrainingJob(name="job", nodes=names, gpus_per_node=8, nccl_timeout_s=timeout))
    services = [InferenceService("chat", service_node, (0, 1), slo_p99_s=0.5)] if service_node else []
    return Twin(cluster, seed=seed, jobs=jobs, services=services, faults=faults, restart_backoff_s=restart)


def door(twin: Twin, remediation: str = "off", db: object = None, lock: object = None) -> tuple[object, object]:
    """A control plane in memory with `twin`'s nodes as its agents (in process), as `gpufleet up` wires them."""
    import threading

    from gpufleet.control.service import ControlPlane
    from gpufleet.sim.backend import TwinBackend
    from gpufleet.sim.fleet import SimFleet
    from gpufleet.sim.node_actions import TwinNodeActions
    from gpufleet.sim.twin import EPOCH
    from gpufleet.state import Database
    from gpufleet.telemetry.store import EmbeddedStore

    backend = TwinBackend(twin, lock or threading.RLock())  # type: ignore[arg-type]
    plane = ControlPlane(
        db or Database(":memory:"),  # type: ignore[arg-type]
        backend,
        clock=lambda: EPOCH + twin.time,
        remediation=remediation,
        metrics=EmbeddedStore(None),
    )
    fleet = SimFleet(twin)
    fleet.node_actions = TwinNodeActions(backend)  # its agents take node actions, as in `gpufleet up`
    return plane, fleet


def run_door(twin: Twin, seconds: float, remediation: str = "off") -> tuple[object, object]:
    """Run `twin` for `seconds` through the door into a fresh control plane; returns (plane, fleet)."""
    from gpufleet.sim.runner import run_headless

    plane, fleet = door(twin, remediation)
    run_headless(twin, fleet, plane.ingest, plane.tick, seconds)  # type: ignore[attr-defined, arg-type]
    return plane, fleet


EXAMPLES = Path(__file__).resolve().parents[1] / "src" / "gpufleet" / "examples"


def su_scenario(
    path: Path, faults: list[str], *, duration: str = "1h", workload: str = "autoTrainingNodesPerJob: 8"
) -> Path:
    """Write a scenario over the built-in DGX H100 SuperPOD unit (32 nodes) to `path`; `faults` are flow-style YAML
    mappings, e.g. `{at: 20s, type: xid, node: dgx-002, gpu: 3, code: 31}`."""
    lines = "".join(f"  - {fault}\n" for fault in faults)
    path.write_text(
        f"""apiVersion: gpufleet.io/v1
kind: Scenario
metadata: {{name: {path.stem}}}
spec:
  cluster: {EXAMPLES / "clusters" / "dgx-h100-su.yaml"}
  duration: {duration}
  workload: {{{workload}}}
  faults:
{lines}"""
    )
    return path
