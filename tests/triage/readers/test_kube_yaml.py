"""Nodes and Pods as `kubectl get -o yaml` prints them: judged exactly as their JSON (one object, two
serialisations), an excerpt of a Node's status read as a Node, a cut document said, anchors refused."""

from __future__ import annotations

import io
import json

import pytest
import yaml

from gpufleet.triage.formats import read
from gpufleet.triage.readers.kube_yaml import _ALIAS
from gpufleet.triage.report import TriageReport
from gpufleet.triage.run import triage_lines
from tests.conftest import CAPTURES

DATA = CAPTURES.parent / "triage" / "readers" / "data"
NODES = ("kubectl_node_gpu_healthy.json", "kubectl_node_gpu_xid_unhealthy.json", "kubectl_nodes_list.json")


def _triage(text: str) -> TriageReport:
    return triage_lines(io.StringIO(text), "test")


def _said(report: TriageReport) -> list[tuple[str, str, str]]:
    return [(f.severity, f.entity, f.code) for f in report.findings]


@pytest.mark.parametrize("name", NODES)
def test_a_node_in_yaml_is_judged_as_its_json(name: str) -> None:
    text = (DATA / name).read_text()
    as_json = _triage(text)
    as_yaml = _triage(yaml.safe_dump(json.loads(text), sort_keys=False))
    assert (as_json.format, as_yaml.format) == ("kubectl-node-json", "kubectl-node-yaml")
    assert (as_yaml.verdict, _said(as_yaml)) == (as_json.verdict, _said(as_json))


def test_pods_in_yaml_are_judged_as_their_json() -> None:
    # kubectl_pods_kubeadm_docker.yaml is written, not captured: the three Pods of the real capture
    # kubelet_pods/kubectl_get_all_kubeadm_docker.json serialised as `kubectl get pods -o yaml` prints the same object
    as_yaml = _triage((DATA / "kubectl_pods_kubeadm_docker.yaml").read_text())
    as_json = _triage((CAPTURES / "kubelet_pods" / "kubectl_get_all_kubeadm_docker.json").read_text())
    assert as_yaml.format == "kubectl-pod-yaml" and as_yaml.verdict == as_json.verdict == "healthy"
    assert [n for n in as_yaml.notes if n.startswith("pod ")] == [n for n in as_json.notes if n.startswith("pod ")]


def test_a_status_excerpt_is_read_as_a_node() -> None:
    text = (CAPTURES / "kubectl" / "node_yaml_status_one_gpu_podman_desktop.txt").read_text()
    report = _triage(text)
    assert (report.format, report.verdict) == ("kubectl-node-yaml", "healthy")
    unhealthy = text.replace('nvidia.com/gpu: "1"', 'nvidia.com/gpu: "0"', 1)  # allocatable comes first
    report = _triage(unhealthy)
    assert report.verdict == "faulty" and report.findings[0].code == "allocatable < capacity"


def test_a_cut_document_is_read_up_to_the_cut_and_said() -> None:
    text = yaml.safe_dump(json.loads((DATA / "kubectl_node_gpu_xid_unhealthy.json").read_text()), sort_keys=False)
    whole = _triage(text)
    cut = text[: text.index("conditions:")] + 'conditions:\n  - message: "kubelet is posting'  # cut inside a string
    report = read("kubectl-node-yaml", iter(cut.splitlines()), "cut")
    assert not report.complete and any("does not parse whole" in n for n in report.notes)
    assert whole.verdict == "faulty" and report.verdict != "healthy"


def test_anchors_and_aliases_are_refused() -> None:
    bomb = "a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]\nkind: Node\n"
    assert _ALIAS.search(bomb)
    report = read("kubectl-node-yaml", iter(bomb.splitlines()), "bomb")
    assert report.verdict == "unknown" and any("anchors" in n for n in report.notes)
