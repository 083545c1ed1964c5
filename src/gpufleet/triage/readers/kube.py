"""Kubernetes nodes as kubectl prints them: `kubectl get node NAME -o json` (a Node, or a List of them) and
`kubectl describe node [NAME]`, judged for what matters to GPU work.

- Conditions (Node status.conditions): `Ready` False or Unknown is faulty; the kubelet's pressure conditions
  (MemoryPressure, DiskPressure, PIDPressure) and NetworkUnavailable are warnings. Health agents add their own
  conditions (node-problem-detector plugins, NVSentinel's GpuXxxWatch / SysLogsXIDError, EKS's
  AcceleratedHardwareReady, AKS's GPU checks): a problem condition (True = problem, the convention) or a
  `...Ready`/`...Healthy` one that is False is a warning, faulty when it is about the GPUs (Gpu, Xid, NVLink,
  NVSwitch, accelerated hardware).
- Taints: node.kubernetes.io/not-ready and unreachable (the node lifecycle controller's) and out-of-service are
  faulty; unschedulable (or spec.unschedulable) means cordoned, a warning; a NoSchedule/NoExecute taint a GPU health
  tool sets (nvidia.com/gpu-xid-error, ...) is faulty. `nvidia.com/gpu:NoSchedule` alone is the usual taint that
  keeps non-GPU pods off GPU nodes, not a fault.
- GPUs: the kubelet reports a device plugin's devices as capacity and its healthy ones as allocatable
  (devicemanager GetCapacity), so allocatable below capacity for nvidia.com/gpu, nvidia.com/gpu.shared or
  nvidia.com/mig-* means the NVIDIA device plugin marked GPUs unhealthy (it does on a critical Xid): faulty. A node
  labelled as a GPU node (nvidia.com/gpu.present, nvidia.com/gpu.count / .product from GPU feature discovery, NFD's
  feature.node.kubernetes.io/pci-10de.present) with no GPU capacity has no device plugin advertising its GPUs:
  faulty. Fewer GPUs advertised than GPU feature discovery counted is a warning.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from gpufleet.errors import ParseError
from gpufleet.model import Severity
from gpufleet.triage.readers.common import MAX_FINDINGS, bounded_lines, bounded_text
from gpufleet.triage.readers.kube_json import CUT, load_json
from gpufleet.triage.report import TriageFinding, TriageReport

MAX_NODES = 5_000
MAX_ITEMS = 500  # conditions, taints, resources, labels read per node
GPU_LABELS = ("nvidia.com/gpu.present", "nvidia.com/gpu.count", "nvidia.com/gpu.product")
NFD_NVIDIA = "feature.node.kubernetes.io/pci-10de.present"  # NFD: a PCI device of vendor 10de (NVIDIA)
PRESSURE = frozenset({"MemoryPressure", "DiskPressure", "PIDPressure"})
PRESSURE_TAINTS = {
    "node.kubernetes.io/memory-pressure": "MemoryPressure",
    "node.kubernetes.io/disk-pressure": "DiskPressure",
    "node.kubernetes.io/pid-pressure": "PIDPressure",
    "node.kubernetes.io/network-unavailable": "NetworkUnavailable",
}
LOST_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
DOWN_TAINTS = {
    "node.kubernetes.io/out-of-service": "marked out of service (non-graceful node shutdown)",
    "node.cloudprovider.kubernetes.io/shutdown": "shut down, says the cloud provider",
}
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
GPU_WORDS = re.compile(r"gpu|xid|nvlink|nvswitch|accelerat", re.IGNORECASE)
BAD_WORDS = re.compile(r"unhealthy|error|fault|fail|xid|nvlink|bad|broken|quarantin", re.IGNORECASE)
POSITIVE = re.compile(r"(?:Ready|Healthy|Available|OK)$")  # a condition whose True is good
NEGATED = re.compile(r"(?:NotReady|Unhealthy|Unavailable|NotOK)$")
MIG_COUNT = re.compile(r"^nvidia\.com/(mig-.+)\.count$")
COUNT = re.compile(r"^\+?(\d{1,12})$")
Add = Callable[[str, Severity, str, str, str, list[str]], TriageFinding]  # check, severity, code, message, fix, lines


@dataclass
class Condition:
    type: str
    status: str
    reason: str = ""
    message: str = ""
    line: str = ""


@dataclass
class NodeView:
    """The parts of a Node this reader judges, from either format; `line` keeps the text each came from."""

    name: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[tuple[str, str, str, str]] = field(default_factory=list)  # key, value, effect, line
    unschedulable: bool | None = None
    unschedulable_line: str = ""
    conditions: list[Condition] = field(default_factory=list)
    capacity: dict[str, tuple[str, str]] = field(default_factory=dict)  # resource -> (quantity, line)
    allocatable: dict[str, tuple[str, str]] = field(default_factory=dict)
    has_status: bool = False  # the resources and conditions were there to read
    complete: bool = True


# ---------------------------------------------------------------- judgement


def _is_gpu_resource(name: str) -> bool:
    return name in ("nvidia.com/gpu", "nvidia.com/gpu.shared") or name.startswith("nvidia.com/mig-")


def _count(quantity: str) -> int | None:
    """An extended-resource count (always a whole number), or None when the quantity is not one."""
    m = COUNT.match(quantity.strip())
    return int(m.group(1)) if m else None


def _gpu_node(node: NodeView) -> str:
    """Why the node is a GPU node, or '' when nothing says it is."""
    for key in GPU_LABELS:
        value = node.labels.get(key)
        if value and value.lower() not in ("false", "0"):
            return f"label {key}={value}"
    if node.labels.get(NFD_NVIDIA, "").lower() == "true":
        return f"label {NFD_NVIDIA}=true"
    return ""


def _judge(node: NodeView, report: TriageReport) -> None:
    entity = node.name or "node"
    found: dict[str, TriageFinding] = {}

    def add(check: str, severity: Severity, code: str, message: str, fix: str, evidence: list[str]) -> TriageFinding:
        finding = TriageFinding(check, severity, message, entity, code, fix, [e for e in evidence if e])
        report.findings.append(finding)
        found[code] = finding
        return finding

    _judge_conditions(node, add, report.notes)
    _judge_taints(node, add, found, report)
    _judge_gpus(node, add, report)


def _judge_conditions(node: NodeView, add: Add, notes: list[str]) -> None:
    ready = next((c for c in node.conditions if c.type == "Ready"), None)
    unknown: list[str] = []
    for c in node.conditions:
        why = f" ({c.reason}: {c.message})" if c.reason or c.message else ""
        if c.type == "Ready":
            if c.status == "False":
                add(
                    "node-condition",
                    Severity.critical,
                    "Ready=False",
                    f"the node is not Ready{why}",
                    "check the kubelet and container runtime on the node (`journalctl -u kubelet`)",
                    [c.line],
                )
            elif c.status == "Unknown":
                add(
                    "node-condition",
                    Severity.critical,
                    "Ready=Unknown",
                    f"the kubelet stopped reporting: the node is unreachable or down{why}",
                    "check the node is up and reachable; its pods are evicted after the unreachable taint's grace",
                    [c.line],
                )
            continue
        if c.status == "Unknown":
            if not (ready is not None and ready.status == "Unknown"):  # all Unknown when the node is lost
                unknown.append(c.type)
            continue
        positive = bool(POSITIVE.search(c.type)) and not NEGATED.search(c.type)
        problem = c.status == ("False" if positive else "True")
        if not problem:
            continue
        state = f"{c.type}={c.status}"
        if c.type in PRESSURE:
            add(
                "node-condition",
                Severity.warning,
                state,
                f"{c.type}{why}: the kubelet evicts pods and refuses new ones",
                "free memory/disk/PIDs on the node, or move work off it",
                [c.line],
            )
        elif c.type == "NetworkUnavailable":
            add(
                "node-condition",
                Severity.warning,
                state,
                f"pod networking is not set up on the node{why}",
                "check the network plugin (CNI) pods on the node and its routes",
                [c.line],
            )
        elif GPU_WORDS.search(c.type) and not re.search(r"non-?fatal|warn", c.type, re.IGNORECASE):
            add(
                "gpu-condition",
                Severity.critical,
                state,
                f"a GPU health check failed: {state}{why}",
                "drain the node; check `dmesg` for Xid/SXid and run `dcgmi diag -r 3` before returning it",
                [c.line],
            )
        else:
            add(
                "node-condition",
                Severity.warning,
                state,
                f"a node problem is reported: {state}{why}",
                "see the reporting agent's documentation for this condition",
                [c.line],
            )
    if ready is None and node.conditions and node.complete:
        add("node-condition", Severity.warning, "no Ready", "the node has conditions but no Ready condition", "", [])
    if unknown:
        notes.append(f"{node.name or 'node'}: {', '.join(unknown[:8])} Unknown: the agent setting it cannot tell")


def _judge_taints(node: NodeView, add: Add, found: dict[str, TriageFinding], report: TriageReport) -> None:
    cordon_lines = [node.unschedulable_line] if node.unschedulable else []
    dedicated: list[str] = []
    other: list[str] = []
    for key, value, effect, line in node.taints:
        shown = f"{key}={value}:{effect}" if value else f"{key}:{effect}"
        if key == UNSCHEDULABLE_TAINT:
            cordon_lines.append(line)
        elif key in LOST_TAINTS:
            ready = found.get("Ready=Unknown") or found.get("Ready=False")
            if ready is not None:
                ready.evidence.append(line)
            else:
                add(
                    "taint",
                    Severity.critical,
                    key,
                    f"tainted {shown}: the node lifecycle controller lost the node",
                    "check the node is up and its kubelet runs",
                    [line],
                )
        elif key in DOWN_TAINTS:
            add(
                "taint",
                Severity.critical,
                key,
                f"tainted {shown}: {DOWN_TAINTS[key]}",
                "bring the node back or replace it",
                [line],
            )
        elif key in PRESSURE_TAINTS:
            condition = found.get(f"{PRESSURE_TAINTS[key]}=True")
            if condition is not None:
                condition.evidence.append(line)
            else:
                add("taint", Severity.warning, key, f"tainted {shown}", "free the resource on the node", [line])
        elif key == "node.cloudprovider.kubernetes.io/uninitialized":
            add(
                "taint",
                Severity.warning,
                key,
                f"tainted {shown}: the cloud provider has not initialised the node",
                "check the cloud controller manager",
                [line],
            )
        elif key == "nvidia.com/gpu" and not BAD_WORDS.search(value):
            if effect == "NoExecute":
                add(
                    "taint",
                    Severity.warning,
                    key,
                    f"tainted {shown}: pods without a toleration are evicted",
                    "check who set it: a health tool's quarantine, or a dedication taint set with NoExecute",
                    [line],
                )
            else:
                dedicated.append(shown)  # keeps pods that do not ask for GPUs off the node
        elif (key.startswith("nvidia.com/") or GPU_WORDS.search(key)) and BAD_WORDS.search(f"{key}={value}"):
            severity: Severity = Severity.warning if effect == "PreferNoSchedule" else Severity.critical
            add(
                "taint",
                severity,
                key,
                f"tainted {shown}: a GPU health check quarantined the node",
                "find the failing check (the node's conditions and events); drain and repair the GPU",
                [line],
            )
        else:
            other.append(shown)
    cordon_lines = [line for line in cordon_lines if line]
    if node.unschedulable or any(key == UNSCHEDULABLE_TAINT for key, *_ in node.taints):
        add(
            "cordon",
            Severity.warning,
            "cordoned",
            "the node is cordoned (unschedulable): no new pods are placed on it",
            "uncordon it (`kubectl uncordon`) once whoever cordoned it is done",
            cordon_lines,
        )
    if dedicated:
        report.notes.append(f"{node.name or 'node'}: GPU-dedication taint {', '.join(dedicated)} (normal)")
    if other:
        report.notes.append(f"{node.name or 'node'}: other taints, not judged: {', '.join(other[:8])}")


def _judge_gpus(node: NodeView, add: Add, report: TriageReport) -> None:
    name = node.name or "node"
    why_gpu = _gpu_node(node)
    resources = sorted(r for r in {*node.capacity, *node.allocatable} if _is_gpu_resource(r))
    if not node.has_status:
        if why_gpu:
            report.notes.append(f"{name}: GPU node ({why_gpu}), but its capacity and allocatable are not in the input")
        return
    advertised = 0
    for resource in resources:
        cap_q, cap_line = node.capacity.get(resource, ("", ""))
        alloc_q, alloc_line = node.allocatable.get(resource, (cap_q, ""))
        cap, alloc = _count(cap_q), _count(alloc_q)
        if cap is None or alloc is None:
            report.notes.append(f"{name}: cannot read {resource} quantities {cap_q!r} / {alloc_q!r}")
            continue
        advertised += cap
        if alloc < cap:
            add(
                "device-plugin",
                Severity.critical,
                "allocatable < capacity",
                f"{cap - alloc} of {cap} {resource} are unhealthy: allocatable {alloc}, capacity {cap} (the device "
                "plugin marked them unhealthy, which it does on a critical Xid)",
                "find the GPU in the device plugin's log (XidCriticalError) and `dmesg`; drain the node, reset or "
                "replace the GPU",
                [cap_line, alloc_line],
            )
    if not node.complete:
        return  # what is missing may only be cut off: judge what is there
    if why_gpu and advertised == 0:
        add(
            "device-plugin",
            Severity.critical,
            "no GPUs advertised",
            f"a GPU node ({why_gpu}) advertises no GPUs: no device plugin registered them (capacity "
            f"{'0' if resources else 'has no nvidia.com/gpu'})",
            "check the nvidia-device-plugin pod on the node (its log), the driver (`nvidia-smi`) and the container "
            "toolkit",
            [node.capacity.get(r, ("", ""))[1] for r in resources],
        )
        return
    _judge_gfd_count(node, add)
    if why_gpu or resources:
        counts = ", ".join(f"{r}: {node.allocatable.get(r, node.capacity.get(r, ('?', '')))[0]}" for r in resources)
        product = node.labels.get("nvidia.com/gpu.product", "")
        report.notes.append(f"{name}: GPU node{f' ({product})' if product else ''}, allocatable {counts or 'none'}")


def _judge_gfd_count(node: NodeView, add: Add) -> None:
    """GPU feature discovery's counts against what the device plugin advertises (fewer advertised: a GPU missing)."""
    expected: dict[str, int] = {}
    count = _count(node.labels.get("nvidia.com/gpu.count", ""))
    if count and node.labels.get("nvidia.com/mig.strategy", "none") in ("none", "single"):
        resource = "nvidia.com/gpu.shared" if "nvidia.com/gpu.shared" in node.capacity else "nvidia.com/gpu"
        expected[resource] = count * (_count(node.labels.get(f"{resource}.replicas", "1")) or 1)
    for label, value in node.labels.items():
        m = MIG_COUNT.match(label)
        if m and (n := _count(value)):
            resource = f"nvidia.com/{m.group(1)}"
            expected[resource] = n * (_count(node.labels.get(f"{resource}.replicas", "1")) or 1)
    for resource, want in expected.items():
        quantity, line = node.capacity.get(resource, ("", ""))
        have = _count(quantity)
        if have is not None and 0 < have < want:
            add(
                "device-plugin",
                Severity.warning,
                "fewer GPUs than labelled",
                f"the device plugin advertises {have} {resource} where GPU feature discovery counted {want}",
                "compare `nvidia-smi -L` on the node with the device plugin's log: a GPU is missing or not enumerated",
                [line],
            )


# ---------------------------------------------------------------- kubectl get node -o json


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _s(value: Any) -> str:
    return value if isinstance(value, str) else "" if value is None else str(value)[:200]


def _compact(obj: Any) -> str:
    return json.dumps(obj, separators=(", ", ": "), sort_keys=True, default=str)[:300]


def _node_from_json(obj: dict[str, Any]) -> NodeView:
    metadata, spec, status = _d(obj.get("metadata")), _d(obj.get("spec")), obj.get("status")
    node = NodeView(name=_s(metadata.get("name"))[:253])
    parts = [obj, metadata, spec, _d(metadata.get("labels")), spec.get("taints"), _d(status)]
    parts += [_d(status).get(key) for key in ("capacity", "allocatable", "conditions")]
    node.complete = not any(isinstance(part, dict | list) and CUT in part for part in parts)
    node.labels = {str(k)[:317]: _s(v) for k, v in list(_d(metadata.get("labels")).items())[:MAX_ITEMS]}
    taints = spec.get("taints")
    for taint in (taints if isinstance(taints, list) else [])[:MAX_ITEMS]:
        t = _d(taint)
        node.taints.append((_s(t.get("key")), _s(t.get("value")), _s(t.get("effect")), _compact(t)))
    if isinstance(spec.get("unschedulable"), bool):
        node.unschedulable = spec["unschedulable"]
        node.unschedulable_line = f'"unschedulable": {str(node.unschedulable).lower()}'
    if not isinstance(status, dict):
        node.complete = node.complete and "status" not in obj
        return node
    conditions = status.get("conditions")
    for item in (conditions if isinstance(conditions, list) else [])[:MAX_ITEMS]:
        c = _d(item)
        if c.get("type"):
            node.conditions.append(
                Condition(
                    _s(c.get("type")), _s(c.get("status")), _s(c.get("reason")), _s(c.get("message")), _compact(c)
                )
            )
    for part, target in (("capacity", node.capacity), ("allocatable", node.allocatable)):
        for resource, quantity in list(_d(status.get(part)).items())[:MAX_ITEMS]:
            target[str(resource)] = (_s(quantity), f'{part}: "{resource}": {_compact(quantity)}')
    node.has_status = "capacity" in status or "allocatable" in status
    return node


def read_kubectl_node_json(lines: Iterable[str], source: str) -> TriageReport:
    """`kubectl get node NAME -o json`, or `kubectl get nodes -o json` (a List)."""
    report = TriageReport("kubectl-node-json", source)
    value = load_json(bounded_text(lines, report), report, "Node")
    if not isinstance(value, dict):
        raise ParseError("the JSON is not an object", fix="give the output of `kubectl get node NAME -o json`")
    kind = value.get("kind")
    if kind == "Node":
        objects: list[Any] = [value]
    elif kind in ("List", "NodeList") or isinstance(value.get("items"), list):
        items = value.get("items")
        objects = [i for i in (items if isinstance(items, list) else []) if isinstance(i, dict)]
        skipped = [i for i in objects if i.get("kind") not in (None, "Node")]
        if skipped:
            report.notes.append(f"{len(skipped)} item(s) of another kind left out")
        objects = [i for i in objects if i.get("kind") in (None, "Node")]
    else:
        raise ParseError(f"the JSON is a {_s(kind) or 'object without a kind'}, not a Node")
    if not objects:
        report.judged = False
        report.notes.append("no Node in the input")
        return report
    nodes = [_node_from_json(obj) for obj in objects[:MAX_NODES]]
    for node in nodes:
        if not node.complete:
            report.complete = False
        _judge(node, report)
    _nothing_to_judge(nodes, report)
    if len(objects) > MAX_NODES:
        report.notes.append(f"{len(objects) - MAX_NODES} more node(s) not judged")
    del report.findings[MAX_FINDINGS:]
    return report


# ---------------------------------------------------------------- kubectl describe node

SECTION = re.compile(r"^([A-Z][A-Za-z -]{0,40}):(?:\s+(.*?))?\s*$")
TAINT = re.compile(r"^(\S+?)(?:=(\S*))?:(NoSchedule|PreferNoSchedule|NoExecute)$")
RESOURCE = re.compile(r"^\s+([A-Za-z0-9][\w./-]{0,250}):\s+(\S+)\s*$")
CONDITION = re.compile(r"^\s+(\S+)\s+(True|False|Unknown)(?:\s+(.*?))?\s*$")
TIME = r"(?:\w{3}, \d{2} \w{3} \d{4} \d{2}:\d{2}:\d{2} [-+]\d{4}|<unknown>|<unset>)"
TIMES = re.compile(rf"^{TIME}\s+{TIME}(?:\s+(\S+)(?:\s+(.*))?)?$")
KNOWN_SECTIONS = frozenset(
    {
        "Roles",
        "Labels",
        "Annotations",
        "CreationTimestamp",
        "Taints",
        "Unschedulable",
        "Lease",
        "Conditions",
        "Addresses",
        "Capacity",
        "Allocatable",
    }
)
# sections kubectl prints after Capacity/Allocatable: reaching one means the judged sections were read whole
AFTER_RESOURCES = (
    "System Info",
    "PodCIDR",
    "PodCIDRs",
    "ProviderID",
    "Non-terminated Pods",
    "Allocated resources",
    "Events",
    "Pods",
)


class DescribeParser:
    """`kubectl describe node` text, one node after another (each starts at `Name:`)."""

    def __init__(self) -> None:
        self.nodes: list[NodeView] = []
        self.section = ""
        self.node: NodeView | None = None
        self.header = ""  # the Conditions table's header, for its column positions

    def _start(self, name: str) -> NodeView:
        node = NodeView(name=name[:253], complete=False)
        if len(self.nodes) < MAX_NODES:
            self.nodes.append(node)
        self.node = node
        return node

    def feed(self, raw: str) -> None:
        line = html.unescape(raw) if "&" in raw else raw  # Markdown pages escape <none>
        line = line.rstrip()
        if not line.strip():
            return
        m = SECTION.match(line) if not line[0].isspace() else None
        if m:
            self._section(m.group(1), m.group(2) or "", line)
            return
        if self.node is None or not self.section:
            return
        self._item(line)

    def _section(self, title: str, value: str, line: str) -> None:
        if title == "Name":
            self._start(value)
            self.section = title
            return
        if self.node is None and title not in KNOWN_SECTIONS:
            return  # text before the first node
        node = self.node or self._start("")
        self.section = title
        if title in AFTER_RESOURCES:
            node.complete = True
        if title in ("Labels", "Taints") and value and value != "<none>":
            self._item("  " + value, line)
        elif title == "Unschedulable":
            node.unschedulable = value.lower() == "true"
            node.unschedulable_line = line
        elif title in ("Capacity", "Allocatable"):
            node.has_status = True

    def _item(self, line: str, original: str = "") -> None:
        node = self.node
        assert node is not None
        text = line.strip()
        shown = original or line.strip()
        if self.section == "Labels" and len(node.labels) < MAX_ITEMS and "=" in text:
            key, _, value = text.partition("=")
            node.labels[key] = value
        elif self.section == "Taints" and len(node.taints) < MAX_ITEMS and (t := TAINT.match(text)):
            node.taints.append((t.group(1), t.group(2) or "", t.group(3), shown))
        elif self.section == "Conditions":
            self._condition(line)
        elif self.section in ("Capacity", "Allocatable") and (r := RESOURCE.match(line)):
            target = node.capacity if self.section == "Capacity" else node.allocatable
            if len(target) < MAX_ITEMS:
                target[r.group(1)] = (r.group(2), f"{self.section}: {text}")

    def _condition(self, line: str) -> None:
        node = self.node
        assert node is not None
        stripped = line.strip()
        if stripped.startswith("Type ") and "Status" in stripped:
            self.header = line
            return
        if set(stripped) <= set("- "):
            return
        m = CONDITION.match(line)
        if m is None or len(node.conditions) >= MAX_ITEMS:
            if node.conditions and m is None:  # a message that runs onto the next line
                node.conditions[-1].message = f"{node.conditions[-1].message} {stripped}"[:500]
            return
        reason, message = self._reason_message(line, m.group(3) or "")
        node.conditions.append(Condition(m.group(1), m.group(2), reason, message, stripped))

    def _reason_message(self, line: str, rest: str) -> tuple[str, str]:
        t = TIMES.match(rest)
        if t:
            return t.group(1) or "", (t.group(2) or "").strip()
        at_reason, at_message = self.header.find("Reason"), self.header.find("Message")
        if 0 < at_reason < at_message <= len(line) and line[at_reason - 1] == " ":
            return line[at_reason:at_message].strip(), line[at_message:].strip()
        return "", ""


def read_kubectl_describe_node(lines: Iterable[str], source: str) -> TriageReport:
    """`kubectl describe node NAME` or `kubectl describe nodes` (one node after another)."""
    report = TriageReport("kubectl-describe-node", source)
    parser = DescribeParser()
    for line in bounded_lines(lines, report):
        parser.feed(line)
    nodes = [n for n in parser.nodes if n.name or n.conditions or n.capacity or n.taints]
    if not nodes:
        raise ParseError("no node in the input", fix="give the output of `kubectl describe node NAME`")
    _nothing_to_judge(nodes, report)
    for node in nodes:
        if not node.complete:
            report.complete = False
            report.notes.append(
                f"{node.name or 'node'}: the text ends before 'System Info:': input ends mid-record, later sections "
                "unread"
            )
        _judge(node, report)
    if len(parser.nodes) >= MAX_NODES:
        report.notes.append(f"only the first {MAX_NODES} nodes were read")
        report.complete = False
    del report.findings[MAX_FINDINGS:]
    return report


def _nothing_to_judge(nodes: list[NodeView], report: TriageReport) -> None:
    """A node with neither conditions nor resources says nothing about its health."""
    empty = [n.name or "node" for n in nodes if not n.conditions and not n.has_status]
    if empty:
        report.notes.append(f"no conditions or resources for {', '.join(empty[:8])}: nothing to judge there")
    if len(empty) == len(nodes):
        report.judged = False
