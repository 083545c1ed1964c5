"""Remediation on the digital twin: each action calls the twin's own action method."""

from __future__ import annotations

from gpufleet.errors import BackendError
from gpufleet.remediate.backends.base import DiagResult, Placement, RemediationBackend
from gpufleet.sim.twin import Twin


class TwinBackend(RemediationBackend):
    name = "twin"

    def __init__(self, twin: Twin) -> None:
        self.twin = twin

    def now(self) -> float:
        return float(self.twin.time)

    def nodes(self) -> list[str]:
        return [n.name for n in self.twin.cluster.nodes]

    def placement(self) -> dict[str, Placement]:
        fabric = self.twin.cluster.fabric
        leaf_of: dict[str, str] = {}
        for link in fabric.links:  # the leaf that rail 0 of each node is cabled to
            for here, there in ((link.a, link.b), (link.b, link.a)):
                if here[0].endswith("/mlx5_0"):
                    leaf_of[here[0].split("/", 1)[0]] = there[0]
        return {n.name: Placement(rack=n.rack, leaf=leaf_of.get(n.name, "")) for n in self.twin.cluster.nodes}

    def unavailable(self) -> set[str]:
        return {
            n.name
            for n in self.twin.cluster.nodes
            if n.unschedulable or self.twin.node_state[n.name].rebooting_until > 0
        }

    def node_ready(self, node: str) -> bool:
        self.twin.cluster.node(node)
        return self.twin.node_state[node].rebooting_until == 0

    def cordon(self, node: str, reason: str) -> str:
        self.twin.cordon(node, reason)
        return f"node {node} cordoned"

    def uncordon(self, node: str) -> str:
        self.twin.uncordon(node)
        return f"node {node} uncordoned"

    def drain(self, node: str, reason: str) -> str:
        stopped = self.twin.drain(node)
        return f"node {node} drained; stopped jobs: {', '.join(stopped) or 'none'}"

    def reset_gpu(self, node: str, index: int) -> str:
        if not self.twin.reset_gpu(node, index):
            raise BackendError(f"GPU {index} on {node} cannot be reset in place (off the bus): reboot the node")
        return f"GPU {index} on {node} reset"

    def reboot_node(self, node: str, reason: str) -> str:
        self.twin.reboot_node(node)
        return f"node {node} rebooting"

    def _gpu_rows(self, node: str) -> list[int]:
        return [self.twin.gpu(node, g.index) for g in self.twin.cluster.node(node).gpus]

    def run_diag(self, node: str, level: int) -> DiagResult:
        """The node's health checks at DCGM run level `level` (see gpufleet.health.diag): a pass with a link
        down is not trusted."""
        from gpufleet.health.diag import twin_diag

        outcome = twin_diag(self.twin, node, level)
        if not outcome.passed:
            return DiagResult(False, f"diag r{level} FAIL: " + "; ".join(outcome.failures()))
        return DiagResult(True, f"diag r{level} PASS on {len(self._gpu_rows(node))} GPUs")

    def set_power_limit(self, node: str, index: int | None, fraction: float) -> str:
        gpus = [index] if index is not None else [g.index for g in self.twin.cluster.node(node).gpus]
        watts = []
        for k in gpus:
            w = round(float(self.twin.gpus.tdp_w[self.twin.gpu(node, k)]) * fraction)
            self.twin.set_power_limit(node, k, w)
            watts.append(w)
        return f"power limit on {node} GPU {','.join(map(str, gpus))} set to {watts[0]} W"

    def isolate_port(self, node: str, rail: int) -> str:
        self.twin.isolate_port(node, rail)
        return f"port {node}/mlx5_{rail} isolated"

    def requeue_job(self, job: str, exclude: list[str]) -> str:
        placed = self.twin.requeue_job(job, exclude)
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
