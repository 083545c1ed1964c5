from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.doctor.catalog import rule_catalog
from gpufleet.doctor.rules import registered
from tests.doctor.helpers import doctor, gpu_node, hits, node_list

GOOD_POD = """\
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: ml}
spec:
  containers:
  - name: main
    image: busybox
"""


def test_every_rule_is_described_and_every_described_rule_exists() -> None:
    described = set(rule_catalog())
    implemented = set(registered())
    input_rules = {"GF000", "GF090", "GF091", "GF092"}  # reported by the loader and the engine
    assert implemented | input_rules == described
    for info in rule_catalog().values():
        assert info.sources, f"{info.id} has no sources"


def test_schema_errors_are_all_reported_with_field_paths_and_hints(tmp_path: Path) -> None:
    bad = GOOD_POD.replace("    image: busybox\n", "    image: busybox\n    imagePullPolicy: 3\n    resource: {}\n")
    found = hits(doctor(tmp_path, ("p.yaml", bad)), "GF000")
    messages = " | ".join(f.message for f in found)
    assert "spec.containers[0]: unknown field 'resource'" in messages
    assert "spec.containers[0].imagePullPolicy" in messages
    assert any("'resource' -> 'resources'" in f.fix for f in found)
    assert all(f.object == "Pod/ml/p" and f.line == 1 for f in found)


def test_a_valid_object_has_no_schema_finding(tmp_path: Path) -> None:
    assert hits(doctor(tmp_path, ("p.yaml", GOOD_POD)), "GF000") == []


def test_the_schema_version_follows_the_cluster(tmp_path: Path) -> None:
    nodes = node_list(gpu_node("gpu-01", kubelet="v1.29.4"))
    report = doctor(tmp_path, ("p.yaml", GOOD_POD), ("nodes.json", nodes))
    assert report.schema_version == "1.29.0"
    version = {"serverVersion": {"major": "1", "minor": "31", "gitVersion": "v1.31.2-eks-7f9249a"}}
    report = doctor(tmp_path, ("p.yaml", GOOD_POD), ("version.json", version))
    assert report.schema_version == "1.31.0"
    assert doctor(tmp_path, ("p.yaml", GOOD_POD), kube_version=(1, 36)).schema_version == "1.36.0"
    assert doctor(tmp_path, ("p.yaml", GOOD_POD), facts={"kubernetesVersion": "v1.30.2"}).schema_version == "1.30.0"


def test_an_api_version_kubernetes_no_longer_serves_is_an_error(tmp_path: Path) -> None:
    old = GOOD_POD.replace("apiVersion: v1\nkind: Pod", "apiVersion: extensions/v1beta1\nkind: Deployment")
    [finding] = hits(doctor(tmp_path, ("d.yaml", old)), "GF000")
    assert "does not serve Deployment as extensions/v1beta1" in finding.message


def test_unknown_kinds_and_non_kubernetes_yaml_are_skipped_with_a_note(tmp_path: Path) -> None:
    text = "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n---\nfoo: bar\n---\n- 1\n- 2\n"
    found = hits(doctor(tmp_path, ("w.yaml", text)), "GF090")
    assert [f.severity for f in found] == ["info"] * 3
    assert any(f.object == "Widget/w" for f in found)
    assert any("a YAML list" in f.message for f in found)


def test_the_cluster_facts_file_is_validated(tmp_path: Path) -> None:
    from gpufleet.errors import ManifestError

    with pytest.raises(ManifestError, match=r"nodes\.gpu-01\.nouveauLoded"):
        doctor(tmp_path, ("p.yaml", GOOD_POD), facts={"nodes": {"gpu-01": {"nouveauLoded": True}}})


def test_errors_come_first(tmp_path: Path) -> None:
    text = "foo: bar\n---\n" + GOOD_POD.replace("    image: busybox\n", "    image: busybox\n    resource: {}\n")
    report = doctor(tmp_path, ("p.yaml", text))
    assert [f.severity for f in report.findings][:1] == ["critical"]
    assert report.errors >= 1


def test_a_large_repository_is_read_on_every_core_with_the_same_findings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpufleet.doctor import engine
    from tests.doctor.helpers import gpu_pod

    files = []
    for i in range(40):
        pod = gpu_pod(f"p{i}", requests={"nvidia.com/gpu": 1}) if i % 3 == 0 else gpu_pod(f"p{i}")
        files.append((f"team/p{i}.yaml", pod))
    files.append(("bad.yaml", GOOD_POD.replace("    image: busybox\n", "    image: busybox\n    resource: {}\n")))
    files.append(("nodes.json", node_list(gpu_node("gpu-01", kubelet="v1.30.1"))))
    serial = doctor(tmp_path, *files)
    monkeypatch.setattr(engine, "PARALLEL_FROM_FILES", 4)
    monkeypatch.setattr(engine.os, "cpu_count", lambda: 2)
    assert engine._workers(42) == 2
    seen: list[str] = []
    parallel = engine.run([str(tmp_path)], on_file=seen.append)
    assert parallel.findings == serial.findings and parallel.schema_version == "1.30.0"
    assert len(seen) == parallel.files == 42


def test_kubectl_dry_run_output_is_a_manifest_and_is_validated(tmp_path: Path) -> None:
    import json
    import subprocess

    from tests.conftest import require_tool

    require_tool("kubectl")
    made = subprocess.run(
        ["kubectl", "create", "deployment", "web", "--image=nginx", "--dry-run=client", "-o", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    obj = json.loads(made.stdout)
    assert obj["metadata"]["creationTimestamp"] is None and obj["status"] == {}
    assert hits(doctor(tmp_path, ("ok.json", obj)), "GF000") == []
    obj["spec"]["template"]["spec"]["containers"][0]["resource"] = {}
    [finding] = hits(doctor(tmp_path, ("bad.json", obj)), "GF000")
    assert "'resource' -> 'resources'" in finding.fix


def test_objects_read_back_from_a_cluster_are_not_schema_checked(tmp_path: Path) -> None:
    node = gpu_node("gpu-01")  # a capture: status filled in, fields a manifest would not carry
    node["status"]["nodeInfo"].pop("architecture")
    assert hits(doctor(tmp_path, ("nodes.json", node_list(node))), "GF000") == []
