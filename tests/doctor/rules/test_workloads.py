from __future__ import annotations

import copy
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from gpufleet.doctor.objects import exact_quantity, node_selection_matches, tolerates
from gpufleet.doctor.rules.workloads import signals
from gpufleet.nccl.advisor import lint_rules
from tests.doctor.helpers import deployment, doctor, gpu_node, gpu_pod, hits, node_list

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
SHM = {"name": "dshm", "emptyDir": {"medium": "Memory"}}
SHM_MOUNT = {"name": "dshm", "mountPath": "/dev/shm"}


def main(pod: dict[str, Any]) -> dict[str, Any]:
    return pod["spec"]["containers"][0]


def with_main(pod: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """`pod` with fields set on its container (command, args, env as a dict, volumeMounts)."""
    pod = copy.deepcopy(pod)
    env = fields.pop("env", None)
    if env is not None:
        main(pod)["env"] = [{"name": k, "value": v} for k, v in env.items()]
    main(pod).update(fields)
    return pod


def job(kind: str, pod: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A Kubeflow training job (PyTorchJob, MPIJob) with one Worker role running `pod`'s spec."""
    key = {"PyTorchJob": "pytorchReplicaSpecs", "MPIJob": "mpiReplicaSpecs"}[kind]
    specs = {"Worker": {"replicas": 2, "template": {"spec": pod["spec"]}}, **extra}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": kind,
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {key: specs},
    }


def apiserver(*flags: str) -> dict[str, Any]:
    """A kube-apiserver static pod as `kubectl get pod -n kube-system -o yaml` shows it."""
    container = {
        "name": "kube-apiserver",
        "image": "registry.k8s.io/kube-apiserver:v1.33.2",
        "command": ["kube-apiserver", "--secure-port=6443", *flags],
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "kube-apiserver-cp1", "namespace": "kube-system", "uid": "u1"},
        "spec": {"containers": [container]},
    }


# --- helpers the rules stand on -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", "0.5"),
        (0.5, "0.5"),
        ("1", "1"),
        (2, "2"),
        ("1000m", "1"),
        ("1Gi", str(2**30)),
        ("512Mi", str(2**29)),
        ("1G", "1000000000"),
        ("1e3", "1000"),
        ("1.5", "1.5"),
    ],
)
def test_quantities_are_read_exactly(text: Any, value: str) -> None:
    assert exact_quantity(text) == Decimal(value)


def test_what_is_not_a_quantity_is_none() -> None:
    assert [exact_quantity(v) for v in ("two", "", None, True, "1Gb")] == [None] * 5


TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("toleration", "expected"),
    [
        ({"operator": "Exists"}, True),  # empty key with Exists: every taint
        ({"key": "nvidia.com/gpu", "operator": "Exists"}, True),  # empty effect: every effect
        ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}, True),
        ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}, True),  # Equal is the default
        ({"key": "nvidia.com/gpu", "operator": "Equal", "value": "true"}, False),
        ({"key": "nvidia.com/gpu", "operator": "Equal"}, False),  # empty value vs "present"
        ({"key": "gpu", "operator": "Exists"}, False),
    ],
)
def test_tolerations_match_taints_as_kubernetes_does(toleration: dict[str, Any], expected: bool) -> None:
    assert tolerates(toleration, TAINT) is expected


def test_lt_and_gt_tolerations_compare_the_taint_value_as_an_integer() -> None:
    taint = {"key": "example.com/score", "value": "5", "effect": "NoSchedule"}
    assert tolerates({"key": "example.com/score", "operator": "Lt", "value": "10"}, taint)  # 5 < 10
    assert not tolerates({"key": "example.com/score", "operator": "Gt", "value": "10"}, taint)
    assert not tolerates({"key": "example.com/score", "operator": "Lt", "value": "ten"}, taint)


def test_node_selection_follows_selector_and_required_affinity() -> None:
    labels = {"pool": "h100", "nvidia.com/gpu.memory": "81559"}

    def affinity(*terms: dict[str, Any]) -> dict[str, Any]:
        required = {"nodeSelectorTerms": list(terms)}
        return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}}

    def expr(key: str, op: str, *values: str) -> dict[str, Any]:
        return {"matchExpressions": [{"key": key, "operator": op, "values": list(values)}]}

    assert node_selection_matches({"nodeSelector": {"pool": "h100"}}, "n1", labels)
    assert not node_selection_matches({"nodeSelector": {"pool": "a100"}}, "n1", labels)
    assert node_selection_matches(affinity(expr("pool", "In", "a100"), expr("pool", "In", "h100")), "n1", labels)
    assert not node_selection_matches(affinity(expr("pool", "NotIn", "h100")), "n1", labels)
    assert node_selection_matches(affinity(expr("zone", "NotIn", "x")), "n1", labels)  # absent label: NotIn holds
    assert node_selection_matches(affinity(expr("nvidia.com/gpu.memory", "Gt", "40000")), "n1", labels)
    assert not node_selection_matches(affinity(expr("nvidia.com/gpu.memory", "Lt", "40000")), "n1", labels)
    assert not node_selection_matches(affinity({}), "n1", labels)  # an empty term matches nothing
    by_name = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
    assert node_selection_matches(affinity(by_name), "n1", labels)
    assert not node_selection_matches(affinity(by_name), "n2", labels)
    assert not node_selection_matches({"nodeName": "n2"}, "n1", labels)


def test_every_signal_compiles_and_names_its_source() -> None:
    s = signals()
    patterns = [
        *s.gpu_images,
        *s.gpu_commands,
        *s.gpu_env,
        *s.training_commands,
        *s.cpu_only.images,
        *s.cpu_only.commands,
    ]
    for p in patterns:
        re.compile(p.pattern)
        assert p.source and p.what
    for server in s.inference_servers:
        assert server.source and (server.images or server.commands)
        for p in [*server.images, *server.commands]:
            re.compile(p)


# --- GF001 ----------------------------------------------------------------------------------------------------------


def test_gf001_gpu_in_requests_only_is_an_error(tmp_path: Path) -> None:
    pod = gpu_pod(requests={"nvidia.com/gpu": 1})
    report = doctor(tmp_path, ("d.yaml", deployment("train", pod)))
    [finding] = hits(report, "GF001")
    assert finding.severity == "critical"
    assert finding.object == "Deployment/ml/train"
    assert "nvidia.com/gpu" in finding.message and "limits" in finding.fix


def test_gf001_gpu_in_limits_is_fine(tmp_path: Path) -> None:
    pod = gpu_pod(limits={"nvidia.com/gpu": 2}, requests={"nvidia.com/gpu": 2})
    assert hits(doctor(tmp_path, ("p.yaml", pod)), "GF001") == []


# --- GF002 ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("amount", ["500m", 0.5, "1.5"])
def test_gf002_a_fractional_gpu_is_an_error(tmp_path: Path, amount: Any) -> None:
    report = doctor(tmp_path, ("d.yaml", deployment("infer", gpu_pod(limits={"nvidia.com/gpu": amount}))))
    [finding] = hits(report, "GF002")
    assert finding.severity == "critical" and finding.object == "Deployment/ml/infer"
    assert repr(amount) in finding.message and "must be an integer" in finding.message
    assert "nvidia.com/mig-1g.10gb" in finding.fix and "MPS" in finding.fix and "DRA" in finding.fix


def test_gf002_a_fractional_mig_slice_is_an_error_too(tmp_path: Path) -> None:
    pod = gpu_pod(limits={"nvidia.com/mig-1g.10gb": "0.5"}, requests={"nvidia.com/mig-1g.10gb": "0.5"})
    [finding] = hits(doctor(tmp_path, ("p.yaml", pod)), "GF002")
    assert "MIG slices are whole devices" in finding.message
    assert "in limits and nvidia.com/mig-1g.10gb: '0.5' in requests" in finding.message


@pytest.mark.parametrize("amount", [1, "2", "1000m", 8])
def test_gf002_whole_gpus_are_fine(tmp_path: Path, amount: Any) -> None:
    assert hits(doctor(tmp_path, ("p.yaml", gpu_pod(limits={"nvidia.com/gpu": amount}))), "GF002") == []


# --- GF003 ----------------------------------------------------------------------------------------------------------

TAINTED = node_list(gpu_node("gpu-01"), gpu_node("gpu-02"))  # nvidia.com/gpu:NoSchedule


def test_gf003_says_nothing_without_node_facts(tmp_path: Path) -> None:
    assert hits(doctor(tmp_path, ("p.yaml", gpu_pod())), "GF003") == []


def test_gf003_a_gpu_pod_without_the_toleration_stays_pending(tmp_path: Path) -> None:
    report = doctor(tmp_path, ("d.yaml", deployment("train", gpu_pod())), ("nodes.json", TAINTED))
    [finding] = hits(report, "GF003")
    assert finding.severity == "critical" and finding.object == "Deployment/ml/train"
    assert "nvidia.com/gpu:NoSchedule (2 nodes)" in finding.message
    assert "Pending forever" in finding.message
    assert "{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}" in finding.fix
    assert "ExtendedResourceToleration" in finding.fix and "GPU Operator" in finding.fix


@pytest.mark.parametrize(
    "toleration",
    [GPU_TOLERATION, {"operator": "Exists"}, {"key": "nvidia.com/gpu", "operator": "Exists"}],
)
def test_gf003_a_matching_toleration_is_fine(tmp_path: Path, toleration: dict[str, Any]) -> None:
    pod = gpu_pod(tolerations=[toleration])
    assert hits(doctor(tmp_path, ("p.yaml", pod), ("nodes.json", TAINTED)), "GF003") == []


def test_gf003_a_toleration_for_the_wrong_value_or_effect_does_not_count(tmp_path: Path) -> None:
    nodes = node_list(
        gpu_node("gpu-01", taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}])
    )
    for toleration in (
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"},
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"},
    ):
        [finding] = hits(doctor(tmp_path, ("p.yaml", gpu_pod(tolerations=[toleration])), ("n.json", nodes)), "GF003")
        assert "nvidia.com/gpu=present:NoSchedule (1 node)" in finding.message


def test_gf003_the_pods_selector_decides_which_gpu_nodes_count(tmp_path: Path) -> None:
    nodes = node_list(
        gpu_node(
            "h100-01", labels={"pool": "train"}, taints=[{"key": "dedicated", "value": "train", "effect": "NoSchedule"}]
        ),
        gpu_node("t4-01", product="Tesla-T4", labels={"pool": "dev"}, taints=[]),
    )
    # free to go anywhere, the untainted T4 node takes it
    assert hits(doctor(tmp_path, ("p.yaml", gpu_pod()), ("n.json", nodes)), "GF003") == []
    # pinned to the tainted pool by its nodeSelector ...
    [finding] = hits(doctor(tmp_path, ("p.yaml", gpu_pod(nodeSelector={"pool": "train"})), ("n.json", nodes)), "GF003")
    assert "dedicated=train:NoSchedule (1 node)" in finding.message and "1 GPU node(s)" in finding.message
    # ... or by a required node affinity
    term = {
        "matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-H100-80GB-HBM3"]}]
    }
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}
    assert len(hits(doctor(tmp_path, ("p.yaml", gpu_pod(affinity=affinity)), ("n.json", nodes)), "GF003")) == 1


def test_gf003_only_nodes_offering_the_resource_count(tmp_path: Path) -> None:
    amd = gpu_node("mi300-01", taints=[])
    amd["status"]["capacity"] = amd["status"]["allocatable"] = {"amd.com/gpu": "8"}
    nodes = node_list(gpu_node("h100-01"), amd)  # the untainted node has no NVIDIA GPU
    assert len(hits(doctor(tmp_path, ("p.yaml", gpu_pod()), ("n.json", nodes)), "GF003")) == 1


def test_gf003_prefer_no_schedule_and_passing_condition_taints_do_not_block(tmp_path: Path) -> None:
    taints = [
        {"key": "nvidia.com/gpu", "effect": "PreferNoSchedule"},
        {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
        {"key": "ToBeDeletedByClusterAutoscaler", "value": "1700000000", "effect": "NoSchedule"},
    ]
    nodes = node_list(gpu_node("gpu-01", taints=taints))
    assert hits(doctor(tmp_path, ("p.yaml", gpu_pod()), ("n.json", nodes)), "GF003") == []


def test_gf003_the_extended_resource_toleration_plugin_tolerates_resource_named_no_schedule_taints(
    tmp_path: Path,
) -> None:
    plugin = apiserver("--enable-admission-plugins=NodeRestriction,ExtendedResourceToleration")
    report = doctor(tmp_path, ("p.yaml", gpu_pod()), ("n.json", TAINTED), ("apiserver.yaml", plugin))
    assert hits(report, "GF003") == []
    # a NoExecute taint, or a taint keyed otherwise, is not covered by it
    nodes = node_list(gpu_node("gpu-01", taints=[{"key": "nvidia.com/gpu", "effect": "NoExecute"}]))
    report = doctor(tmp_path, ("p.yaml", gpu_pod()), ("n.json", nodes), ("apiserver.yaml", plugin))
    [finding] = hits(report, "GF003")
    assert "ExtendedResourceToleration (kube-apiserver in" in finding.message
    # the plugin given as a separate argument, but also disabled: not enabled
    disabled = apiserver(
        "--enable-admission-plugins",
        "ExtendedResourceToleration",
        "--disable-admission-plugins=ExtendedResourceToleration",
    )
    report = doctor(tmp_path, ("p.yaml", gpu_pod()), ("n.json", TAINTED), ("apiserver.yaml", disabled))
    assert len(hits(report, "GF003")) == 1


def test_gf003_gke_runs_the_plugin(tmp_path: Path) -> None:
    gke = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    nodes = node_list(gpu_node("gke-gpu-1", taints=gke, labels={"cloud.google.com/gke-nodepool": "gpu"}))
    assert hits(doctor(tmp_path, ("p.yaml", gpu_pod()), ("n.json", nodes)), "GF003") == []


def test_gf003_a_daemonset_places_no_pod_and_the_runtime_class_adds_tolerations(tmp_path: Path) -> None:
    ds = deployment("burn", gpu_pod())
    ds["kind"] = "DaemonSet"
    del ds["spec"]["replicas"]
    [finding] = hits(doctor(tmp_path, ("ds.yaml", ds), ("n.json", TAINTED)), "GF003")
    assert "the DaemonSet places no pod on them" in finding.message
    runtime_class = {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": "nvidia"},
        "handler": "nvidia",
        "scheduling": {"tolerations": [GPU_TOLERATION]},
    }
    pod = gpu_pod(runtimeClassName="nvidia")
    assert hits(doctor(tmp_path, ("p.yaml", [runtime_class, pod]), ("n.json", TAINTED)), "GF003") == []


# --- GF004 ----------------------------------------------------------------------------------------------------------

MIXED = node_list(
    gpu_node("h100-01", taints=[]), gpu_node("h100-02", taints=[]), gpu_node("t4-01", product="Tesla-T4", taints=[])
)


def test_gf004_a_gpu_pod_free_to_land_on_several_models_is_a_warning(tmp_path: Path) -> None:
    [finding] = hits(doctor(tmp_path, ("d.yaml", deployment("infer", gpu_pod())), ("n.json", MIXED)), "GF004")
    assert finding.severity == "warning"
    assert "NVIDIA-H100-80GB-HBM3 (2 nodes), Tesla-T4 (1 node)" in finding.message
    assert "nvidia.com/gpu.product" in finding.fix


@pytest.mark.parametrize(
    "spec",
    [
        {"nodeSelector": {"nvidia.com/gpu.product": "Tesla-T4"}},
        {"nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}},
        {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": "node.kubernetes.io/instance-type",
                                        "operator": "In",
                                        "values": ["p5.48xlarge"],
                                    }
                                ]
                            }
                        ]
                    }
                }
            }
        },
    ],
)
def test_gf004_a_selector_on_a_model_label_pins_it(tmp_path: Path, spec: dict[str, Any]) -> None:
    assert hits(doctor(tmp_path, ("p.yaml", gpu_pod(**spec)), ("n.json", MIXED)), "GF004") == []


def test_gf004_also_speaks_when_the_pod_cannot_schedule_yet(tmp_path: Path) -> None:
    tainted = node_list(gpu_node("h100-01"), gpu_node("t4-01", product="Tesla-T4"))
    report = doctor(tmp_path, ("p.yaml", gpu_pod()), ("n.json", tainted))
    assert len(hits(report, "GF003")) == 1 and len(hits(report, "GF004")) == 1  # both problems in one run


def test_gf004_one_model_mig_slices_and_taints_that_pick_one_model_are_fine(tmp_path: Path) -> None:
    one_model = node_list(gpu_node("h100-01", taints=[]), gpu_node("h100-02", taints=[]))
    assert hits(doctor(tmp_path, ("p.yaml", gpu_pod()), ("n.json", one_model)), "GF004") == []
    mig_nodes = [gpu_node("h100-01", taints=[]), gpu_node("a100-01", product="NVIDIA-A100-SXM4-80GB", taints=[])]
    for node in mig_nodes:  # both models offer the 1g.10gb slice (mixed MIG strategy)
        node["status"]["capacity"]["nvidia.com/mig-1g.10gb"] = node["status"]["allocatable"][
            "nvidia.com/mig-1g.10gb"
        ] = "7"
    mig = gpu_pod(limits={"nvidia.com/mig-1g.10gb": 1})
    assert hits(doctor(tmp_path, ("p.yaml", mig), ("n.json", node_list(*mig_nodes))), "GF004") == []
    assert len(hits(doctor(tmp_path, ("p.yaml", gpu_pod()), ("n.json", node_list(*mig_nodes))), "GF004")) == 1
    by_taint = node_list(
        gpu_node("h100-01"),
        gpu_node("t4-01", product="Tesla-T4", taints=[{"key": "tier", "value": "dev", "effect": "NoSchedule"}]),
    )
    assert (
        hits(doctor(tmp_path, ("p.yaml", gpu_pod(tolerations=[GPU_TOLERATION])), ("n.json", by_taint)), "GF004") == []
    )


def test_gf004_time_sliced_and_mig_product_labels_are_the_same_model(tmp_path: Path) -> None:
    nodes = node_list(
        gpu_node("t4-01", product="Tesla-T4", taints=[]), gpu_node("t4-02", product="Tesla-T4-SHARED", taints=[])
    )
    assert hits(doctor(tmp_path, ("p.yaml", gpu_pod()), ("n.json", nodes)), "GF004") == []


# --- GF013 ----------------------------------------------------------------------------------------------------------


def test_gf013_a_multi_gpu_pod_without_dev_shm_is_an_error(tmp_path: Path) -> None:
    [finding] = hits(doctor(tmp_path, ("p.yaml", gpu_pod(limits={"nvidia.com/gpu": 8}))), "GF013")
    assert finding.severity == "critical"
    assert "8 GPUs in one pod" in finding.message and "64 MiB" in finding.message and "Bus error" in finding.message
    assert "emptyDir {medium: Memory}" in finding.fix and "hostIPC" in finding.fix


def test_gf013_a_single_gpu_training_job_without_dev_shm_is_a_warning(tmp_path: Path) -> None:
    [finding] = hits(doctor(tmp_path, ("j.yaml", job("PyTorchJob", gpu_pod()))), "GF013")
    assert finding.severity == "warning" and "a PyTorchJob with GPUs" in finding.message
    torchrun = with_main(gpu_pod(), command=["torchrun", "--nproc_per_node=1", "train.py"])
    [finding] = hits(doctor(tmp_path, ("p.yaml", torchrun)), "GF013")
    assert "runs torchrun" in finding.message
    nccl = with_main(gpu_pod(), env={"NCCL_DEBUG": "WARN"})
    assert len(hits(doctor(tmp_path, ("d.yaml", deployment("x", nccl))), "GF013")) == 1


def test_gf013_a_single_gpu_pod_that_is_not_training_is_left_alone(tmp_path: Path) -> None:
    assert hits(doctor(tmp_path, ("p.yaml", gpu_pod())), "GF013") == []


@pytest.mark.parametrize(
    "volume",
    [
        SHM,
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}},
        {"name": "dshm", "hostPath": {"path": "/dev/shm"}},
    ],
)
def test_gf013_a_memory_backed_dev_shm_is_fine(tmp_path: Path, volume: dict[str, Any]) -> None:
    pod = with_main(gpu_pod(limits={"nvidia.com/gpu": 8}, volumes=[volume]), volumeMounts=[SHM_MOUNT])
    assert hits(doctor(tmp_path, ("p.yaml", pod)), "GF013") == []
    assert hits(doctor(tmp_path, ("p.yaml", gpu_pod(limits={"nvidia.com/gpu": 8}, hostIPC=True))), "GF013") == []


def test_gf013_a_small_or_disk_backed_dev_shm_is_a_warning(tmp_path: Path) -> None:
    small = {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "512Mi"}}
    pod = with_main(gpu_pod(limits={"nvidia.com/gpu": 8}, volumes=[small]), volumeMounts=[SHM_MOUNT])
    [finding] = hits(doctor(tmp_path, ("p.yaml", pod)), "GF013")
    assert finding.severity == "warning" and "sizeLimit 512Mi (under 1 GiB)" in finding.message
    disk = with_main(
        gpu_pod(limits={"nvidia.com/gpu": 8}, volumes=[{"name": "dshm", "emptyDir": {}}]), volumeMounts=[SHM_MOUNT]
    )
    [finding] = hits(doctor(tmp_path, ("p.yaml", disk)), "GF013")
    assert finding.severity == "warning" and "not memory-backed" in finding.message


def test_gf013_every_gpu_container_needs_the_mount(tmp_path: Path) -> None:
    pod = with_main(gpu_pod(limits={"nvidia.com/gpu": 4}, volumes=[SHM]), volumeMounts=[SHM_MOUNT])
    second = {
        "name": "sidecar",
        "image": "nvcr.io/nvidia/pytorch:25.01-py3",
        "resources": {"limits": {"nvidia.com/gpu": 4}},
    }
    pod["spec"]["containers"].append(second)
    [finding] = hits(doctor(tmp_path, ("p.yaml", pod)), "GF013")
    assert "container 'sidecar'" in finding.message


# --- GF014 ----------------------------------------------------------------------------------------------------------


def test_gf014_harmful_nccl_settings_keep_the_lints_message_fix_and_severity(tmp_path: Path) -> None:
    pod = with_main(
        gpu_pod(),
        env={"NCCL_IB_DISABLE": "1", "NCCL_DEBUG": "TRACE", "NCCL_SHM_DISABLE": "1", "NCCL_SOCKET_IFNAME": "eth0"},
    )
    found = {" ".join(f.message.split()[:5]): f for f in hits(doctor(tmp_path, ("p.yaml", pod)), "GF014")}
    assert set(found) == {
        "container 'main' (spec) sets NCCL_IB_DISABLE=1",
        "container 'main' (spec) sets NCCL_DEBUG=TRACE",
        "container 'main' (spec) sets NCCL_SHM_DISABLE=1",
    }
    rules = {r.id: r for r in lint_rules()}
    ib = found["container 'main' (spec) sets NCCL_IB_DISABLE=1"]
    assert ib.severity == "critical" and rules["ib-disabled"].message in ib.message
    assert ib.fix == rules["ib-disabled"].fix
    assert ib.message.count("NCCL_IB_DISABLE=1") == 1
    assert found["container 'main' (spec) sets NCCL_DEBUG=TRACE"].severity == "warning"
    assert found["container 'main' (spec) sets NCCL_SHM_DISABLE=1"].severity == "info"


def test_gf014_names_the_container_of_a_training_job(tmp_path: Path) -> None:
    pod = with_main(gpu_pod(), env={"NCCL_PROTO": "LL128"})
    found = hits(doctor(tmp_path, ("j.yaml", job("PyTorchJob", pod))), "GF014")
    assert {f.severity for f in found} == {"critical", "warning"}  # forced LL128, and a forced protocol
    assert all("spec.pytorchReplicaSpecs.Worker.template.spec" in f.message for f in found)


# --- GF018 ----------------------------------------------------------------------------------------------------------


def cpu_pod(image: str, **container: Any) -> dict[str, Any]:
    return with_main(gpu_pod(image=image, limits={"cpu": "4", "memory": "16Gi"}), **container)


@pytest.mark.parametrize(
    ("pod", "signal"),
    [
        (cpu_pod("nvcr.io/nvidia/pytorch:25.01-py3"), "image nvcr.io/nvidia/pytorch:25.01-py3"),
        (cpu_pod("python:3.11", command=["deepspeed", "--num_gpus=8", "train.py"]), "command deepspeed"),
        (cpu_pod("python:3.11", command=["torchrun", "train.py"], env={"NCCL_DEBUG": "WARN"}), "command torchrun"),
        (cpu_pod("ghcr.io/acme/trainer:1.0", env={"NCCL_DEBUG": "INFO"}), "env NCCL_DEBUG"),
        (cpu_pod("vllm/vllm-openai:v0.8.5", args=["--model", "Qwen/Qwen3-8B"]), "image vllm/vllm-openai:v0.8.5"),
        (
            cpu_pod("ubuntu:24.04", command=["sh", "-c", "pip install vllm && vllm serve Qwen/Qwen3-8B"]),
            "command vllm serve",
        ),
    ],
)
def test_gf018_gpu_work_without_a_gpu_is_a_warning(tmp_path: Path, pod: dict[str, Any], signal: str) -> None:
    [finding] = hits(doctor(tmp_path, ("d.yaml", deployment("work", pod))), "GF018")
    assert finding.severity == "warning" and signal in finding.message
    assert "silent CPU-only run" in finding.message and "nvidia.com/gpu" in finding.fix


@pytest.mark.parametrize(
    "pod",
    [
        cpu_pod("python:3.11", command=["python", "prep.py"]),
        cpu_pod("pytorch-cpu:py3.8", command=["torchrun", "demo.py"]),  # Kubeflow's torchrun-cpu example
        cpu_pod("kubeflow/pytorch-elastic-example-imagenet:latest", command=["python", "-m", "torch.distributed.run"]),
        cpu_pod("python:3.11", command=["accelerate", "launch", "--cpu", "train.py"]),
        cpu_pod("pytorch/pytorch:2.5.1-cpu", command=["torchrun", "--nproc_per_node=4", "prep.py"]),
        cpu_pod("public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo:v0.8.5", command=["vllm", "serve", "Qwen/Qwen3-0.6B"]),
        cpu_pod("nvcr.io/nvidia/pytorch:25.01-py3", env={"CUDA_VISIBLE_DEVICES": ""}),
        cpu_pod("nvcr.io/nvidia/pytorch:25.01-py3", env={"NVIDIA_VISIBLE_DEVICES": "all"}),
        gpu_pod(limits={"nvidia.com/mig-3g.40gb": 1}),
        gpu_pod(limits={"amd.com/gpu": 1}, image="rocm/pytorch:latest"),
        cpu_pod("nvcr.io/nvidia/pytorch:25.01-py3", resources={"claims": [{"name": "gpu"}]}),
    ],
)
def test_gf018_cpu_runs_and_pods_with_accelerators_are_left_alone(tmp_path: Path, pod: dict[str, Any]) -> None:
    assert hits(doctor(tmp_path, ("p.yaml", pod)), "GF018") == []


def test_gf018_ray_heads_and_mpi_launchers_run_the_image_without_gpus_by_design(tmp_path: Path) -> None:
    image = "nvcr.io/nvidia/pytorch:25.01-py3"
    launcher = {"replicas": 1, "template": {"spec": cpu_pod(image, command=["mpirun", "python", "t.py"])["spec"]}}
    report = doctor(tmp_path, ("j.yaml", job("MPIJob", gpu_pod(image=image), Launcher=launcher)))
    assert hits(report, "GF018") == []
    ray = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "r", "namespace": "ml"},
        "spec": {
            "headGroupSpec": {"template": {"spec": cpu_pod("vllm/vllm-openai:v0.8.5")["spec"]}},
            "workerGroupSpecs": [{"replicas": 2, "template": {"spec": cpu_pod(image)["spec"]}}],
        },
    }
    [finding] = hits(doctor(tmp_path, ("r.yaml", ray)), "GF018")
    assert "workerGroupSpecs[0]" in finding.message


# --- GF021 ----------------------------------------------------------------------------------------------------------


def vllm(*args: str, **pod_spec: Any) -> dict[str, Any]:
    return with_main(
        gpu_pod("vllm", image="vllm/vllm-openai:v0.8.5", **pod_spec),
        args=["--model", "meta-llama/Llama-3.1-8B-Instruct", *args],
    )


CACHE_PVC = {"name": "cache", "persistentVolumeClaim": {"claimName": "hf-cache"}}


def test_gf021_a_vllm_deployment_without_a_cache_volume_downloads_at_every_start(tmp_path: Path) -> None:
    [finding] = hits(doctor(tmp_path, ("d.yaml", deployment("vllm", vllm(), replicas=3))), "GF021")
    assert finding.severity == "warning" and finding.object == "Deployment/ml/vllm"
    assert "vLLM with meta-llama/Llama-3.1-8B-Instruct" in finding.message
    assert "(/root/.cache/huggingface/hub)" in finding.message
    assert "every restart and every new replica downloads the weights" in finding.message
    assert "hub rate limits" in finding.message
    assert "PersistentVolumeClaim" in finding.fix and "at /root/.cache/huggingface," in finding.fix


@pytest.mark.parametrize(
    "pod",
    [
        with_main(vllm(volumes=[CACHE_PVC]), volumeMounts=[{"name": "cache", "mountPath": "/root/.cache/huggingface"}]),
        with_main(
            vllm(volumes=[CACHE_PVC]),
            volumeMounts=[{"name": "cache", "mountPath": "/models"}],
            env={"HF_HOME": "/models"},
        ),
        with_main(
            vllm("--download-dir", "/models", volumes=[{"name": "cache", "hostPath": {"path": "/mnt/hf"}}]),
            volumeMounts=[{"name": "cache", "mountPath": "/models"}],
        ),
        with_main(vllm(), env={"HF_HUB_OFFLINE": "1"}),
        with_main(
            gpu_pod("vllm", image="vllm/vllm-openai:v0.8.5", volumes=[CACHE_PVC]),
            command=["vllm", "serve", "/models/llama"],
            volumeMounts=[{"name": "cache", "mountPath": "/models"}],
        ),
        with_main(gpu_pod("vllm", image="acme/llama-8b-baked:1"), command=["vllm", "serve", "/opt/model"]),
    ],
)
def test_gf021_a_kept_cache_an_offline_hub_or_a_mounted_model_is_fine(tmp_path: Path, pod: dict[str, Any]) -> None:
    assert hits(doctor(tmp_path, ("d.yaml", deployment("vllm", pod))), "GF021") == []


def test_gf021_an_empty_dir_lives_and_dies_with_the_pod(tmp_path: Path) -> None:
    scratch = [{"name": "cache", "emptyDir": {}}]
    pod = with_main(vllm(volumes=scratch), volumeMounts=[{"name": "cache", "mountPath": "/root/.cache/huggingface"}])
    [finding] = hits(doctor(tmp_path, ("d.yaml", deployment("vllm", pod))), "GF021")
    assert "emptyDir 'cache', which lives and dies with the pod" in finding.message
    local = with_main(
        gpu_pod("vllm", image="vllm/vllm-openai:v0.8.5", volumes=scratch),
        command=["sh", "-c", "vllm serve /models/llama --port 8000"],
        volumeMounts=[{"name": "cache", "mountPath": "/models"}],
    )
    [finding] = hits(doctor(tmp_path, ("d.yaml", deployment("vllm", local))), "GF021")
    assert "the model at /models/llama, on emptyDir 'cache', which starts empty" in finding.message


def test_gf021_tgi_and_nim_keep_their_caches_elsewhere(tmp_path: Path) -> None:
    tgi = with_main(
        gpu_pod("tgi", image="ghcr.io/huggingface/text-generation-inference:3.3.0"),
        args=["--model-id", "Qwen/Qwen2.5-7B-Instruct"],
    )
    [finding] = hits(doctor(tmp_path, ("d.yaml", deployment("tgi", tgi))), "GF021")
    assert "runs TGI with Qwen/Qwen2.5-7B-Instruct" in finding.message and "(/data/hub)" in finding.message
    kept = with_main(tgi, volumeMounts=[{"name": "cache", "mountPath": "/data"}])
    kept["spec"]["volumes"] = [CACHE_PVC]
    assert hits(doctor(tmp_path, ("d.yaml", deployment("tgi", kept))), "GF021") == []
    nim = gpu_pod("nim", image="nvcr.io/nim/meta/llama-3.1-8b-instruct:1.8.5")
    [finding] = hits(doctor(tmp_path, ("d.yaml", deployment("nim", nim))), "GF021")
    assert "runs NIM with its model" in finding.message and "/opt/nim/.cache" in finding.message
    assert "hub rate limits" not in finding.message and "NIMCache" in finding.fix
    kept = with_main(nim, volumeMounts=[{"name": "cache", "mountPath": "/opt/nim/.cache"}])
    kept["spec"]["volumes"] = [CACHE_PVC]
    assert hits(doctor(tmp_path, ("d.yaml", deployment("nim", kept))), "GF021") == []


def test_gf021_statefulset_claim_templates_keep_the_cache(tmp_path: Path) -> None:
    pod = with_main(vllm(), volumeMounts=[{"name": "hf", "mountPath": "/root/.cache/huggingface"}])
    sts = deployment("vllm", pod)
    sts["kind"] = "StatefulSet"
    sts["spec"]["volumeClaimTemplates"] = [
        {
            "metadata": {"name": "hf"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "100Gi"}}},
        }
    ]
    assert hits(doctor(tmp_path, ("s.yaml", sts)), "GF021") == []


def test_gf021_a_triton_repository_in_s3_is_copied_at_every_start(tmp_path: Path) -> None:
    triton = with_main(
        gpu_pod("triton", image="nvcr.io/nvidia/tritonserver:25.01-py3"),
        command=["tritonserver", "--model-repository=s3://models/repo"],
    )
    [finding] = hits(doctor(tmp_path, ("d.yaml", deployment("triton", triton))), "GF021")
    assert "s3://models/repo" in finding.message and "temporary local directory" in finding.message
    local = with_main(triton, command=["tritonserver", "--model-repository=/models"])
    assert hits(doctor(tmp_path, ("d.yaml", deployment("triton", local))), "GF021") == []


def test_gf021_only_gpu_inference_workloads_count(tmp_path: Path) -> None:
    cpu = with_main(vllm(), resources={"limits": {"cpu": "8"}})
    assert hits(doctor(tmp_path, ("d.yaml", deployment("vllm", cpu))), "GF021") == []
    batch = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "eval", "namespace": "ml"},
        "spec": {"template": {"spec": {**vllm()["spec"], "restartPolicy": "Never"}}},
    }
    assert hits(doctor(tmp_path, ("j.yaml", batch)), "GF021") == []


def test_gf021_kserve_storage_uris_are_downloaded_by_the_storage_initializer(tmp_path: Path) -> None:
    def isvc(uri: str) -> dict[str, Any]:
        model = {
            "modelFormat": {"name": "huggingface"},
            "storageUri": uri,
            "resources": {"limits": {"nvidia.com/gpu": "1"}},
        }
        return {
            "apiVersion": "serving.kserve.io/v1beta1",
            "kind": "InferenceService",
            "metadata": {"name": "llama", "namespace": "ml"},
            "spec": {"predictor": {"model": model}},
        }

    report = doctor(tmp_path, ("i.yaml", isvc("hf://meta-llama/Llama-3.1-8B-Instruct")))
    [finding] = hits(report, "GF021")
    assert finding.object == "InferenceService/ml/llama" and "storage initializer" in finding.message
    assert "pvc://" in finding.fix and "oci://" in finding.fix
    assert hits(report, "GF090") == []  # the rule reads InferenceService: it is not "unchecked"
    for kept in ("pvc://models/llama", "oci://registry.example.com/models/llama:1"):
        assert hits(doctor(tmp_path, ("i.yaml", isvc(kept))), "GF021") == []


def test_gf021_names_the_model_given_to_the_images_own_entrypoint(tmp_path: Path) -> None:
    pod = with_main(gpu_pod("vllm", image="vllm/vllm-openai:v0.10.0"), args=["Qwen/Qwen3-8B", "--port", "8000"])
    [finding] = hits(doctor(tmp_path, ("d.yaml", deployment("vllm", pod))), "GF021")
    assert "vLLM with Qwen/Qwen3-8B and no volume" in finding.message
    default = with_main(gpu_pod("vllm", image="vllm/vllm-openai:v0.10.0"), args=["--port", "8000"])
    [finding] = hits(doctor(tmp_path, ("d.yaml", deployment("vllm", default))), "GF021")
    assert "vLLM with its default model" in finding.message
    custom = with_main(gpu_pod("vllm", image="vllm/vllm-openai:v0.10.0"), command=["python", "my_server.py"])
    assert hits(doctor(tmp_path, ("d.yaml", deployment("vllm", custom))), "GF021") == []  # its model is not known


def test_gf021_reads_an_inference_services_own_containers(tmp_path: Path) -> None:
    container = main(vllm())
    container["name"] = "kserve-container"
    predictor = {"containers": [container]}
    isvc = {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": "llama", "namespace": "ml"},
        "spec": {"predictor": predictor},
    }
    [finding] = hits(doctor(tmp_path, ("i.yaml", isvc)), "GF021")
    assert "container 'kserve-container' (spec.predictor) runs vLLM" in finding.message
    container["volumeMounts"] = [{"name": "cache", "mountPath": "/root/.cache/huggingface"}]
    predictor["volumes"] = [CACHE_PVC]
    assert hits(doctor(tmp_path, ("i.yaml", isvc)), "GF021") == []


def test_gf003_and_gf004_count_only_nodes_with_enough_gpus(tmp_path: Path) -> None:
    big = gpu_pod(limits={"nvidia.com/gpu": 16})  # no node has 16: not a taint or model question
    assert hits(doctor(tmp_path, ("p.yaml", big), ("n.json", TAINTED)), "GF003") == []
    assert hits(doctor(tmp_path, ("p.yaml", big), ("n.json", MIXED)), "GF004") == []
    nodes = node_list(gpu_node("h100-01", taints=[]), gpu_node("t4-01", product="Tesla-T4", gpus=4, taints=[]))
    eight = gpu_pod(limits={"nvidia.com/gpu": 8})  # only the H100 node has 8
    assert hits(doctor(tmp_path, ("p.yaml", eight), ("n.json", nodes)), "GF004") == []
    assert (
        len(hits(doctor(tmp_path, ("p.yaml", gpu_pod(limits={"nvidia.com/gpu": 4})), ("n.json", nodes)), "GF004")) == 1
    )


def test_gf013_kuberay_mounts_dev_shm_in_the_ray_container_itself(tmp_path: Path) -> None:
    def ray(**group: Any) -> dict[str, Any]:
        worker = {"replicas": 2, "template": {"spec": gpu_pod(limits={"nvidia.com/gpu": 4})["spec"]}, **group}
        return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "r", "namespace": "ml"},
                "spec": {"headGroupSpec": {"template": {"spec": gpu_pod(limits={"cpu": "4"})["spec"]}},
                         "workerGroupSpecs": [worker]}}  # fmt: skip

    assert hits(doctor(tmp_path, ("r.yaml", ray())), "GF013") == []
    # unless the object store is told to live elsewhere
    [finding] = hits(doctor(tmp_path, ("r.yaml", ray(rayStartParams={"plasma-directory": "/tmp"}))), "GF013")
    assert "workerGroupSpecs[0]" in finding.message and finding.severity == "critical"


def test_shared_gpu_replicas_count_as_gpus(tmp_path: Path) -> None:
    """nvidia.com/gpu.shared (time-slicing with renameByDefault) is a GPU request like any other."""
    pod = gpu_pod(requests={"nvidia.com/gpu.shared": 1}, limits={})
    [finding] = hits(doctor(tmp_path, ("p.yaml", pod)), "GF001")
    assert "nvidia.com/gpu.shared" in finding.message
