"""Remediation on the digital twin: each action calls the twin's own action method, under the lock the twin's
clock steps under, and is written to the journal so a restart replays it (the twin is rebuilt from its scenario).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from gpufleet.errors import BackendError
from gpufleet.locks import ordered_lock
from gpufleet.remediate.backends.base import (
    CapsPower,
    Cordons,
    DiagResult,
    Drains,
    EvictsGpuWork,
    IsolatesFabricPorts,
    IsolatesPorts,
    NodeLocation,
    RebootsNodes,
    RemediationBackend,
    RequeuesJobs,
    ResetsGpus,
    RunsDiagnostics,
)
from gpufleet.remediate.backends.cordons import CordonChange, on_cordon, on_uncordon
from gpufleet.remediate.config import EvictionSpec
from gpufleet.sim.journal import TwinJournal
from gpufleet.sim.twin import Twin


class TwinBackend(
    RemediationBackend,
    Cordons,
    Drains,
    EvictsGpuWork,
    ResetsGpus,
    RebootsNodes,
    RunsDiagnostics,
    CapsPower,
    IsolatesFabricPorts,
    IsolatesPorts,
    RequeuesJobs,
):
    name = "twin"

    def __init__(self, twin: Twin, lock: threading.RLock | None = None, journal: TwinJournal | None = None) -> None:
        self.twin = twin
        self.lock = lock or ordered_lock("twin")
        self.journal = journal
        self.ready = threading.Event()  # cleared while a restarted twin is brought back to where it stopped
        self.ready.set()

    def now(self) -> float:
        return self.twin.epoch + float(self.twin.time)

    def nodes(self) -> list[str]:
        return [n.name for n in self.twin.cluster.nodes]

    def placement(self) -> dict[str, NodeLocation]:
        fabric = self.twin.cluster.fabric
        leaf_of: dict[str, str] = {}
        for link in fabric.links:  # the leaf that rail 0 of each node is cabled to
            for here, there in ((link.a, link.b), (link.b, link.a)):
                if here[0].endswith("/mlx5_0"):
                    leaf_of[here[0].split("/", 1)[0]] = there[0]
        return {n.name: NodeLocation(rack=n.rack, leaf=leaf_of.get(n.name, "")) for n in self.twin.cluster.nodes}

    def unavailable(self) -> set[str]:
        with self.lock:
            return {n.name for n in self.twin.cluster.nodes if n.unschedulable or self.twin.rebooting(n.name)}

    def node_ready(self, node: str) -> bool:
        with self.lock:
            self.twin.cluster.node(node)
            return not self.twin.rebooting(node)

    # --- actions: journaled, so a restarted twin replays them ---------------------------------------------------

    def apply(self, action: str, *args: Any, replaying: bool = False) -> Any:
        """Carry out one twin action (the journal replays through here too, `replaying`)."""
        if not replaying and not self.ready.is_set():
            raise BackendError(
                f"the twin is being brought back to where it stopped; it takes no {action} yet",
                fix="try again in a few seconds (the control plane's log shows the progress)",
            )
        twin = self.twin
        with self.lock:
            result: Any = None
            if action == "cordon":
                twin.cordon(args[0], args[1] if len(args) > 1 else "")
            elif action == "uncordon":
                twin.uncordon(args[0])
            elif action == "set_cordon":
                twin.set_cordon(args[0], bool(args[1]), list(args[2]))
            elif action == "drain":
                result = twin.drain(args[0])
            elif action == "drain_gpu":
                result = twin.drain_gpu(args[0], int(args[1]), list(args[2]))
            elif action == "reset_gpu":
                result = twin.reset_gpu(args[0], int(args[1]))
            elif action == "reboot_node":
                twin.reboot_node(args[0])
            elif action == "set_power_limit":
                twin.set_power_limit(args[0], int(args[1]), float(args[2]))
            elif action == "isolate_port":
                twin.isolate_port(args[0], int(args[1]))
            elif action == "set_switch_port":
                twin.set_switch_port(args[0], int(args[1]), enable=bool(args[2]))
            elif action == "requeue_job":
                result = twin.requeue_job(args[0], list(args[1]))
            else:
                raise BackendError(f"the twin has no action {action!r}")
            if self.journal is not None:
                self.journal.record(twin.time, action, list(args))
        return result

    def _change_cordon(self, node: str, incident: str | None, decide: Callable[..., CordonChange]) -> CordonChange:
        with self.lock:
            n = self.twin.cluster.node(node)
            change = decide(node, n.unschedulable, self.twin.cordon_holders(node), incident)
            if change.write:
                self.apply("set_cordon", node, change.unschedulable, list(change.holders))
        return change

    def cordon(self, node: str, reason: str, incident: str | None) -> str:
        return self._change_cordon(node, incident, on_cordon).detail

    def uncordon(self, node: str, incident: str | None) -> str:
        return self._change_cordon(node, incident, on_uncordon).detail

    def drain(self, node: str, reason: str, incident: str | None) -> str:
        with self.lock:
            cordoned = self._change_cordon(node, incident, on_cordon)
            stopped = self.apply("drain", node)
        return f"{cordoned.detail}; drained; stopped jobs: {', '.join(stopped) or 'none'}"

    def drain_gpu(self, node: str, index: int, reason: str, eviction: EvictionSpec) -> str:
        """The twin has no disruption budgets: evict and delete both stop the pod; leave keeps it running."""
        with self.lock:
            namespaces = {pod.split("/", 1)[0] for pod, _ in self.twin.gpu_work(node, index)}
            leave = sorted(ns for ns in namespaces if eviction.mode(ns) == "leave")
            stopped = self.apply("drain_gpu", node, index, leave)
            kept = [p for p, _ in self.twin.gpu_work(node, index)]
        moved = ", ".join(f"{pod} ({owner})" if owner else pod for pod, owner in stopped)
        left = f"; left {', '.join(kept)} running, owner told" if kept else ""
        return f"GPU {index} of {node}: stopped {moved or 'no pods'}{left}; the node's other GPUs keep their work"

    def reset_gpu(self, node: str, index: int) -> str:
        with self.lock:
            i = self.twin.gpu(node, index)
            if not self.twin.gpus.alive[i]:
                raise BackendError(f"GPU {index} on {node} cannot be reset in place (off the bus): reboot the node")
            self.apply("reset_gpu", node, index)
        return f"GPU {index} on {node} reset"

    def reboot_node(self, node: str, reason: str) -> str:
        self.apply("reboot_node", node)
        return f"node {node} rebooting"

    def _gpu_rows(self, node: str) -> list[int]:
        return [self.twin.gpu(node, g.index) for g in self.twin.cluster.node(node).gpus]

    def run_diag(self, node: str, level: int) -> DiagResult:
        """The node's health checks at DCGM run level `level` (see gpufleet.sim.diag): a pass with a link down is
        not trusted."""
        from gpufleet.sim.diag import twin_diag

        with self.lock:
            outcome = twin_diag(self.twin, node, level)
            count = len(self._gpu_rows(node))
        if not outcome.passed:
            return DiagResult(False, f"diag r{level} FAIL: " + "; ".join(outcome.failures()))
        return DiagResult(True, f"diag r{level} PASS on {count} GPUs")

    def set_power_limit(self, node: str, index: int | None, fraction: float) -> str:
        with self.lock:
            gpus = [index] if index is not None else [g.index for g in self.twin.cluster.node(node).gpus]
            watts = []
            for k in gpus:
                w = round(float(self.twin.gpus.tdp_w[self.twin.gpu(node, k)]) * fraction)
                self.apply("set_power_limit", node, k, w)
                watts.append(w)
        return f"power limit on {node} GPU {','.join(map(str, gpus))} set to {watts[0]} W"

    def isolate_port(self, node: str, rail: int) -> str:
        self.apply("isolate_port", node, rail)
        return f"port {node}/mlx5_{rail} isolated"

    def set_switch_port(self, switch: str, port: int, lid: int | None, *, enable: bool) -> str:
        self.apply("set_switch_port", switch, port, enable)
        return f"switch port {switch}/{port} {'enabled' if enable else 'disabled (isolated)'}"

    def requeue_job(self, job: str, exclude: list[str]) -> str:
        with self.lock:
            placed = self.apply("requeue_job", job, exclude)
            nodes = self.twin.cluster.job(job).nodes
        if not placed:
            return f"job {job} requeued without {', '.join(exclude)}; pending (no spare nodes)"
        return f"job {job} requeued without {', '.join(exclude)} on {', '.join(nodes)}"

    def gpu_count(self, node: str) -> int:
        return len(self.twin.cluster.node(node).gpus)

    def gpu_model(self, node: str) -> str:
        return self.twin.cluster.node(node).gpu_model or ""

    def cost_per_gpu_hour(self, node: str) -> float | None:
        return self.twin.cost_per_gpu_hour.get(self.gpu_model(node))

    def gpu_serial(self, node: str, index: int) -> str | None:
        for gpu in self.twin.cluster.node(node).gpus:
            if gpu.index == index:
                return gpu.serial
        return None
