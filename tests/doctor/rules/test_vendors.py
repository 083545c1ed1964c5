"""GF023 (device plugins' host access), GF028 (another vendor's nodes), GF029 (another vendor's image), GF030
(device-selection variables by hand), on AMD's and Habana's own manifests and objects derived from them."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.doctor.accelerators import image_stack, label_vendor, resource_vendor
from tests.doctor.helpers import DATA, doctor, gpu_pod, hits, kubectl_create

VENDORS = DATA / "vendors"
GAUDI_IMAGE = "vault.habana.ai/gaudi-docker/1.21.0/ubuntu22.04/habanalabs/pytorch-installer-2.6.0:latest"


def required(*terms: list[dict[str, Any]]) -> dict[str, Any]:
    """A required node affinity with these terms (each a list of matchExpressions)."""
    selector = {"nodeSelectorTerms": [{"matchExpressions": list(t)} for t in terms]}
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": selector}}}


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": operator, **({"values": list(values)} if values else {})}


def manifest(name: str, kind: str = "DaemonSet") -> dict[str, Any]:
    """The first object of `kind` in one of the vendors' manifests under tests/doctor/data/vendors."""
    docs = [d for d in yaml.safe_load_all((VENDORS / name).read_text()) if d]
    return copy.deepcopy(next(d for d in docs if d["kind"] == kind))


def container(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]["template"]["spec"]["containers"][0]


def without_volume(ds: dict[str, Any], volume: str) -> dict[str, Any]:
    """The DaemonSet with one hostPath volume and its mount removed (a failing fixture derived from a real one)."""
    spec = ds["spec"]["template"]["spec"]
    spec["volumes"] = [v for v in spec["volumes"] if v["name"] != volume]
    c = spec["containers"][0]
    c["volumeMounts"] = [m for m in c["volumeMounts"] if m["name"] != volume]
    return ds


def with_limits(obj: dict[str, Any], limits: dict[str, Any], **env: str) -> dict[str, Any]:
    c = container(obj) if obj["kind"] != "Pod" else obj["spec"]["containers"][0]
    c["resources"] = {"limits": limits}
    if env:
        c["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return obj


# --- the vendors' own manifests pass -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "rocm-k8s-ds-amdgpu-dp.yaml",
        "rocm-k8s-ds-amdgpu-dp-health.yaml",
        "rocm-k8s-ds-amdgpu-labeller.yaml",
        "habana-k8s-device-plugin.yaml",
    ],
)
def test_the_vendors_manifests_are_valid_and_have_no_finding(tmp_path: Path, name: str) -> None:
    report = doctor(tmp_path, (name, (VENDORS / name).read_text()))
    assert report.findings == [], [f.message for f in report.findings]
    assert report.objects >= 1


# --- GF023 ---------------------------------------------------------------------------------------------------------


def test_amd_plugin_without_the_kubelet_socket_directory_is_an_error(tmp_path: Path) -> None:
    ds = without_volume(manifest("rocm-k8s-ds-amdgpu-dp.yaml"), "dp")
    [finding] = hits(doctor(tmp_path, ("dp.yaml", ds)), "GF023")
    assert finding.severity == "critical" and finding.object == "DaemonSet/kube-system/amdgpu-device-plugin-daemonset"
    assert "/var/lib/kubelet/device-plugins" in finding.message and "amd.com/gpu" in finding.message
    assert "hostPath: {path: /var/lib/kubelet/device-plugins}" in finding.fix


def test_amd_plugin_without_sys_is_a_warning(tmp_path: Path) -> None:
    ds = without_volume(manifest("rocm-k8s-ds-amdgpu-dp.yaml"), "sys")
    [finding] = hits(doctor(tmp_path, ("dp.yaml", ds)), "GF023")
    assert finding.severity == "warning" and "/sys" in finding.message


def test_a_socket_directory_that_is_not_the_hosts_does_not_count(tmp_path: Path) -> None:
    ds = manifest("rocm-k8s-ds-amdgpu-dp.yaml")
    spec = ds["spec"]["template"]["spec"]
    spec["volumes"] = [{"name": "dp", "emptyDir": {}} if v["name"] == "dp" else v for v in spec["volumes"]]
    assert [f.severity for f in hits(doctor(tmp_path, ("dp.yaml", ds)), "GF023")] == ["critical"]


def test_the_operators_device_plugin_and_a_custom_kubelet_root_pass(tmp_path: Path) -> None:
    # the AMD GPU Operator's DaemonSet: command sh -c ./k8s-device-plugin, hostPath under another kubelet root
    ds = manifest("rocm-k8s-ds-amdgpu-dp.yaml")
    c = container(ds)
    c.update(name="device-plugin", image="rocm/k8s-device-plugin:latest", command=["sh", "-c", "./k8s-device-plugin"])
    c["volumeMounts"][0]["mountPath"] = "/var/lib/kubelet/device-plugins"
    ds["spec"]["template"]["spec"]["volumes"][0]["hostPath"]["path"] = "/var/lib/k0s/kubelet/device-plugins"
    assert hits(doctor(tmp_path, ("dp.yaml", ds)), "GF023") == []


def test_unprivileged_labeller_loses_its_libdrm_labels(tmp_path: Path) -> None:
    ds = manifest("rocm-k8s-ds-amdgpu-labeller.yaml")
    del container(ds)["securityContext"]["privileged"]
    [finding] = hits(doctor(tmp_path, ("labeller.yaml", ds)), "GF023")
    assert finding.severity == "warning" and "product-name" in finding.message and "privileged: true" in finding.fix


def test_unprivileged_labeller_writing_only_sysfs_labels_passes(tmp_path: Path) -> None:
    ds = manifest("rocm-k8s-ds-amdgpu-labeller.yaml")
    del container(ds)["securityContext"]["privileged"]
    container(ds)["args"] = ["-vram", "-cu-count", "-simd-count"]  # read from /sys/class/kfd, not through libdrm
    assert hits(doctor(tmp_path, ("labeller.yaml", ds)), "GF023") == []


def test_gaudi_plugin_without_the_kubelet_socket_directory_is_an_error(tmp_path: Path) -> None:
    ds = without_volume(manifest("habana-k8s-device-plugin.yaml"), "device-plugin")
    [finding] = hits(doctor(tmp_path, ("gaudi.yaml", ds)), "GF023")
    assert finding.severity == "critical" and "habana.ai/gaudi" in finding.message
    assert finding.object == "DaemonSet/habana-system/habanalabs-device-plugin-daemonset"


# --- GF028 ---------------------------------------------------------------------------------------------------------


def test_nvidia_pod_pinned_to_amd_nodes_never_schedules(tmp_path: Path) -> None:
    pod = gpu_pod(nodeSelector={"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM"})
    [finding] = hits(doctor(tmp_path, ("p.yaml", pod)), "GF028")
    assert finding.severity == "critical" and "nvidia.com/gpu (NVIDIA)" in finding.message
    assert "amd.com/gpu.product-name (AMD)" in finding.message and "Pending" in finding.message
    assert "nvidia.com/gpu.product" in finding.fix


def test_gaudi_pod_with_an_nfd_nvidia_pci_affinity_in_every_term(tmp_path: Path) -> None:
    spec = required(
        [expr("feature.node.kubernetes.io/pci-0302_10de.present", "In", "true")],
        [expr("nvidia.com/gpu.product", "Exists")],
    )
    pod = gpu_pod(limits={"habana.ai/gaudi": 8}, **spec)
    [finding] = hits(doctor(tmp_path, ("p.yaml", pod)), "GF028")
    assert "every term" in finding.message and "Intel Gaudi" in finding.message


@pytest.mark.parametrize(
    ("limits", "spec"),
    [
        # its own vendor's labels
        ({"amd.com/gpu": 1}, {"nodeSelector": {"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM"}}),
        ({"habana.ai/gaudi": 1}, {"nodeSelector": {"habana.ai/device.type": "GAUDI3"}}),
        # an excluding requirement, a false value, a term that another vendor's node could meet
        ({"amd.com/gpu": 1}, required([expr("nvidia.com/gpu.present", "DoesNotExist")])),
        ({"amd.com/gpu": 1}, {"nodeSelector": {"nvidia.com/gpu.present": "false"}}),
        ({"amd.com/gpu": 1}, required([expr("nvidia.com/gpu.count", "Exists")], [expr("amd.com/gpu.vram", "Exists")])),
        # vendor-neutral labels
        ({"nvidia.com/gpu": 1}, {"nodeSelector": {"node.kubernetes.io/instance-type": "p5.48xlarge"}}),
    ],
)  # fmt: skip
def test_selections_a_node_of_the_vendor_can_meet_pass(
    tmp_path: Path, limits: dict[str, int], spec: dict[str, Any]
) -> None:
    assert hits(doctor(tmp_path, ("p.yaml", gpu_pod(limits=limits, **spec))), "GF028") == []


def test_label_vendors_come_from_the_catalog_and_nfd_pci_ids() -> None:
    assert label_vendor("nvidia.com/gpu.product") == "nvidia"
    assert label_vendor("beta.amd.com/gpu.family.AI") == "amd"
    assert label_vendor("habana.ai/device.type") == "intel"
    assert label_vendor("feature.node.kubernetes.io/pci-1200_1da3.present") == "intel"
    assert label_vendor("feature.node.kubernetes.io/pci-1002.present") == "amd"
    assert label_vendor("feature.node.kubernetes.io/pci-0200_15b3.present") is None  # a Mellanox NIC
    assert label_vendor("kubernetes.io/hostname") is None


# --- GF029 ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("image", "limits", "built"),
    [
        ("rocm/pytorch:rocm6.2_ubuntu22.04_py3.10_pytorch_release_2.3.0", {"nvidia.com/gpu": 1}, "AMD"),
        ("docker.io/rocm/vllm:latest", {"nvidia.com/gpu": 8}, "AMD"),
        ("ghcr.io/huggingface/text-generation-inference:3.0.1-rocm", {"nvidia.com/gpu": 1}, "AMD"),
        ("nvcr.io/nvidia/pytorch:25.01-py3", {"amd.com/gpu": 1}, "NVIDIA"),
        ("vllm/vllm-openai:v0.8.5", {"habana.ai/gaudi": 1}, "NVIDIA"),
        ("pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime", {"amd.com/cpx_nps4": 1}, "NVIDIA"),
        (GAUDI_IMAGE, {"nvidia.com/gpu": 1}, "Intel Gaudi"),
    ],
)  # fmt: skip
def test_an_image_built_for_another_vendor_is_likely_wrong(
    tmp_path: Path, image: str, limits: dict[str, int], built: str
) -> None:
    job = with_limits(kubectl_create("job", "train", f"--image={image}"), limits)
    [finding] = hits(doctor(tmp_path, ("job.json", job)), "GF029")
    assert finding.severity == "warning" and f"likely built for {built}" in finding.message
    assert finding.object == "Job/train"


@pytest.mark.parametrize(
    ("image", "limits"),
    [
        ("rocm/pytorch:latest", {"amd.com/gpu": 1}),
        ("rocm/vllm:latest", {"amd.com/cpx_nps4": 1}),
        ("nvcr.io/nvidia/pytorch:25.01-py3", {"nvidia.com/mig-1g.10gb": 1}),
        (GAUDI_IMAGE, {"habana.ai/gaudi": 8}),
        ("ghcr.io/huggingface/text-generation-inference:3.0.1-intel-xpu", {"nvidia.com/gpu": 1}),  # names no GPU stack
        ("busybox:1.36", {"amd.com/gpu": 1}),
    ],
)  # fmt: skip
def test_an_image_of_the_requested_vendor_or_of_no_stack_passes(
    tmp_path: Path, image: str, limits: dict[str, int]
) -> None:
    job = with_limits(kubectl_create("job", "train", f"--image={image}"), limits)
    report = doctor(tmp_path, ("job.json", job))
    assert hits(report, "GF029") == [] and hits(report, "GF000") == []


def test_image_stacks_read_tags_before_names() -> None:
    def vendor(image: str) -> str | None:
        found = image_stack(image)
        return found[0] if found else None

    assert vendor("lmsysorg/sglang:v0.4.1-rocm620") == "amd"
    assert vendor("lmsysorg/sglang:v0.4.1-cu124") == "nvidia"
    assert vendor("registry.local:5000/rocm/pytorch@sha256:abc") == "amd"
    assert vendor("rocm/k8s-device-plugin:latest") is None
    assert vendor("python:3.12") is None


# --- GF030 ---------------------------------------------------------------------------------------------------------


def test_habana_visible_devices_by_hand_overrides_the_plugin(tmp_path: Path) -> None:
    dep = with_limits(
        kubectl_create("deployment", "tgi", "--image=ghcr.io/huggingface/tgi-gaudi:2.3.1"),
        {"habana.ai/gaudi": 8},
        HABANA_VISIBLE_DEVICES="all",
        PT_HPU_LAZY_MODE="1",
    )
    [finding] = hits(doctor(tmp_path, ("tgi.json", dep)), "GF030")
    assert finding.severity == "warning" and "HABANA_VISIBLE_DEVICES='all'" in finding.message
    assert "remove HABANA_VISIBLE_DEVICES" in finding.fix


def test_nvidia_visible_devices_by_hand_in_a_gpu_pod(tmp_path: Path) -> None:
    pod = gpu_pod()
    pod["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    assert [f.rule for f in hits(doctor(tmp_path, ("p.yaml", pod)), "GF030")] == ["GF030"]


def test_hip_index_beyond_the_allocated_gpus_is_an_error(tmp_path: Path) -> None:
    pod = gpu_pod(image="rocm/pytorch:latest", limits={"amd.com/gpu": 2})
    pod["spec"]["containers"][0]["env"] = [{"name": "HIP_VISIBLE_DEVICES", "value": "0,1,4"}]
    [finding] = hits(doctor(tmp_path, ("p.yaml", pod)), "GF030")
    assert finding.severity == "critical" and "index(es) [4]" in finding.message and "0 to 1" in finding.message


@pytest.mark.parametrize(
    ("limits", "env"),
    [
        ({"amd.com/gpu": 2}, {"ROCR_VISIBLE_DEVICES": "0,1"}),
        ({"amd.com/gpu": 1}, {"HIP_VISIBLE_DEVICES": "GPU-4b2c1a9f8d3e6f7a"}),  # a UUID is not an index
        ({"nvidia.com/gpu": 1}, {"CUDA_VISIBLE_DEVICES": "0"}),
        ({"nvidia.com/gpu": 1}, {"CUDA_VISIBLE_DEVICES": ""}),  # deliberately none
        ({}, {"HABANA_VISIBLE_DEVICES": "all"}),  # no device asked for: not this rule's
    ],
)
def test_indexes_within_the_allocation_pass(tmp_path: Path, limits: dict[str, int], env: dict[str, str]) -> None:
    pod = gpu_pod(limits=limits or {"cpu": 1})
    pod["spec"]["containers"][0]["env"] = [{"name": k, "value": v} for k, v in env.items()]
    assert hits(doctor(tmp_path, ("p.yaml", pod)), "GF030") == []


def test_resource_vendors() -> None:
    assert resource_vendor("nvidia.com/gpu.shared") == "nvidia"
    assert resource_vendor("nvidia.com/mig-1g.10gb") == "nvidia"
    assert resource_vendor("amd.com/cpx_nps4") == "amd"
    assert resource_vendor("habana.ai/gaudi") == "intel"
    assert resource_vendor("amd.com/xilinx_u30_gen3x4_base_2-0") is None  # AMD's FPGAs are not GPUs
    assert resource_vendor("vpc.amazonaws.com/efa") is None
