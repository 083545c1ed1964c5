"""The rules whose meaning is vendor-neutral accept AMD's and Gaudi's resources and labels; NVIDIA's own rules
(sharing, MIG, the GPU Operator) are not misled by other vendors' objects of the same kind or image name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpufleet.doctor.facts import node_facts
from gpufleet.doctor.load import Document
from gpufleet.doctor.objects import K8sObject, gpu_resource_names, quantity
from tests.doctor.helpers import deployment, doctor, gpu_node, gpu_pod, hits, node_list, vendor_node


@pytest.mark.parametrize("name", ["amd.com/gpu", "amd.com/cpx_nps4", "habana.ai/gaudi"])
def test_a_request_without_a_limit_is_refused_for_every_vendor(tmp_path: Path, name: str) -> None:
    [finding] = hits(doctor(tmp_path, ("p.yaml", gpu_pod(requests={name: 1}))), "GF001")
    assert name in finding.message and f"resources.limits[{name!r}]" in finding.fix


@pytest.mark.parametrize(
    ("name", "advice"),
    [
        ("amd.com/gpu", "partition it"),
        ("amd.com/cpx_nps1", "partition it"),
        ("habana.ai/gaudi", "neither partitioned nor shared"),
        ("nvidia.com/gpu", "MIG slice"),
    ],
)
def test_a_fraction_is_refused_with_the_vendors_way_to_share(tmp_path: Path, name: str, advice: str) -> None:
    [finding] = hits(doctor(tmp_path, ("p.yaml", gpu_pod(limits={name: "500m"}))), "GF002")
    assert "must be an integer" in finding.message and advice in finding.fix


def test_accelerator_names_include_partitions_but_not_other_amd_devices() -> None:
    c = {"resources": {"limits": {"amd.com/qpx_nps4": 1, "amd.com/xilinx_u30_gen3x4_base_2-0": 1, "cpu": 4}}}
    assert gpu_resource_names(c) == {"amd.com/qpx_nps4"}


def test_two_amd_models_without_a_pin_name_amds_product_label(tmp_path: Path) -> None:
    nodes = node_list(
        vendor_node("a1", "amd", capacity={"amd.com/gpu": "8"}, labels={"amd.com/gpu.product-name": "MI300X_OAM"}),
        vendor_node("a2", "amd", capacity={"amd.com/gpu": "8"}, labels={"amd.com/gpu.product-name": "MI325X_OAM"}),
    )
    pod = gpu_pod(image="rocm/vllm:latest", limits={"amd.com/gpu": 8})
    [finding] = hits(doctor(tmp_path, ("d.yaml", deployment("serve", pod)), ("nodes.json", nodes)), "GF004")
    assert "MI300X_OAM" in finding.message and "amd.com/gpu.product-name" in finding.fix
    assert "the AMD node labeller" in finding.fix
    pinned = gpu_pod(image="rocm/vllm:latest", limits={"amd.com/gpu": 8})
    pinned["spec"]["nodeSelector"] = {"amd.com/gpu.product-name": "MI300X_OAM"}
    assert hits(doctor(tmp_path, ("d.yaml", deployment("serve", pinned)), ("nodes.json", nodes)), "GF004") == []


def test_gaudi_nodes_are_gpu_nodes_with_their_product(tmp_path: Path) -> None:
    node = vendor_node("g1", "intel", capacity={"habana.ai/gaudi": "8"}, labels={"habana.ai/device.type": "GAUDI2"})
    facts = node_facts(K8sObject(Document("nodes.json", 1, node)))
    assert facts.is_gpu_node and facts.gpus == 8 and facts.gpu_product == "GAUDI2"
    mixed = vendor_node("a1", "amd", capacity={"amd.com/spx_nps1": "5", "amd.com/cpx_nps1": "24"})
    assert node_facts(K8sObject(Document("nodes.json", 1, mixed))).gpus == 29
    assert quantity("95000Mi") == 95000 * 2**20 and quantity("500m") == 0.5


def test_a_rocm_image_without_a_gpu_is_told_to_ask_for_amd_gpus(tmp_path: Path) -> None:
    pod = gpu_pod(image="rocm/vllm:latest", limits={"cpu": 8})
    pod["spec"]["containers"][0]["args"] = ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"]
    [finding] = hits(doctor(tmp_path, ("p.yaml", pod)), "GF018")
    assert "amd.com/gpu: N" in finding.fix and "MIG" not in finding.fix


@pytest.mark.parametrize(
    ("expr", "resource"),
    [
        ("count by (node) (gpu_gfx_activity) < 8", "amd_com_gpu"),
        ("count(habanalabs_utilization) < 8", "habana_ai_gaudi"),
        ('kube_node_status_capacity{resource="amd_com_gpu"} < 8', "amd_com_gpu"),
    ],
)
def test_lost_gpu_alerts_on_amd_and_gaudi_series(tmp_path: Path, expr: str, resource: str) -> None:
    rules = {"groups": [{"name": "gpus", "rules": [{"alert": "GpuLost", "expr": expr}]}]}
    [finding] = hits(doctor(tmp_path, ("rules.yaml", rules)), "GF008")
    assert f'kube_node_status_allocatable{{resource="{resource}"}}' in finding.fix


def amd_operator() -> dict[str, Any]:
    """The AMD GPU Operator's controller Deployment: its image is also named gpu-operator."""
    container = {"name": "manager", "image": "docker.io/rocm/gpu-operator:v1.3.1"}
    labels = {"app.kubernetes.io/name": "gpu-operator-charts", "helm.sh/chart": "gpu-operator-charts-v1.3.1"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "amd-gpu-operator-controller-manager", "namespace": "kube-amd-gpu", "labels": labels},
        "spec": {
            "selector": {"matchLabels": {"app": "amd"}},
            "template": {"metadata": {"labels": {"app": "amd"}}, "spec": {"containers": [container]}},
        },
    }


def test_amds_operator_is_not_read_as_nvidias(tmp_path: Path) -> None:
    report = doctor(tmp_path, ("operator.yaml", amd_operator()))
    assert report.facts.gpu_operator_version is None
    assert [f for f in report.findings if f.rule in ("GF011", "GF012")] == []


def test_the_gaudi_base_operators_cluster_policy_is_not_nvidias(tmp_path: Path) -> None:
    shared = gpu_node(
        "gpu-01", labels={"nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "4"}
    )
    gaudi_policy = {
        "apiVersion": "habanalabs.habana.ai/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "habana-ai"},
        "spec": {"image_registry": "vault.habana.ai", "driver": {"driver_loader": {"hugepages": 4096}}},
    }
    report = doctor(tmp_path, ("policy.yaml", gaudi_policy), ("nodes.json", node_list(shared)))
    assert hits(report, "GF005") and hits(report, "GF015") == []
    nvidia_policy = {**gaudi_policy, "apiVersion": "nvidia.com/v1", "spec": {}}
    assert hits(doctor(tmp_path, ("policy.yaml", nvidia_policy), ("nodes.json", node_list(shared))), "GF015")
