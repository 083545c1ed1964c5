"""`gpufleet doctor` end to end on a directory of mixed-vendor manifests: AMD's and Habana's own DaemonSets, broken
copies of them, workloads for each vendor and a node capture; the JSON and SARIF outputs are clean documents."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import yaml

from tests.clirun import gpufleet
from tests.doctor.helpers import gpu_pod, node_list, write
from tests.doctor.rules.test_amd import deviceconfig, mi300x_node
from tests.doctor.rules.test_gaudi import mpijob, worker_spec
from tests.doctor.rules.test_vendors import VENDORS, manifest, without_volume

VENDOR_RULES = {f"GF0{n}" for n in range(23, 32)}


def mixed_repository(root: Path) -> Path:
    """A repository as a platform team keeps it: one directory per vendor, captures next to it."""
    for name in ("rocm-k8s-ds-amdgpu-dp.yaml", "rocm-k8s-ds-amdgpu-labeller.yaml", "habana-k8s-device-plugin.yaml"):
        (root / "infra").mkdir(parents=True, exist_ok=True)
        shutil.copy(VENDORS / name, root / "infra" / name)
    broken = without_volume(manifest("habana-k8s-device-plugin.yaml"), "device-plugin")
    broken["metadata"]["name"] = "gaudi-plugin-copy"
    write(root, "infra/gaudi-plugin-copy.yaml", broken)
    write(root, "infra/deviceconfig.yaml", deviceconfig({"draDriver": {"enable": True}, "devicePlugin": {}}))
    gaudi = worker_spec(limits={"habana.ai/gaudi": 8, "memory": "409Gi"})
    gaudi["runtimeClassName"] = "nvidia"
    write(root, "training/gaudi-mpijob.yaml", mpijob(spec=gaudi))
    write(root, "training/nvidia-on-amd.yaml", gpu_pod("pinned", nodeSelector={"amd.com/gpu.family": "AI"}))
    write(root, "serving/rocm-image.yaml", gpu_pod("serve", image="rocm/vllm:latest", limits={"nvidia.com/gpu": 1}))
    write(root, "serving/partition.yaml", gpu_pod("part", image="rocm/vllm:latest", limits={"amd.com/cpx_nps4": 1}))
    write(root, "serving/nvidia-ok.yaml", gpu_pod("ok"))
    write(root, "captures/nodes.json", node_list(mi300x_node("mi300x-01", {"amd.com/gpu": "8"}, "spx_nps1")))
    return root


def by_rule(findings: list[dict[str, Any]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for f in findings:
        out.setdefault(f["rule"], set()).add(f["object"])
    return out


def test_json_findings_on_a_mixed_vendor_repository(tmp_path: Path) -> None:
    root = mixed_repository(tmp_path / "repo")
    ran = gpufleet("doctor", str(root), "-o", "json")
    assert ran.returncode == 1, ran.stderr  # errors found
    assert "Traceback" not in ran.stderr
    findings = json.loads(ran.stdout)  # the whole of stdout is one JSON document
    assert all(set(f) == {"rule", "severity", "file", "object", "message", "fix"} for f in findings)
    found = by_rule(findings)
    assert found["GF023"] == {"DaemonSet/habana-system/gaudi-plugin-copy"}
    assert "GF024" not in found  # no hand-mounted devices in this repository
    assert found["GF025"] == {"MPIJob/ml/mnist-run"}
    assert found["GF026"] == {"MPIJob/ml/mnist-run"}
    assert found["GF027"] == {"DeviceConfig/kube-amd-gpu/default"}
    assert found["GF028"] == {"Pod/ml/pinned"}
    assert found["GF029"] == {"Pod/ml/serve"}
    assert found["GF031"] == {"Pod/ml/part"}  # the captured MI300X node is in SPX/NPS1 with the single strategy
    assert not any(f["file"].endswith(("rocm-k8s-ds-amdgpu-dp.yaml", "nvidia-ok.yaml")) for f in findings)
    assert not {"GF000", "GF090"} & set(found)  # every object valid, every kind known
    errors = {f["rule"] for f in findings if f["severity"] == "error"}
    assert {"GF023", "GF027", "GF028", "GF031"} <= errors


def test_sarif_on_a_mixed_vendor_repository(tmp_path: Path) -> None:
    root = mixed_repository(tmp_path / "repo")
    ran = gpufleet("doctor", str(root), "-o", "sarif")
    assert ran.returncode == 1 and "Traceback" not in ran.stderr
    sarif = json.loads(ran.stdout)
    assert sarif["version"] == "2.1.0" and sarif["$schema"].endswith("sarif-2.1.0.json")
    [run] = sarif["runs"]
    rules = run["tool"]["driver"]["rules"]
    assert {r["id"] for r in rules} >= VENDOR_RULES
    assert all(r["help"]["text"].startswith("Sources: ") for r in rules if r["id"] in VENDOR_RULES)
    results = [r for r in run["results"] if r["ruleId"] in VENDOR_RULES]
    assert {r["ruleId"] for r in results} >= {"GF023", "GF025", "GF026", "GF027", "GF028", "GF029", "GF031"}
    for result in results:
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
        assert result["level"] in ("error", "warning", "note") and ". Fix: " in result["message"]["text"]
        location = result["locations"][0]
        uri = location["physicalLocation"]["artifactLocation"]["uri"]
        assert Path(uri).is_file() and uri.startswith(str(root))
        assert location["logicalLocations"][0]["fullyQualifiedName"]


def test_list_rules_includes_the_vendor_rules_with_sources(tmp_path: Path) -> None:
    listed = {r["id"]: r for r in yaml.safe_load(gpufleet("doctor", "--list-rules", "-o", "yaml").stdout)}
    for rule_id in VENDOR_RULES:
        assert listed[rule_id]["sources"] and listed[rule_id]["title"]
    assert any("docs.habana.ai" in s for s in listed["GF026"]["sources"])
