"""kubectl's view of GPU nodes and pods. Triage reads the objects itself (no parser in gpufleet.parsers yet), so
`gpufleet read` has no subcommand for them."""

from __future__ import annotations

from gpufleet.triage.formats.registry import Format
from gpufleet.triage.readers.kube import read_kubectl_describe_node, read_kubectl_node_json
from gpufleet.triage.readers.kube_yaml import read_kubectl_node_yaml, read_kubectl_pod_yaml
from gpufleet.triage.readers.pod import read_kubectl_pod_json
from gpufleet.triage.readers.pod_describe import read_kubectl_describe_pod, read_kubectl_events

KUBECTL_NODE_JSON = Format(
    name="kubectl-node-json",
    summary="`kubectl get node -o json` (a Node or a List of them): conditions, taints and GPU capacity",
    signs=(
        (r"\"kind\":\s*\"Node\"", 10),
        (r"\"nodeInfo\":\s*\{", 4),
        (r"\"allocatable\":\s*\{", 3),
        (r"\"lastHeartbeatTime\":\s*\"", 4),
    ),
    judge=read_kubectl_node_json,
)

KUBECTL_POD_JSON = Format(
    name="kubectl-pod-json",
    summary="`kubectl get pod -o json` (a Pod or a List of them): why its containers ended (OOMKilled, exit codes)",
    signs=(
        (r"\"kind\":\s*\"Pod\"", 10),
        (r"\"containerStatuses\":\s*\[", 6),  # a Pod's fields without its kind, as other tools copy them
        (r"\"restartCount\":\s*\d", 3),
        (r"\"lastState\":\s*\{", 3),
        (r"\"qosClass\":\s*\"", 3),
    ),
    judge=read_kubectl_pod_json,
)

KUBECTL_DESCRIBE_NODE = Format(
    name="kubectl-describe-node",
    summary="`kubectl describe node`: conditions, taints and GPU capacity",
    signs=(
        (r"^Name:\s+\S", 3),
        (r"^Roles:\s+", 6),
        (r"^Capacity:\s*$", 5),
        (r"^Allocatable:\s*$", 5),
        (r"^Conditions:\s*$", 3),
        (r"^Unschedulable:\s+(?:true|false)\s*$", 6),
        (r"^\s+Type\s+Status\s+LastHeartbeatTime\s+LastTransitionTime", 8),  # only a node's conditions have these
    ),
    judge=read_kubectl_describe_node,
)

KUBECTL_NODE_YAML = Format(
    name="kubectl-node-yaml",
    summary="`kubectl get node -o yaml` (a Node or a List of them): conditions, taints and GPU capacity",
    signs=(
        (r"^\s*kind:\s*Node\s*$", 10),
        (r"^\s+nodeInfo:\s*$", 4),
        (r"^\s+allocatable:\s*$", 3),
        (r"^\s+capacity:\s*$", 3),
        (r"^\s+-?\s*lastHeartbeatTime:\s", 4),
        (r"^\s+kubeletVersion:\s", 3),
        (r"^\s+-\s+address:\s", 2),
    ),
    judge=read_kubectl_node_yaml,
)

KUBECTL_POD_YAML = Format(
    name="kubectl-pod-yaml",
    summary="`kubectl get pod -o yaml` (a Pod or a List of them): why its containers ended (OOMKilled, exit codes)",
    signs=(
        (r"^\s*kind:\s*Pod\s*$", 10),
        (r"^\s+containerStatuses:\s*$", 6),
        (r"^\s+-?\s*restartCount:\s*\d", 3),
        (r"^\s+lastState:\s*", 3),
        (r"^\s+qosClass:\s", 3),
    ),
    judge=read_kubectl_pod_yaml,
)

KUBECTL_DESCRIBE_POD = Format(
    name="kubectl-describe-pod",
    summary="`kubectl describe pod`: containers' states and exit reasons, and events (FailedScheduling and why)",
    signs=(
        (r"^Name:\s+\S", 3),
        (r"^Namespace:\s+\S", 3),
        (r"^Containers:\s*$", 5),
        (r"^QoS Class:\s+\S", 6),
        (r"^Node:\s+\S", 2),
        (r"^\s+Restart Count:\s+\d", 5),
        (r"^\s+(?:Normal|Warning)\s+(?:FailedScheduling|Scheduled|Pulling|Pulled|BackOff|Failed)\s", 6),
        (r"^Tolerations:\s", 3),
    ),
    judge=read_kubectl_describe_pod,
)

KUBECTL_EVENTS = Format(
    name="kubectl-events",
    summary="`kubectl get events` or `kubectl events`: each pod's events (FailedScheduling and why, GPU allocation)",
    signs=(
        (r"^(?:NAMESPACE\s+)?LAST SEEN\s+(?:FIRST SEEN\s+COUNT\s+NAME\s+KIND\s+SUBOBJECT\s+)?TYPE\s+REASON\s+", 10),
        (r"(?:^|\s)(?:Normal|Warning)\s+[A-Z]\w+\s+(?:[Pp]od|[Nn]ode|[A-Z]\w+)/\S+\s+\S", 6),
        (r"\s(?:Warning|Normal)\s+(?:FailedScheduling|Scheduled|UnexpectedAdmissionError)\s", 3),
    ),
    judge=read_kubectl_events,
)
