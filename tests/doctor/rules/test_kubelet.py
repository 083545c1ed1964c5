"""GF042-GF045 on kubelet configurations, read as the kubelet's config file (KubeletConfiguration) and as configz
JSON (tests/doctor/data/kubelet, with their sources): each way a kubelet cannot give GPU pods aligned GPUs, NICs,
CPUs and memory is named with its fix, and an aligned configuration passes."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import yaml

from gpufleet.doctor.catalog import rule_catalog
from gpufleet.model import Severity
from tests.doctor.helpers import DATA, doctor, gpu_node, gpu_pod, hits, node_list

KUBELET = DATA / "kubelet"
RULES = ("GF042", "GF043", "GF044", "GF045")


def configz(**fields: Any) -> dict[str, Any]:
    """The kind node's configz capture, with `fields` changed."""
    data = json.loads((KUBELET / "configz_kind_defaults.json").read_text())
    data["kubeletconfig"].update(fields)
    return data


def config_file(**fields: Any) -> dict[str, Any]:
    """The GPU node's KubeletConfiguration file, with `fields` changed (None removes one)."""
    data = yaml.safe_load((KUBELET / "kubelet_config_gpu.yaml").read_text())
    for name, value in fields.items():
        if value is None:
            data.pop(name, None)
        else:
            data[name] = value
    return data


def guaranteed(
    name: str = "train", gpus: int = 1, cpu: str = "16", memory: str = "64Gi", **extra: Any
) -> dict[str, Any]:
    return gpu_pod(name, limits={"nvidia.com/gpu": gpus, "cpu": cpu, "memory": memory, **extra})


def found(report: Any) -> dict[str, list[Any]]:
    return {rule: hits(report, rule) for rule in RULES}


def test_the_rules_are_in_the_catalog_with_sources_on_kubernetes_io() -> None:
    catalog = rule_catalog()
    for rule in RULES:
        assert rule in catalog and any("kubernetes.io/docs" in s for s in catalog[rule].sources)


def test_configz_at_the_defaults_aligns_nothing(tmp_path: Path) -> None:
    report = doctor(tmp_path, ("configz.json", configz()))
    [finding] = hits(report, "GF042")
    assert finding.severity is Severity.warning and finding.file.endswith("configz.json")
    assert "topologyManagerPolicy is none" in finding.message and "restricted" in finding.fix
    assert not hits(report, "GF090")  # configz is a config the doctor reads, not an unknown document


def test_an_aligned_gpu_node_passes(tmp_path: Path) -> None:
    report = doctor(
        tmp_path,
        ("kubelet.yaml", config_file(topologyManagerScope="pod")),
        ("pods.yaml", [guaranteed(), guaranteed("nic", **{"rdma/rdma_shared_device_a": 1})]),
        ("nodes.json", node_list(gpu_node("dgx-001"))),
    )
    assert found(report) == {rule: [] for rule in RULES}


def test_best_effort_admits_misaligned_pods(tmp_path: Path) -> None:
    [finding] = hits(doctor(tmp_path, ("kubelet.yaml", config_file(topologyManagerPolicy="best-effort"))), "GF042")
    assert finding.severity is Severity.info and "still admitted" in finding.message


def test_container_scope_aligns_a_multi_container_gpu_pod_container_by_container(tmp_path: Path) -> None:
    pod = guaranteed()
    sidecar = {"name": "nic", "image": "busybox", "resources": {"limits": {"rdma/rdma_shared_device_a": 1, "cpu": "2",
                                                                             "memory": "1Gi"}}}  # fmt: skip
    pod["spec"]["containers"].append(sidecar)
    report = doctor(tmp_path, ("kubelet.yaml", config_file()), ("pod.yaml", pod))
    [finding] = hits(report, "GF042")
    assert "topologyManagerScope is container" in finding.message and "(main, nic)" in finding.message
    assert "topologyManagerScope: pod" in finding.fix
    clean = doctor(tmp_path / "pod", ("kubelet.yaml", config_file(topologyManagerScope="pod")), ("pod.yaml", pod))
    assert not hits(clean, "GF042")


def test_single_numa_node_refuses_pods_bigger_than_one_numa_node(tmp_path: Path) -> None:
    kubelet = ("kubelet.yaml", config_file(topologyManagerPolicy="single-numa-node", topologyManagerScope="pod"))
    nodes = ("nodes.json", node_list(gpu_node("dgx-001")))
    whole = ("pod.yaml", guaranteed(gpus=8, cpu="200"))
    # the host facts say 4 GPUs per socket: an 8-GPU pod is refused, a 4-GPU pod fits
    facts = {"nodes": {"dgx-001": {"gpuNumaNodes": {i: i // 4 for i in range(8)}}}}
    [refused] = hits(doctor(tmp_path, kubelet, nodes, whole, facts=facts), "GF042")
    assert refused.severity is Severity.critical and "more than one NUMA node holds (4" in refused.message
    assert not hits(doctor(tmp_path / "half", kubelet, nodes, ("pod.yaml", guaranteed(gpus=4)), facts=facts), "GF042")
    # without host facts, a whole-node pod is still flagged, as a warning that says how to check
    [guess] = hits(doctor(tmp_path / "guess", kubelet, nodes, whole), "GF042")
    assert guess.severity is Severity.warning and "nvidia-smi topo -m" in guess.fix


def test_static_cpu_manager_needs_a_cpu_reservation(tmp_path: Path) -> None:
    for name, data in (
        ("configz.json", configz(cpuManagerPolicy="static", topologyManagerPolicy="restricted")),
        ("kubelet.yaml", config_file(reservedSystemCPUs=None)),
    ):
        [finding] = hits(doctor(tmp_path / name, (name, data)), "GF043")
        assert finding.severity is Severity.critical and "will not start" in finding.message
        assert "reservedSystemCPUs" in finding.fix
    reserved = config_file(reservedSystemCPUs=None, kubeReserved={"cpu": "500m"}, systemReserved={"cpu": "500m"})
    assert not hits(doctor(tmp_path / "reserved", ("kubelet.yaml", reserved)), "GF043")


def test_an_aligning_policy_without_the_static_cpu_manager_leaves_cpus_out(tmp_path: Path) -> None:
    data = configz(topologyManagerPolicy="restricted", topologyManagerScope="pod")
    [finding] = hits(doctor(tmp_path, ("configz.json", data)), "GF043")
    assert "cpuManagerPolicy is none" in finding.message and "cpu_manager_state" in finding.fix


def test_gpu_pods_that_the_static_policy_cannot_pin(tmp_path: Path) -> None:
    burstable = gpu_pod("burst", limits={"nvidia.com/gpu": 1, "cpu": "16"}, requests={"cpu": "8", "memory": "8Gi"})
    fractional = guaranteed("frac", cpu="15500m")
    report = doctor(tmp_path, ("kubelet.yaml", config_file()), ("pods.yaml", [burstable, fractional, guaranteed()]))
    messages = [f.message for f in hits(report, "GF043")]
    assert len(messages) == 2 and all(f.severity is Severity.info for f in hits(report, "GF043"))
    assert "Pod/ml/burst" in messages[0] and "not Guaranteed" in messages[0]
    assert "Pod/ml/frac" in messages[1] and "whole number of CPUs" in messages[1]


def test_too_few_cpus_or_too_little_memory_per_gpu_strands_gpus(tmp_path: Path) -> None:
    node = gpu_node("dgx-001")  # 8 GPUs, 220 allocatable CPUs, about 1907Gi of memory
    report = doctor(
        tmp_path, ("kubelet.yaml", config_file()), ("nodes.json", node_list(node)), ("pod.yaml", guaranteed(cpu="32"))
    )
    [cpus] = hits(report, "GF044")
    assert cpus.severity is Severity.warning and cpus.object == "Node/dgx-001"
    assert "only 6 such pod(s) fit per node and 2 GPU(s) stay idle" in cpus.message and "27.5 CPUs per pod" in cpus.fix
    memory = hits(doctor(tmp_path / "mem", ("nodes.json", node_list(node)), ("p.yaml", guaranteed(memory="300Gi"))),
                  "GF044")  # fmt: skip
    assert len(memory) == 1 and "memory" in memory[0].message and "2 GPU(s) stay idle" in memory[0].message
    assert not hits(doctor(tmp_path / "ok", ("nodes.json", node_list(node)), ("p.yaml", guaranteed())), "GF044")
    # alike nodes are named in one finding; a node the pod does not select is not judged
    other = gpu_node("dgx-009", product="NVIDIA-H200")
    many = node_list(node, gpu_node("dgx-002"), gpu_node("dgx-003"), gpu_node("dgx-004"), other)
    pod = guaranteed(cpu="32")
    pod["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    [grouped] = hits(doctor(tmp_path / "many", ("nodes.json", many), ("p.yaml", pod)), "GF044")
    assert grouped.message.startswith("dgx-001, dgx-002, dgx-003 and 1 more have 220 allocatable CPUs")


def test_nic_resources_without_an_aligning_policy(tmp_path: Path) -> None:
    pod = ("pod.yaml", guaranteed(**{"nvidia.com/hca_shared_devices_a": 1}))
    [finding] = hits(doctor(tmp_path, ("configz.json", configz()), pod), "GF045")
    assert "nvidia.com/hca_shared_devices_a" in finding.message and "topologyManagerPolicy is none" in finding.message
    # no pod given, but the GPU nodes offer NICs
    node = copy.deepcopy(gpu_node("dgx-001"))
    node["status"]["capacity"]["rdma/rdma_shared_device_a"] = "63"
    [offered] = hits(doctor(tmp_path / "node", ("configz.json", configz()), ("nodes.json", node_list(node))), "GF045")
    assert offered.severity is Severity.info and "rdma/rdma_shared_device_a" in offered.message
    aligned = ("kubelet.yaml", config_file(topologyManagerScope="pod"))
    assert not hits(doctor(tmp_path / "aligned", aligned, pod), "GF045")
