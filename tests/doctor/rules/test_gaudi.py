"""GF025 (multi-node Gaudi jobs off the scale-out ports) and GF026 (huge pages), on jobs shaped as Habana's
Kubernetes documentation writes them."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tests.doctor.helpers import doctor, hits, kubectl_create, node_list, vendor_node
from tests.doctor.rules.test_vendors import GAUDI_IMAGE

# The resources of docs.habana.ai "Running Workloads on Kubernetes" (its Job example asks for these).
DOC_LIMITS = {"habana.ai/gaudi": 8, "memory": "409Gi", "hugepages-2Mi": "95000Mi"}


def worker_spec(limits: dict[str, Any] | None = None, **env: str) -> dict[str, Any]:
    """The pod spec of Habana's MPIJob example worker: hostIPC, SYS_NICE, the Gaudi PyTorch image."""
    c: dict[str, Any] = {
        "name": "mnist-worker",
        "image": GAUDI_IMAGE,
        "securityContext": {"capabilities": {"add": ["SYS_NICE"]}},
        "resources": {"limits": dict(DOC_LIMITS if limits is None else limits)},
    }
    if env:
        c["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return {"hostIPC": True, "containers": [c]}


def mpijob(workers: int = 2, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    """An MPIJob (kubeflow.org/v2beta1) as docs.habana.ai's "MPI Operator for Kubernetes" example: a launcher
    without Gaudi cards and `workers` workers of 8 cards each."""
    launcher = {"containers": [{"name": "mnist-launcher", "image": GAUDI_IMAGE, "command": ["/bin/bash", "-c"]}]}
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": "mnist-run", "namespace": "ml"},
        "spec": {
            "slotsPerWorker": 8,
            "runPolicy": {"cleanPodPolicy": "Running"},
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": {"spec": launcher}},
                "Worker": {"replicas": workers, "template": {"spec": spec or worker_spec()}},
            },
        },
    }


def gaudi_job(limits: dict[str, Any], parallelism: int = 1) -> dict[str, Any]:
    job = kubectl_create("job", "habanalabs-gaudi-demo", f"--image={GAUDI_IMAGE}", "--", "hl-smi")
    spec = job["spec"]["template"]["spec"]
    spec["hostIPC"] = True
    spec["containers"][0]["resources"] = {"limits": limits}
    job["spec"]["parallelism"] = parallelism
    return job


def gaudi_node(name: str, hugepages: str = "190000Mi", **capacity: str) -> dict[str, Any]:
    labels = {"habana.ai/device.type": "GAUDI3"}
    return vendor_node(
        name, "intel", capacity={"habana.ai/gaudi": "8", "hugepages-2Mi": hugepages, **capacity}, labels=labels
    )


# --- GF025 ---------------------------------------------------------------------------------------------------------


def test_habanas_mpijob_passes(tmp_path: Path) -> None:
    report = doctor(tmp_path, ("mpijob.yaml", mpijob()), ("nodes.json", node_list(gaudi_node("g1"), gaudi_node("g2"))))
    assert hits(report, "GF025") == [] and hits(report, "GF026") == []


def test_a_runtime_class_that_is_not_habanas_keeps_the_ports_out(tmp_path: Path) -> None:
    spec = worker_spec()
    spec["runtimeClassName"] = "nvidia"
    runtime_class = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "nvidia"}}
    runtime_class["handler"] = "nvidia"
    [finding] = hits(doctor(tmp_path, ("job.yaml", [mpijob(spec=spec), runtime_class])), "GF025")
    assert finding.severity == "warning" and finding.object == "MPIJob/ml/mnist-run"
    assert "(2 Gaudi pods in all, one job)" in finding.message and "nvidia (handler nvidia)" in finding.message
    assert "habana" in finding.fix


@pytest.mark.parametrize(
    ("runtime_class", "handler", "host_network"),
    [("habana", "", False), ("gaudi", "habana", False), ("nvidia", "nvidia", True)],
)
def test_the_habana_runtime_or_host_network_passes(
    tmp_path: Path, runtime_class: str, handler: str, host_network: bool
) -> None:
    spec = worker_spec()
    spec["runtimeClassName"] = runtime_class
    spec["hostNetwork"] = host_network
    objects = [mpijob(spec=spec)]
    if handler:
        rc = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": runtime_class}}
        objects.append({**rc, "handler": handler})
    assert hits(doctor(tmp_path, ("job.yaml", objects)), "GF025") == []


def test_hccl_over_ofi_forces_host_nics(tmp_path: Path) -> None:
    [finding] = hits(doctor(tmp_path, ("job.yaml", mpijob(spec=worker_spec(HCCL_OVER_OFI="1")))), "GF025")
    assert "HCCL_OVER_OFI=1" in finding.message and "remove HCCL_OVER_OFI" in finding.fix


def test_one_gaudi_pod_is_not_a_multi_node_job(tmp_path: Path) -> None:
    single = mpijob(workers=1, spec=worker_spec(HCCL_OVER_OFI="1"))
    assert hits(doctor(tmp_path, ("job.yaml", single)), "GF025") == []


def test_on_aws_the_job_needs_efa(tmp_path: Path) -> None:
    nodes = node_list(*(gaudi_node(f"dl1-{i}", **{"vpc.amazonaws.com/efa": "4"}) for i in range(2)))
    job = gaudi_job(DOC_LIMITS, parallelism=2)
    [finding] = hits(doctor(tmp_path, ("job.json", job), ("nodes.json", nodes)), "GF025")
    assert "vpc.amazonaws.com/efa" in finding.message and "dl1-0, dl1-1" in finding.message
    assert finding.object == "Job/habanalabs-gaudi-demo"
    with_efa = gaudi_job({**DOC_LIMITS, "vpc.amazonaws.com/efa": 4}, parallelism=2)
    with_efa["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "HCCL_OVER_OFI", "value": "1"}]
    assert hits(doctor(tmp_path, ("job.json", with_efa), ("nodes.json", nodes)), "GF025") == []


# --- GF026 ---------------------------------------------------------------------------------------------------------


def test_habanas_job_example_passes_and_is_valid(tmp_path: Path) -> None:
    report = doctor(tmp_path, ("job.json", gaudi_job(DOC_LIMITS)))
    assert hits(report, "GF026") == [] and hits(report, "GF000") == []


def test_a_gaudi_pod_without_huge_pages(tmp_path: Path) -> None:
    limits = {"habana.ai/gaudi": 8, "memory": "409Gi"}
    [finding] = hits(doctor(tmp_path, ("job.json", gaudi_job(limits))), "GF026")
    assert finding.severity == "warning" and "without huge pages" in finding.message
    assert "hugepages-2Mi: <H>" in finding.fix


def test_huge_pages_without_cpu_or_memory_are_refused(tmp_path: Path) -> None:
    limits = {"habana.ai/gaudi": 8, "hugepages-2Mi": "95000Mi"}
    [finding] = hits(doctor(tmp_path, ("job.json", gaudi_job(limits))), "GF026")
    assert finding.severity == "critical" and "HugePages require cpu or memory" in finding.message


def test_huge_pages_in_requests_only_are_refused(tmp_path: Path) -> None:
    job = gaudi_job({"habana.ai/gaudi": 8, "memory": "409Gi"})
    job["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"] = {"hugepages-2Mi": "95000Mi"}
    [finding] = hits(doctor(tmp_path, ("job.json", job)), "GF026")
    assert finding.severity == "critical" and "without a limit" in finding.message


def test_gaudi_nodes_without_huge_pages(tmp_path: Path) -> None:
    nodes = node_list(gaudi_node("g1"), gaudi_node("g2", hugepages="0"), gaudi_node("g3", hugepages="0"))
    found = hits(doctor(tmp_path, ("job.json", gaudi_job(DOC_LIMITS)), ("nodes.json", nodes)), "GF026")
    assert [f.object for f in found] == ["Node/g2"]
    assert "g2, g3" in found[0].message and "vm.nr_hugepages" in found[0].fix


def test_more_huge_pages_than_any_usable_gaudi_node_has(tmp_path: Path) -> None:
    nodes = node_list(gaudi_node("g1", hugepages="42000Mi"), gaudi_node("g2", hugepages="42000Mi"))
    found = hits(doctor(tmp_path, ("job.json", gaudi_job(DOC_LIMITS)), ("nodes.json", nodes)), "GF026")
    [finding] = [f for f in found if f.object == "Job/habanalabs-gaudi-demo"]
    assert finding.severity == "critical" and "95000Mi" in finding.message and "42000Mi" in finding.message
    fits = copy.deepcopy(DOC_LIMITS) | {"hugepages-2Mi": "42000Mi"}
    assert hits(doctor(tmp_path, ("job.json", gaudi_job(fits)), ("nodes.json", nodes)), "GF026") == []
