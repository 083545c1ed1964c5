"""Kubernetes Nodes and Pods as `kubectl get node|pod NAME -o yaml` prints them, judged exactly as their JSON is
(triage.readers.kube, triage.readers.pod): the same object, another serialisation.

kubectl writes YAML without anchors or aliases, so a document with them is refused (an alias bomb would otherwise
expand in memory); a document cut short is read up to its last complete line and said to be incomplete."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import yaml

from gpufleet.errors import ParseError
from gpufleet.triage.readers.common import MAX_FINDINGS, bounded_text
from gpufleet.triage.readers.kube import MAX_NODES, _judge, _node_from_json, _nothing_to_judge
from gpufleet.triage.readers.pod import MAX_PODS, _is_pod, _pod_from_json, _setup_errors
from gpufleet.triage.readers.pod import _judge as _judge_pod
from gpufleet.triage.report import TriageReport

_ALIAS = re.compile(r"(?:^|[\s:\-\[,])[&*][A-Za-z0-9_-]+(?:\s|$)", re.MULTILINE)
MAX_TRIMS = 40  # lines dropped from the end, one at a time, to read a document cut mid-value


def load_yaml(text: str, report: TriageReport, kind: str) -> Any:
    """The YAML document in `text` (the first, if several); one cut short is read up to its last complete line."""
    if _ALIAS.search(text):
        raise ParseError("the YAML uses anchors or aliases, which kubectl never writes",
                         fix=f"give the output of `kubectl get {kind.lower()} NAME -o yaml`")  # fmt: skip
    lines = text.splitlines()
    for trim in range(min(MAX_TRIMS, max(len(lines) - 1, 0)) + 1):
        try:
            docs = [d for d in yaml.safe_load_all("\n".join(lines[: len(lines) - trim])) if d is not None]
        except yaml.YAMLError as exc:
            if trim == 0:
                first_error = exc
            continue
        except RecursionError:
            raise ParseError("the YAML nests too deeply to read") from None
        if trim:
            report.complete = False
            report.notes.append(f"the YAML does not parse whole ({str(first_error).splitlines()[0][:120]}): read up "
                                f"to {trim} line(s) before its end, as if cut there")  # fmt: skip
        return docs[0] if docs else None
    raise ParseError("not YAML kubectl could have written", fix=f"give `kubectl get {kind.lower()} NAME -o yaml`")


def _objects(value: Any, kinds: tuple[str, ...], report: TriageReport) -> list[dict[str, Any]]:
    if not isinstance(value, dict):
        raise ParseError("the YAML is not a mapping", fix="give the output of `kubectl get ... -o yaml`")
    if value.get("kind") in kinds:
        return [value]
    status = value.get("status")
    if (
        value.get("kind") is None
        and "Node" in kinds
        and isinstance(status, dict)
        and ("capacity" in status or "allocatable" in status or "nodeInfo" in status)
    ):  # a Node's fields without its kind, as an excerpt of `-o yaml` gives them
        report.notes.append("a Node's fields without `kind: Node` (an excerpt): read as a Node")
        return [value]
    items = value.get("items")
    if value.get("kind") in ("List", *(k + "List" for k in kinds)) or isinstance(items, list):
        found = [i for i in (items if isinstance(items, list) else []) if isinstance(i, dict)]
        keep = [i for i in found if i.get("kind") in (None, *kinds)]
        if len(found) > len(keep):
            report.notes.append(f"{len(found) - len(keep)} item(s) of another kind left out")
        return keep
    raise ParseError(f"the YAML is a {value.get('kind') or 'mapping without a kind'}, not a {' or '.join(kinds)}")


def read_kubectl_node_yaml(lines: Iterable[str], source: str) -> TriageReport:
    report = TriageReport("kubectl-node-yaml", source)
    objects = _objects(load_yaml(bounded_text(lines, report), report, "Node"), ("Node",), report)
    if not objects:
        report.judged = False
        report.notes.append("no Node in the input")
        return report
    nodes = [_node_from_json(obj) for obj in objects[:MAX_NODES]]
    for node in nodes:
        report.complete = report.complete and node.complete
        _judge(node, report)
    _nothing_to_judge(nodes, report)
    del report.findings[MAX_FINDINGS:]
    return report


def read_kubectl_pod_yaml(lines: Iterable[str], source: str) -> TriageReport:
    report = TriageReport("kubectl-pod-yaml", source)
    value = load_yaml(bounded_text(lines, report), report, "Pod")
    objects = [value] if isinstance(value, dict) and _is_pod(value) else _objects(value, ("Pod",), report)
    pods = [_pod_from_json(obj) for obj in objects[:MAX_PODS] if _is_pod(obj)]
    if not pods:
        report.judged = False
        report.notes.append("no Pod in the input")
        return report
    for pod in pods:
        report.complete = report.complete and pod.complete
        _judge_pod(pod, report)
    _setup_errors([obj for obj in objects[:MAX_PODS] if _is_pod(obj)], report)
    if not any(pod.has_status for pod in pods):
        report.judged = False
        report.notes.append("no pod status in the input: nothing says how its containers ran")
    del report.findings[MAX_FINDINGS:]
    return report
