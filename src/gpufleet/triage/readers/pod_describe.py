"""`kubectl describe pod` (kubectl's pkg/describe DescribePod, the same layout since 1.9): the pod's status, each
container's state, last state, restarts and limits, and its Events, judged for why it does not run.

The containers are judged as `kubectl get pod -o json` is (triage.readers.pod: OOMKilled is host memory, a CUDA out of
memory in the termination message the GPU's, exit codes and signals, a waiting reason such as ErrImagePull or
CrashLoopBackOff). The Events add what only they say:

- `FailedScheduling` (the scheduler): its message `0/N nodes are available: <count> <reason>, ...` names why each
  node was filtered out (kube-scheduler's filter plugins): `Insufficient nvidia.com/gpu` (NodeResourcesFit: no node
  has that many unallocated GPUs; nodes whose device plugin marked GPUs unhealthy advertise fewer), `had
  untolerated taint {key: value}` or, before 1.25, `had taint {...}, that the pod didn't tolerate` (TaintToleration),
  `didn't match Pod's node affinity/selector` (NodeAffinity). The pod waits: degraded, each reason with its action.
- `UnexpectedAdmissionError` / `Allocate failed` (the kubelet's device manager could not allocate the device
  plugin's GPUs): faulty, as in the JSON reader.
- `Failed` / `BackOff` on pulling an image (`ErrImagePull`, `ImagePullBackOff`), `FailedMount`,
  `FailedCreatePodSandBox`, `BackOff` restarting a failed container: degraded.

A container that cannot start because of its GPU setup says why in the runtime's words, in a `Failed` event or the
container's StartError message, often on a line of its own (`nvidia-container-cli: requirement error: unsatisfied
condition: cuda>=12.8, ...`, `... nvml error: driver/library version mismatch`): every line is read for those
(readers/setup.py), one finding per fault.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from dataclasses import dataclass

from gpufleet.errors import ParseError
from gpufleet.model import Severity
from gpufleet.triage.readers.common import MAX_FINDINGS, bounded_lines
from gpufleet.triage.readers.pod import GPU_RESOURCE, ContainerView, PodView, Termination, _judge
from gpufleet.triage.readers.setup import SetupErrors
from gpufleet.triage.report import TriageFinding, TriageReport

MAX_EVENTS = 500
_TOP = re.compile(r"^(?P<key>[A-Z][\w -]{0,40}):(?:\s+(?P<value>.*?))?\s*$")
_FIELD = re.compile(r"^(?P<indent>\s+)(?P<key>[A-Za-z][\w ./-]{0,250}?):(?:\s+(?P<value>.*?))?\s*$")
_EVENT = re.compile(r"^\s+(?P<type>Normal|Warning)\s+(?P<reason>\w+)\s+(?P<age>\S+(?: \(x\d+ over \S+\))?)\s+"
                    r"(?P<from>\S+(?:, \S+)?)\s+(?P<message>.*?)\s*$")  # fmt: skip
_AVAILABLE = re.compile(r"(?P<free>\d+)/(?P<total>\d+) nodes are available:\s*(?P<reasons>.*)")
_REASON = re.compile(r"(?P<count>\d+) (?P<why>.+)")
_TAINT = re.compile(r"taint \{(?P<key>[^:}]+):?\s*(?P<value>[^}]*)\}")


@dataclass
class Event:
    type: str
    reason: str
    source: str
    message: str
    line: str


def _schedule_fix(why: str) -> tuple[str, str]:
    """(code, fix) for one of the scheduler's reasons."""
    if re.search(r"Insufficient (?:nvidia\.com/(?:gpu|mig)|amd\.com/gpu|habana)", why):
        resource = why.split("Insufficient", 1)[1].strip()
        return f"Insufficient {resource}", (
            f"no node has that many unallocated {resource}: compare allocatable with capacity on the GPU nodes "
            "(`kubectl describe node`; allocatable below capacity means the device plugin marked GPUs unhealthy, "
            "none at all that the device plugin is not running), free GPUs held by other pods, or ask for fewer"
        )
    if "Insufficient" in why:
        return why.strip(), "free the resource on the nodes or lower the pod's request"
    if m := _TAINT.search(why):
        key = m.group("key").strip()
        return f"untolerated taint {key}", (
            f"the nodes carry the taint {key}: add a matching toleration to the pod, or, if a GPU health check set it, "
            "repair the node (its conditions say why) rather than tolerate it"
        )
    if "affinity" in why or "selector" in why:
        return "node affinity/selector", (
            "no node has the labels the pod's nodeSelector/affinity asks for: check the GPU labels (GPU feature "
            "discovery's nvidia.com/gpu.present, .product) on the nodes and the pod's selector"
        )
    if re.search(r"persistentvolumeclaim", why, re.IGNORECASE):
        return "unbound PersistentVolumeClaim", (
            "the pod's PersistentVolumeClaim is missing or not bound: create it, or fix the claim's volumeName / "
            "storage class (`kubectl get pvc`, `kubectl describe pvc`)"
        )
    if "unschedulable" in why:
        return "nodes unschedulable", "the nodes are cordoned: uncordon one once it is fit (`kubectl uncordon`)"
    if "port" in why:
        return "host port in use", "free the host port or drop hostPort from the pod"
    return why.strip()[:80], "read the scheduler's reason and fix what it names"


class DescribePodParser:
    def __init__(self) -> None:
        self.pods: list[tuple[PodView, list[Event]]] = []
        self.conditions: list[dict[str, str]] = []  # per pod: condition type -> its line ("PodScheduled   False")
        self.section = ""
        self.container: ContainerView | None = None
        self.state = ""  # "current" or "previous": the container's State or Last State block
        self.term: dict[str, str] = {}
        self.term_lines: list[str] = []
        self.resource_block = ""

    @property
    def pod(self) -> PodView:
        if not self.pods:
            self._new(PodView(complete=False))
        return self.pods[-1][0]

    def _new(self, pod: PodView) -> None:
        self.pods.append((pod, []))
        self.conditions.append({})

    def feed(self, raw: str) -> None:
        line = (html.unescape(raw) if "&" in raw else raw).rstrip()
        if not line.strip():
            return
        if not line[0].isspace() and (m := _TOP.match(line)):
            self._flush_state()
            key, value = m.group("key"), m.group("value") or ""
            self._top(key, value)
            return
        if self.section == "Events":
            self._event(line)
        elif self.section in ("Containers", "Init Containers"):
            self._container(line)
        elif self.section == "Conditions" and (m := re.match(r"^\s+(\w+)\s+(True|False|Unknown)\s*$", line)):
            self.conditions[-1][m.group(1)] = line.strip()

    def _top(self, key: str, value: str) -> None:
        if key == "Name" and (not self.pods or self.pod.name):
            self._new(PodView(name=value[:253], complete=False))
        pod = self.pod
        self.section, self.container = key, None
        if key == "Name":
            pod.name = value[:253]
        elif key == "Namespace":
            pod.namespace = value[:63]
        elif key == "Node":
            pod.node = "" if value == "<none>" else value.split("/")[0][:253]
        elif key == "Status":
            pod.phase, pod.has_status = value, True
        elif key == "Reason":
            pod.reason = value
        elif key == "Message":
            pod.message = value[:1000]
        elif key == "QoS Class":
            pod.qos = value
        elif key in ("Events", "Volumes", "Tolerations", "Conditions"):
            pod.complete = pod.complete or key == "Events"

    def _container(self, line: str) -> None:
        m = _FIELD.match(line)
        if m is None:
            return
        indent, key, value = len(m.group("indent")), m.group("key"), m.group("value") or ""
        if indent <= 2 and not value:
            self._flush_state()
            kind = "init container" if self.section == "Init Containers" else "container"
            self.container = ContainerView(key[:253], kind)
            self.pod.containers.append(self.container)
            return
        c = self.container
        if c is None:
            return
        if indent <= 4:
            self._flush_state()
            self.resource_block = key if key in ("Limits", "Requests") else ""
            if key in ("State", "Last State"):
                self.state = "current" if key == "State" else "previous"
                self.term = {"state": value}
                self.term_lines = [line.strip()]
            elif key == "Restart Count" and value.isdigit():
                c.restarts = int(value)
            return
        if self.state:
            self.term[key] = value
            self.term_lines.append(line.strip())
        elif self.resource_block == "Limits":
            if key == "memory":
                c.memory_limit = value[:40]
            elif GPU_RESOURCE.match(key):
                c.gpus[key] = value[:40]

    def _flush_state(self) -> None:
        c, t = self.container, self.term
        if c is not None and self.state and t:
            if t.get("state") == "Terminated":
                code = t.get("Exit Code", "")
                signal = t.get("Signal", "")
                exit_code = int(code) if code.lstrip("-").isdigit() else None
                shown = "; ".join(self.term_lines)[:500]
                c.terminations.append(
                    Termination(self.state, t.get("Reason", ""), exit_code, int(signal) if signal.isdigit() else None,
                                t.get("Finished", ""), t.get("Message", "")[:4096], shown)
                )  # fmt: skip
            elif t.get("state") == "Waiting" and self.state == "current" and t.get("Reason"):
                c.waiting = (t["Reason"], t.get("Message", "")[:500])
        self.state, self.term, self.term_lines = "", {}, []

    def _event(self, line: str) -> None:
        events = self.pods[-1][1] if self.pods else None
        if events is None or len(events) >= MAX_EVENTS:
            return
        if m := _EVENT.match(line):
            events.append(Event(m.group("type"), m.group("reason"), m.group("from"), m.group("message"), line.strip()))
        elif events and line.startswith(" " * 4) and not line.strip().startswith("----"):
            last = events[-1]  # a message wrapped onto the next line
            last.message = f"{last.message} {line.strip()}"[:2000]


def _judge_events(pod: PodView, events: list[Event], conditions: dict[str, str], report: TriageReport) -> None:
    name = pod.name or "the pod"
    entity = f"pod {pod.name}" if pod.name else "the pod"
    seen: set[str] = set()

    def add(severity: Severity, code: str, message: str, fix: str, line: str) -> None:
        if code in seen:
            return
        seen.add(code)
        report.findings.append(TriageFinding("pod-event", severity, message, entity, code, fix, [line]))

    for e in events:
        if e.reason == "FailedScheduling":
            m = _AVAILABLE.search(e.message)
            said = re.split(r"\.?\s*preemption:", m.group("reasons"))[0] if m else ""  # the preemption part
            reasons = [r.strip().rstrip(".") for r in re.split(r",\s*(?=\d+ )", said) if r.strip()]
            if not reasons:
                add(Severity.warning, "FailedScheduling", f"{entity} cannot be scheduled: {e.message[:300]}",
                    "read the scheduler's message", e.line)  # fmt: skip
            for reason in reasons:
                rm = _REASON.match(reason)
                why = rm.group("why") if rm else reason
                code, fix = _schedule_fix(why)
                nodes = f"{rm.group('count')} node(s)" if rm else "nodes"
                add(Severity.warning, f"FailedScheduling: {code}",
                    f"{entity} is Pending: the scheduler found no node for it ({m.group('free') if m else '0'}/"
                    f"{m.group('total') if m else '?'} available); {nodes}: {why}", fix, e.line)  # fmt: skip
        elif e.reason == "UnexpectedAdmissionError" or "Allocate failed" in e.message:
            add(Severity.critical, "UnexpectedAdmissionError",
                f"pod {name} failed admission: the kubelet could not allocate its devices ({e.message[:300]})",
                "check the node's device plugin and GPUs (its log, `nvidia-smi`, `dmesg` for Xid), then recreate the "
                "pod", e.line)  # fmt: skip
        elif e.type == "Warning" and re.search(r"ErrImagePull|ImagePullBackOff|Failed to pull image", e.message):
            add(Severity.warning, "ErrImagePull", f"pod {name} cannot pull its image: {e.message[:300]}",
                "check the image name and tag, the registry's reachability and the pull secret", e.line)  # fmt: skip
        elif e.type == "Warning" and e.reason in ("FailedMount", "FailedAttachVolume", "FailedCreatePodSandBox"):
            add(
                Severity.warning,
                e.reason,
                f"pod {name}: {e.reason}: {e.message[:300]}",
                "read the message: a missing volume or secret, or the node's network plugin (sandbox)",
                e.line,
            )
        elif e.type == "Warning" and e.reason == "BackOff" and "restarting failed container" in e.message:
            add(Severity.warning, "CrashLoopBackOff", f"pod {name}: {e.message[:300]}",
                "read `kubectl logs --previous` of the container for why it exits", e.line)  # fmt: skip


def _unscheduled(pod: PodView, events: list[Event], conditions: dict[str, str], report: TriageReport) -> None:
    """Pending and not scheduled (PodScheduled False) with no FailedScheduling event in the input to say why."""
    line = conditions.get("PodScheduled", "")
    if line.split()[1:2] != ["False"] or any(e.reason == "FailedScheduling" for e in events):
        return
    entity = f"pod {pod.name}" if pod.name else "the pod"
    gpus = sorted({r for c in pod.containers for r in c.gpus})
    report.findings.append(
        TriageFinding(
            "pod-event",
            Severity.warning,
            f"{entity} is {pod.phase or 'Pending'} and not scheduled (PodScheduled False); the scheduler's reason "
            "(its FailedScheduling event) is not in the input" + (f"; it asks for {', '.join(gpus)}" if gpus else ""),
            entity,
            "not scheduled",
            "read the pod's events (`kubectl get events --field-selector involvedObject.name=<pod>`); for GPU pods "
            "compare the GPU nodes' allocatable nvidia.com/gpu with their capacity (`kubectl describe node`)",
            [line],
        )
    )


def read_kubectl_describe_pod(lines: Iterable[str], source: str) -> TriageReport:
    """`kubectl describe pod NAME` or `kubectl describe pods` (one pod after another)."""
    report = TriageReport("kubectl-describe-pod", source)
    parser = DescribePodParser()
    setup = SetupErrors()
    for number, line in enumerate(bounded_lines(lines, report), start=1):
        parser.feed(line)
        setup.feed(number, line, f"pod {parser.pods[-1][0].name}" if parser.pods and parser.pods[-1][0].name else "")
    parser._flush_state()
    pods = [(p, e, c) for (p, e), c in zip(parser.pods, parser.conditions, strict=True) if p.name or p.containers or e]
    if not pods:
        raise ParseError("no pod in the input", fix="give the output of `kubectl describe pod NAME`")
    for pod, events, conditions in pods:
        _judge(pod, report)
        _judge_events(pod, events, conditions, report)
        _unscheduled(pod, events, conditions, report)
        if not pod.complete:
            report.complete = False
            report.notes.append(f"{pod.name or 'pod'}: the text ends before its Events: later sections unread")
        if not pod.has_status and not events:
            report.judged = False
    setup.into(report)
    if len(report.findings) > MAX_FINDINGS:
        del report.findings[MAX_FINDINGS:]
    return report


# ---------------------------------------------------------------- kubectl get events / kubectl events

# a row without its header (an excerpt): [LAST SEEN] TYPE REASON KIND/NAME MESSAGE
_EVENT_ROW = re.compile(
    r"^(?:(?:\S+\s+)?\S+(?: \(x\d+ over \S+\))?\s+)?(?P<type>Normal|Warning)\s+(?P<reason>[A-Z]\w+)\s+"
    r"(?P<object>[A-Za-z]+/\S+)\s+(?P<message>\S.*?)\s*$"
)
_EVENTS_HEADER = re.compile(r"^(?=.*\bTYPE\b)(?=.*\bREASON\b)(?=.*\bMESSAGE\b)(?=.*\b(?:OBJECT|NAME)\b)[A-Z][A-Z ]+$")


def _columns(header: str) -> list[tuple[str, int]]:
    """Column names and where each starts (kubectl's tabwriter pads every cell to the column's width)."""
    return [(m.group().strip(), m.start()) for m in re.finditer(r"[A-Z]+(?: [A-Z]+)?(?=\s{2,}|\s*$)", header)]


def read_kubectl_events(lines: Iterable[str], source: str) -> TriageReport:
    """`kubectl get events [-A] [-o wide]` or `kubectl events` (1.26+): each pod's events judged as
    `kubectl describe pod` judges them, one pod at a time (OBJECT `pod/NAME`, or KIND Pod and NAME)."""
    report = TriageReport("kubectl-events", source)
    columns: list[tuple[str, int]] = []
    by_object: dict[str, list[Event]] = {}
    setup = SetupErrors()
    for number, raw in enumerate(bounded_lines(lines, report), start=1):
        line = raw.rstrip()
        setup.feed(number, line)
        if _EVENTS_HEADER.match(line.strip()) and not line[:1].isspace():
            columns = _columns(line)
            continue
        if not line.strip():
            continue
        if not columns:
            if m := _EVENT_ROW.match(line.strip()):
                events = by_object.setdefault(m.group("object"), [])
                if len(events) < MAX_EVENTS:
                    events.append(Event(m.group("type"), m.group("reason"), "", m.group("message"), line.strip()))
            continue
        cells = {name: line[start : columns[i + 1][1] if i + 1 < len(columns) else None].strip()
                 for i, (name, start) in enumerate(columns)}  # fmt: skip
        cells["MESSAGE"] = line[dict(columns)["MESSAGE"] :].strip()
        kind_name = cells.get("OBJECT") or f"{cells.get('KIND', '').lower()}/{cells.get('NAME', '')}"
        if cells.get("TYPE") not in ("Normal", "Warning"):
            if by_object and line[:1].isspace():  # a wrapped message
                last = next(reversed(by_object.values()))[-1]
                last.message = f"{last.message} {line.strip()}"[:2000]
            continue
        events = by_object.setdefault(kind_name, [])
        if len(events) < MAX_EVENTS:
            events.append(Event(cells["TYPE"], cells.get("REASON", ""), cells.get("SOURCE", ""), cells["MESSAGE"],
                                line.strip()))  # fmt: skip
    if not columns and not by_object:
        raise ParseError("no events table (LAST SEEN  TYPE  REASON  OBJECT  MESSAGE) in the input",
                         fix="give the output of `kubectl get events` or `kubectl events`")  # fmt: skip
    if not columns:
        report.notes.append("event rows without the table's header: read as TYPE, REASON, OBJECT, MESSAGE")
    pods = {k: v for k, v in by_object.items() if k.lower().startswith("pod/")}
    for kind_name, events in pods.items():
        _judge_events(PodView(name=kind_name.split("/", 1)[1][:253]), events, {}, report)
    setup.into(report)
    others = [e for k, v in by_object.items() if k not in pods for e in v if e.type == "Warning"]
    for e in others[:20]:
        report.notes.append(f"warning event, not judged: {e.line[:200]}")
    if not by_object:
        report.judged = False
        report.notes.append("the events table has no rows")
    del report.findings[MAX_FINDINGS:]
    return report
