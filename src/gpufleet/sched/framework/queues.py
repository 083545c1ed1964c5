"""Queues with guaranteed quota, borrowing of idle quota, and reclaim.

Each queue is guaranteed an amount per resource (``nvidia.com/gpu``, ``amd.com/gpu``, ``habana.ai/gaudi``, a MIG or
partition resource; each counted on its own: a quota in ``amd.com/gpu`` counts only AMD GPUs, and borrowing takes only
idle quota of the same resource). A queue may run past its guarantee by
borrowing what other queues leave idle, as long as the total borrowed never exceeds the total idle guarantee (and the
queue's own limit, if set). Work that runs on borrowed quota is reclaimable: when a queue submits work within its
guarantee and the cluster is full, the scheduler may evict borrowers' pods (fewest, lowest priority first) to give the
lender its quota back.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from gpufleet.errors import UserError
from gpufleet.sched.framework.devices import vendor_resources
from gpufleet.sched.framework.resources import accelerator_vendor
from gpufleet.sched.framework.snapshot import PodInfo
from gpufleet.sched.framework.types import EvictPredicate, Unit


class QueueSpec(BaseModel):
    """One queue: what it is guaranteed, whether it may borrow, and an optional ceiling."""

    model_config = ConfigDict(extra="forbid")

    name: str
    guaranteed: dict[str, int] = Field(default_factory=dict)
    borrowing: bool = True
    limit: dict[str, int] | None = None


@dataclass(slots=True)
class Admission:
    ok: bool
    borrowing: bool = False
    message: str = ""


@dataclass(slots=True)
class QueueBook:
    """Quota accounting over a set of queues. Pods of unknown queues go to `default` (no guarantee)."""

    specs: dict[str, QueueSpec]
    resources: tuple[str, ...] = field(default_factory=lambda: tuple(vendor_resources()))
    usage: dict[str, dict[str, int]] = field(default_factory=dict)
    members: dict[str, str] = field(default_factory=dict)  # pod key -> queue charged

    @classmethod
    def of(cls, specs: Iterable[QueueSpec], resources: tuple[str, ...] | None = None) -> QueueBook:
        """Quota is kept in `resources`: by default every vendor's whole devices plus the accelerator resources
        (MIG slices, AMD partitions) the queues name."""
        table = {s.name: s for s in specs}
        table.setdefault("default", QueueSpec(name="default"))
        if resources is None:
            named = {r for s in table.values() for r in (*s.guaranteed, *(s.limit or {})) if accelerator_vendor(r)}
            resources = tuple(dict.fromkeys([*vendor_resources(), *sorted(named)]))
        return cls(table, resources)

    def _queue(self, name: str) -> str:
        return name if name in self.specs else "default"

    def used(self, queue: str, resource: str) -> int:
        return self.usage.get(queue, {}).get(resource, 0)

    def guaranteed(self, queue: str, resource: str) -> int:
        return self.specs[queue].guaranteed.get(resource, 0)

    def borrowed_total(self, resource: str, extra: dict[str, int] | None = None) -> int:
        extra = extra or {}
        return sum(max(0, self.used(q, resource) + extra.get(q, 0) - self.guaranteed(q, resource)) for q in self.specs)

    def idle_total(self, resource: str, extra: dict[str, int] | None = None) -> int:
        extra = extra or {}
        return sum(max(0, self.guaranteed(q, resource) - self.used(q, resource) - extra.get(q, 0)) for q in self.specs)

    def is_borrowing(self, queue: str) -> bool:
        return any(self.used(queue, r) > self.guaranteed(queue, r) for r in self.resources)

    def admit(self, unit: Unit) -> Admission:
        q = self._queue(unit.queue)
        spec = self.specs[q]
        borrowing = False
        for r in self.resources:
            want = unit.request(r)
            if not want:
                continue
            after = self.used(q, r) + want
            if spec.limit is not None and r in spec.limit and after > spec.limit[r]:
                return Admission(False, message=f"queue {q} would exceed its limit of {spec.limit[r]} {r} ({after})")
            if after <= self.guaranteed(q, r):
                continue
            if not spec.borrowing:
                return Admission(
                    False, message=f"queue {q} is at its guaranteed {self.guaranteed(q, r)} {r} and may not borrow"
                )
            extra = {q: want}
            if self.borrowed_total(r, extra) > self.idle_total(r, extra):
                return Admission(False, message=f"queue {q}: no idle {r} quota left to borrow")
            borrowing = True
        return Admission(True, borrowing=borrowing)

    def charge(self, pod: PodInfo) -> None:
        q = self._queue(pod.pod.queue)
        use = self.usage.setdefault(q, {})
        for r in self.resources:
            use[r] = use.get(r, 0) + pod.requests.get(r, 0)
        self.members[pod.key] = q

    def uncharge(self, pod: PodInfo) -> None:
        q = self.members.pop(pod.key, None)
        if q is None:
            return
        for r in self.resources:
            self.usage[q][r] = self.usage[q].get(r, 0) - pod.requests.get(r, 0)

    def charge_unit(self, unit: Unit, placed: list[PodInfo], admission: Admission | None) -> None:
        for pod in placed:
            self.charge(pod)

    def charge_running(self, pods: Iterable[PodInfo]) -> None:
        for pod in pods:
            self.charge(pod)

    def evictable_for(self, unit: Unit, admission: Admission | None) -> EvictPredicate:
        """Lower priority pods may always be preempted; a queue within its guarantee may also reclaim from
        queues that are borrowing, whatever their priority."""
        q = self._queue(unit.queue)
        in_quota = admission is not None and admission.ok and not admission.borrowing

        def rule(victim: PodInfo, preemptor: PodInfo) -> bool:
            if victim.pod.priority < preemptor.pod.priority:
                return True
            vq = self.members.get(victim.key)
            return in_quota and vq is not None and vq != q and self.is_borrowing(vq)

        return rule


def load_queues(raw: list[dict[str, object]]) -> QueueBook:
    from pydantic import ValidationError

    try:
        specs = [QueueSpec.model_validate(r) for r in raw]
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise UserError(
            f"queue config: {where}: {err['msg']}", fix="queue fields: name, guaranteed, borrowing, limit"
        ) from None
    return QueueBook.of(specs)
