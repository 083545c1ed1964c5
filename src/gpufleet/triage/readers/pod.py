"""Kubernetes pods as kubectl prints them: `kubectl get pod NAME -o json` (a Pod, or a List of them), judged for why
their containers stopped, with host memory and GPU memory kept apart.

- Every container, init container and ephemeral container status: the current `state.terminated` and the previous
  run's `lastState.terminated` (reason, exit code, signal, finishedAt, message), restarts, and a waiting reason; the
  spec gives each container's `resources.limits.memory` and its GPUs (nvidia.com/gpu, MIG slices, other vendors').
- `OOMKilled` is the kernel's OOM killer at the container's memory limit: host memory, never the GPU's (critical,
  `host-oom`). A termination message (terminationMessagePath, or the log's tail under FallbackToLogsOnError) holding
  a CUDA out of memory is the GPU's own memory (critical, `gpu-oom`), whatever the exit code (usually 1).
- Exit code 137 (128 + 9) without `OOMKilled` is a SIGKILL from outside: an eviction, a preemption, a liveness probe
  or a delete past its grace period, or an OOM kill the runtime did not record (a warning, `sigkill`). 139 is a
  segmentation fault, 134 an abort, 143 a SIGTERM (a normal stop); any other non-zero exit is the program's error.
- A pod `Evicted` by the kubelet for memory is host memory pressure on the node; a failed admission (the device
  plugin could not allocate GPUs) means the pod never got its GPUs.
- A waiting or terminated message that holds a driver/CUDA setup error (the container toolkit refusing a
  `cuda>=12.8` image, a driver/library mismatch, no kernel image for the GPU) is that error, with its cause and fix
  (readers/setup.py), whatever the exit code.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from gpufleet.errors import ParseError
from gpufleet.model import Severity
from gpufleet.triage.readers.common import MAX_FINDINGS, bounded_text
from gpufleet.triage.readers.kube_json import CUT, load_json
from gpufleet.triage.readers.oom import GPU_OOM, HOST_OOM, SIGKILL, describe_gpu_oom, parse_gpu_oom
from gpufleet.triage.readers.setup import SetupErrors
from gpufleet.triage.report import TriageFinding, TriageReport

MAX_PODS = 5_000
MAX_CONTAINERS = 100  # per pod, of each kind
GPU_RESOURCE = re.compile(
    r"^(?:nvidia\.com/(?:gpu(?:\.shared)?|mig-.+)|amd\.com/gpu|gpu\.intel\.com/.+|habana\.ai/gaudi|aws\.amazon\.com/neuron\w*)$"
)
SIGNALS = {6: ("sigabrt", "SIGABRT: the program aborted itself (an assertion, a C++ exception, a CUDA library abort)"),
           9: (SIGKILL, ""), 11: ("sigsegv", "SIGSEGV: a segmentation fault (a native extension, a driver or "
                                  "library mismatch, /dev/shm too small for the data loader)"),
           15: ("sigterm", "SIGTERM: told to stop (a rollout, a delete, an eviction, a preemption)")}  # fmt: skip
BAD_WAITING = frozenset({"CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "CreateContainerConfigError",
                         "CreateContainerError", "InvalidImageName", "RunContainerError"})  # fmt: skip
Add = Callable[[Severity, str, str, str, str, list[str]], None]  # severity, entity, code, message, fix, evidence


@dataclass
class Termination:
    run: str  # "current" or "previous"
    reason: str
    exit_code: int | None
    signal: int | None
    finished_at: str
    message: str
    line: str


@dataclass
class ContainerView:
    name: str
    kind: str  # container, init container, ephemeral container
    memory_limit: str = ""
    gpus: dict[str, str] = field(default_factory=dict)
    restarts: int = 0
    terminations: list[Termination] = field(default_factory=list)
    waiting: tuple[str, str] | None = None


@dataclass
class PodView:
    name: str = ""
    namespace: str = ""
    node: str = ""
    phase: str = ""
    reason: str = ""
    message: str = ""
    qos: str = ""
    containers: list[ContainerView] = field(default_factory=list)
    has_status: bool = False
    complete: bool = True


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _l(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _s(value: Any, limit: int = 200) -> str:
    return value[:limit] if isinstance(value, str) else "" if value is None else str(value)[:limit]


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _cut(*parts: Any) -> bool:
    return any(isinstance(part, dict | list) and CUT in part for part in parts)


def _termination(run: str, state: Any) -> Termination | None:
    t = _d(_d(state).get("terminated"))
    if not t:
        return None
    shown = {k: v for k, v in t.items() if k not in ("message", "containerID") and k != CUT}
    reason, finished, message = _s(t.get("reason")), _s(t.get("finishedAt")), _s(t.get("message"), 4096)
    return Termination(run, reason, _int(t.get("exitCode")), _int(t.get("signal")), finished, message,
                       json.dumps(shown, sort_keys=True))  # fmt: skip


def _pod_from_json(obj: dict[str, Any]) -> PodView:
    metadata, spec, status = _d(obj.get("metadata")), _d(obj.get("spec")), _d(obj.get("status"))
    pod = PodView(_s(metadata.get("name"), 253), _s(metadata.get("namespace"), 63), _s(spec.get("nodeName"), 253),
                  _s(status.get("phase")), _s(status.get("reason")), _s(status.get("message"), 1000),
                  _s(status.get("qosClass")), has_status=bool(status))  # fmt: skip
    pod.complete = not _cut(obj, metadata, spec, status)
    for kind, specs_key in (("init container", "initContainers"), ("container", "containers"),
                            ("ephemeral container", "ephemeralContainers")):  # fmt: skip
        statuses_key = specs_key[:-1] + "Statuses"  # initContainers -> initContainerStatuses
        specs, statuses = spec.get(specs_key), status.get(statuses_key)
        pod.complete = pod.complete and not _cut(specs, statuses)
        by_name: dict[str, ContainerView] = {}
        for item in _l(specs)[:MAX_CONTAINERS]:
            c = _d(item)
            limits = _d(_d(c.get("resources")).get("limits"))
            view = ContainerView(_s(c.get("name"), 253), kind, _s(limits.get("memory"), 40))
            view.gpus = {str(k): _s(v, 40) for k, v in limits.items() if GPU_RESOURCE.match(str(k))}
            by_name[view.name] = view
            pod.containers.append(view)
        for item in _l(statuses)[:MAX_CONTAINERS]:
            s = _d(item)
            name = _s(s.get("name"), 253)
            if name not in by_name:  # a status whose spec is not in the input
                by_name[name] = ContainerView(name, kind)
                pod.containers.append(by_name[name])
            view = by_name[name]
            view.restarts = _int(s.get("restartCount")) or 0
            for run, key in (("current", "state"), ("previous", "lastState")):
                if (t := _termination(run, s.get(key))) is not None:
                    view.terminations.append(t)
            waiting = _d(_d(s.get("state")).get("waiting"))
            if waiting.get("reason"):
                view.waiting = (_s(waiting.get("reason")), _s(waiting.get("message"), 500))
    return pod


# ---------------------------------------------------------------- judgement


def _judge(pod: PodView, report: TriageReport) -> None:
    name = pod.name or "pod"

    def add(severity: Severity, entity: str, code: str, message: str, fix: str, evidence: list[str]) -> None:
        report.findings.append(TriageFinding("pod", severity, message, entity, code, fix, [e for e in evidence if e]))

    _judge_pod_status(pod, add)
    for c in pod.containers:
        for t in c.terminations:
            _judge_termination(pod, c, t, add)
        if c.waiting and c.waiting[0] in BAD_WAITING and not c.terminations:
            reason, message = c.waiting
            add(Severity.warning, f"pod {name} container {c.name}", reason,
                f"{c.kind} {c.name} of pod {name} is waiting: "
                f"{reason}{f' ({message})' if message else ''}", "read `kubectl describe pod` events and "
                f"`kubectl logs --previous -c {c.name}`", [f'"waiting": {{"reason": "{reason}"}}'])  # fmt: skip
    described = []
    for c in pod.containers:
        parts = [f"{c.memory_limit} memory limit" if c.memory_limit else "no memory limit"]
        parts += [f"{count} {resource}" for resource, count in c.gpus.items()]
        if c.restarts:
            parts.append(f"{c.restarts} restart(s)")
        if c.waiting:
            parts.append(f"waiting: {c.waiting[0]}")
        described.append(f"{c.name} ({', '.join(parts)})")
    where = ", ".join(part for part in (pod.namespace, pod.node and f"node {pod.node}", pod.qos and f"QoS {pod.qos}")
                      if part)  # fmt: skip
    report.notes.append(f"pod {name}{f' ({where})' if where else ''}: {'; '.join(described) or 'no containers'}")


def _judge_pod_status(pod: PodView, add: Add) -> None:
    name = pod.name or "pod"
    why = f": {pod.message}" if pod.message else ""
    line = json.dumps({"phase": pod.phase, "reason": pod.reason, "message": pod.message[:300]})
    if pod.reason == "Evicted":
        memory = re.search(r"\bmemory\b", pod.message, re.IGNORECASE)
        cause = "the node was low on host memory (not GPU memory)" if memory else "the node was short of a resource"
        add(Severity.critical, f"pod {name}", "evicted", f"pod {name} was evicted by the kubelet: {cause}{why}",
            "set memory requests close to what the pod really uses (pods above their requests are evicted first) "
            "or move it to a node with more memory" if memory else "free the resource on the node", [line])  # fmt: skip
    elif pod.reason == "UnexpectedAdmissionError" or pod.reason.startswith("OutOf"):
        gpu = re.search(r"gpu|nvidia|device", f"{pod.reason} {pod.message}", re.IGNORECASE)
        add(Severity.critical, f"pod {name}", pod.reason, f"pod {name} failed admission on its node{why}"
            + (": the device plugin could not give it its GPUs" if gpu else ""),
            "check the node's device plugin and GPUs (triage its `kubectl get node -o json` and `dmesg`), then "
            "recreate the pod" if gpu else "recreate the pod on a node with room", [line])  # fmt: skip
    elif pod.phase == "Failed" and pod.reason:
        add(Severity.warning, f"pod {name}", pod.reason, f"pod {name} failed: {pod.reason}{why}", "", [line])


def _judge_termination(pod: PodView, c: ContainerView, t: Termination, add: Add) -> None:
    name = pod.name or "pod"
    who = f"{c.kind} {c.name} of pod {name}"
    entity = f"pod {name} container {c.name}"
    when = (f" at {t.finished_at}" if t.finished_at else "") + (" (its previous run)" if t.run == "previous" else "")
    gpus = ", ".join(f"{count} {resource}" for resource, count in c.gpus.items())
    limit = f"its {c.memory_limit} memory limit" if c.memory_limit else "no memory limit of its own"
    if t.reason == "OOMKilled":
        if c.memory_limit:
            message = f"{who} was killed by the kernel's OOM killer at {limit}{when} (host memory, not GPU memory"
            fix = (f"raise resources.limits.memory above {c.memory_limit} (and the request with it), or cut what the "
                   "container keeps in host RAM: DataLoader workers (each holds a copy of the dataset's in-RAM state), "
                   "pinned-memory buffers, checkpoints loaded into RAM, a leak")  # fmt: skip
        else:
            message = f"{who} was killed by the kernel's OOM killer with {limit}{when}: the node ran out (host memory"
            fix = "give the container memory requests and limits sized to its use; look at the node's other pods"
        message += f"; its {gpus} are not involved)" if gpus else ")"
        add(Severity.critical, entity, HOST_OOM, message, fix, [t.line])
    ooms = [oom for text in t.message.splitlines()[-200:] if (oom := parse_gpu_oom(text.replace("**", "")))]
    if ooms:
        oom = max(ooms, key=lambda o: o.richness)
        summary, fix = describe_gpu_oom(oom)
        add(Severity.critical, entity, GPU_OOM,
            f"{who} failed{when} with {summary} (GPU memory, not the container's memory "
            f"limit: {limit})", fix, [oom.line[:500], t.line])  # fmt: skip
    if t.reason == "OOMKilled" or ooms:
        return
    code = t.exit_code
    signal = t.signal or (code - 128 if code is not None and 128 < code < 160 else None)
    if signal == 9:
        add(Severity.warning, entity, SIGKILL,
            f"{who} was killed with SIGKILL (exit code {code}, reason {t.reason or '-'})"
            f"{when} and not marked OOMKilled: a kill from outside (an eviction, a preemption, a failed liveness "
            "probe, a delete past its grace period) or an OOM kill the runtime did not record",
            "read the pod's events (`kubectl describe pod`) and the node's kernel log around that time: "
            "`Killed process` there means the OOM killer (host memory)", [t.line])  # fmt: skip
    elif signal:
        code_name, meaning = SIGNALS.get(signal, (f"signal {signal}", f"signal {signal}"))
        severity: Severity = Severity.info if signal == 15 else Severity.warning
        add(severity, entity, code_name, f"{who} stopped on {meaning} (exit code {code}){when}",
            f"read `kubectl logs --previous -c {c.name}`", [t.line])  # fmt: skip
    elif code:
        said = next((text.strip() for text in reversed(t.message.splitlines()) if text.strip()), "")
        add(Severity.warning, entity, f"exit {code}",
            f"{who} exited with code {code} ({t.reason or 'no reason given'}){when}"
            + (f": {said[:300]}" if said else ""), f"read `kubectl logs --previous -c {c.name}`", [t.line])  # fmt: skip


def _setup_errors(objects: list[dict[str, Any]], report: TriageReport) -> None:
    """The setup errors (readers/setup.py) in the containers' waiting and terminated messages: a container the NVIDIA
    container toolkit would not start says why there (`nvidia-container-cli: requirement error: ...`)."""
    setup = SetupErrors(numbered=False)
    count = 0
    for obj in objects:
        name = _s(_d(obj.get("metadata")).get("name"), 253) or "pod"
        status = _d(obj.get("status"))
        for key in ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses"):
            for item in _l(status.get(key))[:MAX_CONTAINERS]:
                s = _d(item)
                entity = f"pod {name} container {_s(s.get('name'), 253)}"
                for state_key in ("state", "lastState"):
                    for kind in ("waiting", "terminated"):
                        for line in _s(_d(_d(s.get(state_key)).get(kind)).get("message"), 8192).splitlines():
                            count += 1
                            setup.feed(count, line, entity)
    setup.into(report)


# ---------------------------------------------------------------- reading


def _is_pod(obj: dict[str, Any]) -> bool:
    """A Pod, or a Pod's fields without its kind (a copy from another tool's document)."""
    if obj.get("kind") is not None:
        return obj.get("kind") == "Pod"
    return "containers" in _d(obj.get("spec")) or "containerStatuses" in _d(obj.get("status"))


def read_kubectl_pod_json(lines: Iterable[str], source: str) -> TriageReport:
    """`kubectl get pod NAME -o json`, or `kubectl get pods -o json` (a List)."""
    report = TriageReport("kubectl-pod-json", source)
    value = load_json(bounded_text(lines, report), report, "Pod")
    if not isinstance(value, dict):
        raise ParseError("the JSON is not an object", fix="give the output of `kubectl get pod NAME -o json`")
    if _is_pod(value):
        objects = [value]
    elif value.get("kind") in ("List", "PodList") or isinstance(value.get("items"), list):
        items = [i for i in _l(value.get("items")) if isinstance(i, dict)]
        objects = [i for i in items if _is_pod(i)]
        if len(items) > len(objects):
            report.notes.append(f"{len(items) - len(objects)} item(s) of another kind left out")
    else:
        raise ParseError(f"the JSON is a {_s(value.get('kind')) or 'object without a kind'}, not a Pod")
    if not objects:
        report.judged = False
        report.notes.append("no Pod in the input")
        return report
    pods = [_pod_from_json(obj) for obj in objects[:MAX_PODS]]
    for pod in pods:
        report.complete = report.complete and pod.complete
        _judge(pod, report)
    _setup_errors(objects[:MAX_PODS], report)
    if not any(pod.has_status for pod in pods):
        report.judged = False
        report.notes.append("no pod status in the input: nothing says how its containers ran")
    if len(objects) > MAX_PODS:
        report.notes.append(f"{len(objects) - MAX_PODS} more pod(s) not judged")
    if len(report.findings) > MAX_FINDINGS:
        report.findings = report.ordered()  # the worst are kept
        report.notes.append(f"{len(report.findings) - MAX_FINDINGS} more finding(s) not listed")
        del report.findings[MAX_FINDINGS:]
    return report
