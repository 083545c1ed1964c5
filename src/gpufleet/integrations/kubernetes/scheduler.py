"""A secondary Kubernetes scheduler: pods with ``schedulerName: gpufleet`` are filtered, scored and bound here.

One cycle lists nodes and pods through the official client, plans every pending pod of this scheduler (gangs
atomically, preemption when a pod fits nowhere), binds placements with the pods/binding subresource, evicts preemption
victims through the Eviction API (the preemptor binds in a later cycle, once they are gone, as kube-scheduler does),
and records a ``FailedScheduling`` event for pods that fit nowhere.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from gpufleet.errors import BackendError
from gpufleet.integrations.kubernetes.client import connect, kubernetes_module
from gpufleet.integrations.kubernetes.objects import event, eviction
from gpufleet.model import Fabric
from gpufleet.sched.framework.scheduler import Scheduler
from gpufleet.sched.framework.scoring import Strategy
from gpufleet.sched.framework.snapshot import PodInfo, Snapshot, assemble_gangs, parse_node, parse_pod
from gpufleet.sched.framework.types import Failure, Placement, PlanResult

if TYPE_CHECKING:
    from kubernetes.client import CoreV1Api

SCHEDULER_NAME = "gpufleet"
__all__ = ["SCHEDULER_NAME", "CycleResult", "KubernetesScheduler", "connect"]


@dataclass(slots=True)
class CycleResult:
    plan: PlanResult
    bound: list[Placement] = field(default_factory=list)
    evicted: list[str] = field(default_factory=list)
    events: list[Failure] = field(default_factory=list)


class KubernetesScheduler:
    def __init__(
        self,
        core: CoreV1Api,
        *,
        scheduler_name: str = SCHEDULER_NAME,
        strategy: Strategy = Strategy.binpack,
        fabric: Fabric | None = None,
        record_events: bool = True,
        preemption: bool = True,
    ) -> None:
        self.k8s = kubernetes_module()
        self.core = core
        self.scheduler_name = scheduler_name
        self.strategy = strategy
        self.fabric = fabric
        self.record_events = record_events
        self.preemption = preemption

    def _plain(self, obj: Any) -> dict[str, Any]:
        data: dict[str, Any] = self.k8s.client.ApiClient().sanitize_for_serialization(obj)
        return data

    def snapshot(self) -> Snapshot:
        """Nodes and live pods (finished pods hold no resources) through the API."""
        try:
            nodes = self.core.list_node()
            pods = self.core.list_pod_for_all_namespaces(field_selector="status.phase!=Succeeded,status.phase!=Failed")
        except self.k8s.client.ApiException as exc:
            raise BackendError(f"listing nodes and pods failed: {exc.status} {exc.reason}") from None
        snap = Snapshot()
        snap.nodes = [parse_node(self._plain(n)) for n in nodes.items]
        snap.pods = [parse_pod(self._plain(p)) for p in pods.items]
        snap.gangs = assemble_gangs(snap.pods)
        return snap

    def plan(self, snap: Snapshot) -> tuple[Scheduler, list[PodInfo], PlanResult]:
        sched = Scheduler.from_snapshot(snap, strategy=self.strategy, fabric=self.fabric)
        pending = snap.pending(self.scheduler_name)
        sched.expect(pending)  # node classes split once for the cycle's node selectors
        return sched, pending, sched.plan(pending, snap.gangs, preemption=self.preemption)

    def binding(self, pod: PodInfo, node: str) -> Any:
        c = self.k8s.client
        return c.V1Binding(
            api_version="v1",
            kind="Binding",
            metadata=c.V1ObjectMeta(name=pod.pod.name, namespace=pod.pod.namespace, uid=pod.uid or None),
            target=c.V1ObjectReference(api_version="v1", kind="Node", name=node),
        )

    def bind(self, pod: PodInfo, node: str) -> None:
        try:
            # The response is a Status, not a Binding: skip deserialising it (the client would reject it).
            self.core.create_namespaced_binding(pod.pod.namespace, self.binding(pod, node), _preload_content=False)
        except self.k8s.client.ApiException as exc:
            raise BackendError(f"binding {pod.key} to {node} failed: {exc.status} {exc.reason}") from None

    def evict(self, pod: PodInfo, reason: str) -> None:
        body = eviction(pod.pod.name, pod.pod.namespace)
        try:
            self.core.create_namespaced_pod_eviction(pod.pod.name, pod.pod.namespace, body)
        except self.k8s.client.ApiException as exc:
            raise BackendError(f"evicting {pod.key} ({reason}) failed: {exc.status} {exc.reason}") from None

    def failed_event(self, pod: PodInfo, message: str) -> Any:
        return event(
            kind="Pod",
            name=pod.pod.name,
            namespace=pod.pod.namespace,
            involved_namespace=pod.pod.namespace,
            uid=pod.uid,
            reason="FailedScheduling",
            message=message,
            component=self.scheduler_name,
            when=datetime.now(UTC),
        )

    def run_once(self, dry_run: bool = False) -> CycleResult:
        snap = self.snapshot()
        _, _, plan = self.plan(snap)
        result = CycleResult(plan)
        by_key = {p.key: p for p in snap.pods}
        preemptors = {ev.reason.removeprefix("preempted by ") for ev in plan.evictions}
        # A gang waits whole: if any member is waiting for victims to go, none of it binds yet.
        waiting_gangs = {by_key[k].pod.gang for k in preemptors if k in by_key and by_key[k].pod.gang}
        preemptors |= {p.key for p in snap.pods if p.pod.gang in waiting_gangs}
        for ev in plan.evictions:
            if not dry_run:
                self.evict(by_key[ev.pod], ev.reason)
            result.evicted.append(ev.pod)
        for placement in plan.placements:
            if placement.pod in preemptors:
                continue  # bind once the victims have gone
            if not dry_run:
                self.bind(by_key[placement.pod], placement.node)
            result.bound.append(placement)
        for failure in plan.failures:
            if self.record_events and not dry_run:
                pod = by_key[failure.pod]
                self.core.create_namespaced_event(pod.pod.namespace, self.failed_event(pod, failure.message))
            result.events.append(failure)
        return result

    def run(
        self,
        interval_s: float = 2.0,
        cycles: int | None = None,
        dry_run: bool = False,
        on_cycle: Callable[[CycleResult], None] | None = None,
    ) -> None:
        """Schedule every `interval_s` seconds, for `cycles` cycles or forever."""
        done = 0
        while cycles is None or done < cycles:
            result = self.run_once(dry_run=dry_run)
            if on_cycle is not None:
                on_cycle(result)
            done += 1
            if cycles is None or done < cycles:
                time.sleep(interval_s)
