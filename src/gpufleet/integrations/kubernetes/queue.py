"""Kubernetes' pending work and queues as the scheduler's view, from objects as the API returns them.

Pending work: pods kube-scheduler could not place (`PodScheduled=False`, reason `Unschedulable`, its message the
latest `FailedScheduling` Event's when there is one, else the condition's) and pods held by a scheduling gate
(`SchedulingGated`); with Kueue, also the Workloads it has not admitted (their `QuotaReserved` condition says why,
e.g. "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor h100, 4 more
needed"). A pod's GPUs are its accelerator requests of every vendor: whole devices (`nvidia.com/gpu`, `amd.com/gpu`,
`habana.ai/gaudi`), NVIDIA MIG instances and AMD partitions (`amd.com/cpx_nps4`, one each), by the API server's
rules for container resources; a pod that asks for none counts only when it waits in a Kueue queue.

Queues: Kueue ClusterQueues (quota and borrowing limit from `spec.resourceGroups[].flavors[].resources[]`, in use from
`status.flavorsUsage`, both summed over flavors for the whole-device resources of every vendor it names, or for the
MIG or partition resources of a queue that has no whole devices; workload counts from `status.pendingWorkloads` and
`status.admittedWorkloads`); a pod's queue is
the ClusterQueue its `kueue.x-k8s.io/queue-name` LocalQueue points to. Without Kueue, one queue per namespace, with
no quota. An object that cannot be read is skipped and the reason returned, never raised.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from gpufleet.catalog.vendors import gpu_resources
from gpufleet.errors import BackendError, ParseError
from gpufleet.integrations.kubernetes.client import connect, kubernetes_module
from gpufleet.model.observe import PendingWork, QueueUse, SchedulerReport
from gpufleet.sched.framework.resources import MIG_PREFIX, parse_quantity, pod_requests
from gpufleet.sched.framework.snapshot import parse_time
from gpufleet.sched.partition.amd_partition import is_partition_resource

log = logging.getLogger("gpufleet.agent")

MANAGER = "kubernetes"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_GATE = "kueue.x-k8s.io/admission"  # Kueue's gate on a plain pod until its Workload is admitted
KUEUE_GROUP, KUEUE_VERSION = "kueue.x-k8s.io", "v1beta1"
WAITING = ("Unschedulable", "SchedulingGated")
NAME_MAX = 256
TEXT_MAX = 16_384

Obj = dict[str, Any]


def is_gpu(resource: str) -> bool:
    """A vendor's whole device, an NVIDIA MIG slice or an AMD partition (a time-sliced replica is no GPU)."""
    return resource in gpu_resources() or resource.startswith(MIG_PREFIX) or is_partition_resource(resource)


def gpus_of(spec: Obj, where: str) -> int:
    """GPUs a pod spec asks for: whole devices, MIG instances and partitions over its containers (init containers
    as the API server counts them)."""
    return sum(v for k, v in pod_requests(spec, where).items() if is_gpu(k))


def _gpu_quantity(value: Any, where: str) -> int:
    q = parse_quantity(value, what=where)
    return int(q.to_integral_value()) if q >= 0 else 0


def _meta(obj: Any, what: str) -> Obj:
    if not isinstance(obj, dict):
        raise ParseError(f"{what}: not an object but {type(obj).__name__}")
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or not meta.get("name"):
        raise ParseError(f"{what}: no metadata.name")
    return meta


def _key(meta: Obj) -> str:
    ns = meta.get("namespace")
    return f"{ns}/{meta['name']}" if ns else str(meta["name"])


def _event_time(ev: Obj) -> float:
    series = ev.get("series") or {}
    for value in (
        series.get("lastObservedTime"),
        ev.get("lastTimestamp"),
        ev.get("deprecatedLastTimestamp"),
        ev.get("eventTime"),
        (ev.get("metadata") or {}).get("creationTimestamp"),
    ):
        try:
            when = parse_time(value, "event time")
        except ParseError:
            continue
        if when is not None:
            return when
    return 0.0


def _condition(status: Obj, kind: str) -> Obj | None:
    for cond in status.get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == kind:
            return cond
    return None


@dataclass(slots=True)
class KubeObjects:
    """What the reader lists, as the API returns it (`items` of each List). None: not read (no Kueue)."""

    pods: list[Any]
    events: list[Any] = field(default_factory=list)
    cluster_queues: list[Any] | None = None
    local_queues: list[Any] | None = None
    workloads: list[Any] | None = None


@dataclass(slots=True)
class _Queue:
    use: QueueUse
    gpu_resources: bool  # covers nvidia.com/gpu or a MIG resource: a GPU queue even with nothing in it


def failed_scheduling(events: Iterable[Any]) -> dict[tuple[str, str], list[tuple[float, str, str]]]:
    """(namespace, pod) -> its FailedScheduling Events as (time, message, pod uid), latest first; core/v1 Events
    (`involvedObject`, `message`) and events.k8s.io/v1 (`regarding`, `note`) alike."""
    found: dict[tuple[str, str], list[tuple[float, str, str]]] = {}
    for ev in events:
        if not isinstance(ev, dict) or ev.get("reason") != "FailedScheduling":
            continue
        about = ev.get("involvedObject") or ev.get("regarding") or {}
        if not isinstance(about, dict) or about.get("kind", "Pod") != "Pod" or not about.get("name"):
            continue
        message = ev.get("message") or ev.get("note") or ""
        key = (str(about.get("namespace") or ""), str(about["name"]))
        found.setdefault(key, []).append((_event_time(ev), str(message), str(about.get("uid") or "")))
    for seen in found.values():
        seen.sort(key=lambda e: e[0], reverse=True)
    return found


def _local_queues(items: list[Any] | None, skipped: list[str]) -> dict[tuple[str, str], str]:
    out: dict[tuple[str, str], str] = {}
    for i, lq in enumerate(items or []):
        try:
            meta = _meta(lq, f"LocalQueue #{i}")
            cq = (lq.get("spec") or {}).get("clusterQueue")
            if not cq:
                raise ParseError(f"LocalQueue {_key(meta)}: no spec.clusterQueue")
            out[(str(meta.get("namespace") or ""), str(meta["name"]))] = str(cq)
        except ParseError as exc:
            skipped.append(exc.message)
    return out


def _counted(names: Iterable[str]) -> set[str]:
    """The resources a queue's GPUs are counted in: the whole-device resources it names (nvidia.com/gpu,
    amd.com/gpu, habana.ai/gaudi, added together), else its MIG or partition resources (whole devices and slices of
    them are not added together)."""
    gpu = {n for n in names if is_gpu(n)}
    whole = gpu & gpu_resources()
    return whole or gpu


def _cluster_queue(cq: Any, i: int) -> _Queue:
    meta = _meta(cq, f"ClusterQueue #{i}")
    name = str(meta["name"])
    spec, status = cq.get("spec") or {}, cq.get("status") or {}
    groups = spec.get("resourceGroups") or []
    flavors = [f for g in groups for f in g.get("flavors") or []]
    counted = _counted(str(res.get("name", "")) for f in flavors for res in f.get("resources") or [])
    quota = 0
    limits: list[int] = []
    unlimited = False
    for g, group in enumerate(groups):
        for f, flavor in enumerate(group.get("flavors") or []):
            for r, res in enumerate(flavor.get("resources") or []):
                if str(res.get("name", "")) not in counted:
                    continue
                where = f"ClusterQueue {name}: spec.resourceGroups[{g}].flavors[{f}].resources[{r}]"
                quota += _gpu_quantity(res.get("nominalQuota", 0), f"{where}.nominalQuota")
                if res.get("borrowingLimit") is None:
                    unlimited = True
                else:
                    limits.append(_gpu_quantity(res["borrowingLimit"], f"{where}.borrowingLimit"))
    # without a cohort there is nothing to borrow from; in one, a flavor with no limit may borrow all it finds
    borrowing = (None if unlimited else sum(limits)) if spec.get("cohort") else 0
    used = 0
    for f, flavor in enumerate(status.get("flavorsUsage") or []):
        for r, res in enumerate(flavor.get("resources") or []):
            if str(res.get("name", "")) in counted:
                where = f"ClusterQueue {name}: status.flavorsUsage[{f}].resources[{r}].total"
                used += _gpu_quantity(res.get("total", 0), where)
    covers = bool(counted)
    return _Queue(
        QueueUse(
            name=name[:NAME_MAX],
            gpus_used=used,
            quota=quota if covers else None,
            borrowing_limit=borrowing if covers else None,
            pending=max(0, int(status.get("pendingWorkloads") or 0)),
            running=max(0, int(status.get("admittedWorkloads") or 0)),
        ),
        covers,
    )


def _workload_pending(wl: Any, i: int, local: dict[tuple[str, str], str]) -> PendingWork | None:
    """A Workload Kueue has not admitted (no quota reserved, not finished), or None."""
    meta = _meta(wl, f"Workload #{i}")
    spec, status = wl.get("spec") or {}, wl.get("status") or {}
    finished, admitted = _condition(status, "Finished"), _condition(status, "Admitted")
    reserved = _condition(status, "QuotaReserved")
    if (finished or {}).get("status") == "True" or (admitted or {}).get("status") == "True" or status.get("admission"):
        return None
    where = f"Workload {_key(meta)}"
    gpus = 0
    for p, podset in enumerate(spec.get("podSets") or []):
        count = int(podset.get("count", 1))
        template = (podset.get("template") or {}).get("spec") or {}
        gpus += count * gpus_of(template, f"{where} spec.podSets[{p}].template")
    ns = str(meta.get("namespace") or "")
    queue = str(spec.get("queueName") or "")
    cond = reserved or {}
    since = parse_time(cond.get("lastTransitionTime"), f"{where} QuotaReserved.lastTransitionTime")
    if since is None:
        since = parse_time(meta.get("creationTimestamp"), f"{where} metadata.creationTimestamp")
    return PendingWork(
        name=str(meta["name"])[:NAME_MAX],
        queue=local.get((ns, queue), queue)[:NAME_MAX],
        namespace=ns[:NAME_MAX],
        gpus=gpus,
        since=since,
        reason=str(cond.get("reason") or "Pending")[:NAME_MAX],
        message=str(cond.get("message") or "")[:TEXT_MAX],
        priority=int(spec["priority"]) if isinstance(spec.get("priority"), int) else None,
    )


def scheduler_report(objs: KubeObjects, now: float) -> tuple[SchedulerReport, list[str]]:
    """The report, and why each object left out was left out."""
    skipped: list[str] = []
    kueue = objs.cluster_queues is not None
    local = _local_queues(objs.local_queues, skipped)
    queues: dict[str, _Queue] = {}
    for i, cq in enumerate(objs.cluster_queues or []):
        try:
            q = _cluster_queue(cq, i)
            queues[q.use.name] = q
        except (ParseError, TypeError, ValueError, AttributeError) as exc:
            skipped.append(_why(exc, _label(cq, "ClusterQueue", i)))
    events = failed_scheduling(objs.events)
    pending: list[PendingWork] = []
    for i, pod in enumerate(objs.pods):
        try:
            work = _pod(pod, i, kueue, local, events, queues, skip_gated=objs.workloads is not None)
        except (ParseError, TypeError, ValueError, AttributeError) as exc:
            skipped.append(_why(exc, _label(pod, "pod", i)))
            continue
        if work is not None:
            pending.append(work)
    for i, wl in enumerate(objs.workloads or []):
        try:
            work = _workload_pending(wl, i, local)
        except (ParseError, TypeError, ValueError, AttributeError) as exc:
            skipped.append(_why(exc, _label(wl, "Workload", i)))
            continue
        if work is not None:
            pending.append(work)
    for work in pending:
        waits_in = queues.get(work.queue)
        if waits_in is not None:
            waits_in.use.gpus_pending += work.gpus
            if not kueue:  # a ClusterQueue counts its pending Workloads itself
                waits_in.use.pending += 1
    uses = [q.use for _, q in sorted(queues.items()) if q.gpu_resources or q.use.gpus_pending or q.use.gpus_used]
    return SchedulerReport(manager=MANAGER, time=now, pending=pending, queues=uses), skipped


def _label(obj: Any, kind: str, i: int) -> str:
    """'pod ml/train-0', or 'pod #3' when the object has no name to go by."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if isinstance(meta, dict) and isinstance(meta.get("name"), str):
        return f"{kind} {_key(meta)}"
    return f"{kind} #{i}"


def _why(exc: Exception, what: str) -> str:
    """A parse error names the object and field already; anything else is a shape the API would not send."""
    if isinstance(exc, ParseError):
        return exc.message
    return f"{what}: malformed ({type(exc).__name__}: {exc})"


def _pod(
    pod: Any,
    i: int,
    kueue: bool,
    local: dict[tuple[str, str], str],
    events: dict[tuple[str, str], list[tuple[float, str, str]]],
    queues: dict[str, _Queue],
    *,
    skip_gated: bool,
) -> PendingWork | None:
    """A waiting pod as pending work; a bound one counted in its namespace's queue (without Kueue)."""
    meta = _meta(pod, f"pod #{i}")
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    ns, name = str(meta.get("namespace") or "default"), str(meta["name"])
    where = f"pod {ns}/{name}"
    phase = status.get("phase", "Pending")
    if phase in ("Succeeded", "Failed"):
        return None
    gpus = gpus_of(spec, where)
    labels = meta.get("labels") or {}
    lq = str(labels.get(QUEUE_LABEL) or "")
    queue = local.get((ns, lq), lq) if kueue else ns
    if spec.get("nodeName"):
        if not kueue and gpus:  # Kueue counts what its queues admitted itself
            q = queues.setdefault(queue, _Queue(QueueUse(name=queue[:NAME_MAX]), False))
            q.use.gpus_used += gpus
            q.use.running += 1
        return None
    cond = _condition(status, "PodScheduled")
    if cond is None or cond.get("status") != "False" or cond.get("reason") not in WAITING:
        return None  # not looked at yet, or bound a moment ago
    if not gpus and not lq:
        return None  # CPU work outside any queue is not this view's business
    gates = {g.get("name") for g in spec.get("schedulingGates") or [] if isinstance(g, dict)}
    if skip_gated and KUEUE_GATE in gates:
        return None  # its Workload stands for it
    if not kueue:
        queues.setdefault(queue, _Queue(QueueUse(name=queue[:NAME_MAX]), False))
    message = str(cond.get("message") or "")
    uid = str(meta.get("uid") or "")
    if cond.get("reason") == "Unschedulable":
        # the latest attempt's words (the condition keeps the first), never those about an earlier pod of the name
        ours = [e for e in events.get((ns, name), ()) if not e[2] or not uid or e[2] == uid]
        if ours and ours[0][1]:
            message = ours[0][1]
    since = parse_time(cond.get("lastTransitionTime"), f"{where} PodScheduled.lastTransitionTime")
    if since is None:
        since = parse_time(meta.get("creationTimestamp"), f"{where} metadata.creationTimestamp")
    priority = spec.get("priority")
    return PendingWork(
        name=name[:NAME_MAX],
        queue=queue[:NAME_MAX],
        namespace=ns[:NAME_MAX],
        gpus=gpus,
        since=since,
        reason=str(cond.get("reason")),
        message=message[:TEXT_MAX],
        priority=priority if isinstance(priority, int) else None,
    )


# --- reading the API ---------------------------------------------------------------------------------------------


class KubernetesQueueReader:
    """Lists pods, FailedScheduling Events and (when installed) Kueue's queues and Workloads through the official
    client, and builds the report. Objects it cannot read are logged once each and left out."""

    def __init__(
        self, core: Any, custom: Any | None = None, *, kueue: bool = True, clock: Callable[[], float] = time.time
    ) -> None:
        self.core = core
        self.custom = custom
        self.kueue = kueue
        self.clock = clock
        self._said: set[str] = set()

    @classmethod
    def connect(
        cls, kubeconfig: str | None = None, context: str | None = None, in_cluster: bool | None = None
    ) -> KubernetesQueueReader:
        core = connect(kubeconfig, context, in_cluster)
        return cls(core, kubernetes_module().client.CustomObjectsApi(core.api_client))

    def _items(self, what: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> list[Any]:
        try:
            answer = call(*args, **kwargs)
        except Exception as exc:  # the client's ApiException, or the connection's own errors
            status = getattr(exc, "status", None)
            raise BackendError(
                f"listing {what} failed: {status or ''} {getattr(exc, 'reason', None) or exc}".replace("  ", " "),
                fix="check the agent's credentials may list pods and events in every namespace",
            ) from None
        if hasattr(answer, "data"):  # _preload_content=False: the API's own JSON, not the client's models
            answer = json.loads(answer.data)
        items = answer.get("items") if isinstance(answer, dict) else None
        if not isinstance(items, list):
            raise BackendError(f"listing {what}: the answer has no items list")
        return items

    def _kueue(self, plural: str) -> list[Any] | None:
        """A Kueue List, or None when Kueue is not installed (or this agent may not read it: said once)."""
        if self.custom is None or not self.kueue:
            return None
        try:
            answer = self.custom.list_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, plural)
        except Exception as exc:
            status = getattr(exc, "status", None)
            if status != 404:
                self._say(f"cannot list Kueue {plural}: {status or ''} {getattr(exc, 'reason', None) or exc}")
            return None
        items = answer.get("items") if isinstance(answer, dict) else None
        return items if isinstance(items, list) else None

    def _say(self, message: str) -> None:
        if message not in self._said and len(self._said) < 10_000:
            self._said.add(message)
            log.warning("kubernetes scheduler view: %s", message)

    def objects(self) -> KubeObjects:
        pods = self._items(
            "pods",
            self.core.list_pod_for_all_namespaces,
            field_selector="status.phase!=Succeeded,status.phase!=Failed",
            _preload_content=False,
        )
        events = self._items(
            "events",
            self.core.list_event_for_all_namespaces,
            field_selector="reason=FailedScheduling",
            _preload_content=False,
        )
        cqs = self._kueue("clusterqueues")
        return KubeObjects(
            pods=pods,
            events=events,
            cluster_queues=cqs,
            local_queues=self._kueue("localqueues") if cqs is not None else None,
            workloads=self._kueue("workloads") if cqs is not None else None,
        )

    def read(self) -> SchedulerReport:
        report, skipped = scheduler_report(self.objects(), self.clock())
        for why in skipped:
            self._say(f"skipped {why}")
        return report
