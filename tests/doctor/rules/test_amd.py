"""GF024 (ROCm device files by hand), GF027 (device plugin and DRA driver together), GF031 (partition resources no
node offers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpufleet.doctor.accelerators import amd_partition_resources
from tests.doctor.helpers import doctor, gpu_pod, hits, kubectl_create, node_list, vendor_node
from tests.doctor.rules.test_vendors import VENDORS, container, manifest

ROCM_IMAGE = "rocm/pytorch:rocm6.2_ubuntu22.04_py3.10_pytorch_release_2.3.0"


def hand_mounted(paths: dict[str, str], *, image: str = ROCM_IMAGE, privileged: bool = False) -> dict[str, Any]:
    """A Job (kubectl create job) whose container mounts these host paths (volume name -> path) at the same place,
    asking for no amd.com resource."""
    job = kubectl_create("job", "bench", f"--image={image}", "--", "python3", "bench.py")
    spec = job["spec"]["template"]["spec"]
    spec["volumes"] = [{"name": n, "hostPath": {"path": p}} for n, p in paths.items()]
    c = spec["containers"][0]
    c["volumeMounts"] = [{"name": n, "mountPath": p} for n, p in paths.items()]
    if privileged:
        c["securityContext"] = {"privileged": True}
    return job


# --- GF024 ---------------------------------------------------------------------------------------------------------


def test_dri_without_kfd_in_a_rocm_pod_is_an_error(tmp_path: Path) -> None:
    report = doctor(tmp_path, ("job.json", hand_mounted({"dri": "/dev/dri"})))
    [finding] = hits(report, "GF024")
    assert finding.severity == "critical" and "but not /dev/kfd" in finding.message
    assert "amd.com/gpu: N" in finding.fix and hits(report, "GF000") == []


def test_kfd_without_dri_is_an_error_whatever_the_image(tmp_path: Path) -> None:
    [finding] = hits(doctor(tmp_path, ("job.json", hand_mounted({"kfd": "/dev/kfd"}, image="busybox"))), "GF024")
    assert "but not /dev/dri" in finding.message


def test_both_by_hand_unprivileged_cannot_be_opened(tmp_path: Path) -> None:
    job = hand_mounted({"kfd": "/dev/kfd", "dri": "/dev/dri"})
    [finding] = hits(doctor(tmp_path, ("job.json", job)), "GF024")
    assert finding.severity == "critical" and "device cgroup" in finding.message


def test_privileged_with_host_devices_bypasses_the_scheduler(tmp_path: Path) -> None:
    job = hand_mounted({"kfd": "/dev/kfd", "dri": "/dev/dri"}, privileged=True)
    [finding] = hits(doctor(tmp_path, ("job.json", job)), "GF024")
    assert finding.severity == "warning" and "every GPU on the node" in finding.message


@pytest.mark.parametrize(
    ("paths", "image"),
    [
        ({"dri": "/dev/dri"}, "jellyfin/jellyfin:10.9"),  # video transcoding: /dev/dri is not ROCm's alone
        ({"dev": "/dev"}, "busybox"),
    ],
)
def test_dri_or_dev_without_a_rocm_signal_passes(tmp_path: Path, paths: dict[str, str], image: str) -> None:
    assert hits(doctor(tmp_path, ("job.json", hand_mounted(paths, image=image))), "GF024") == []


def test_a_pod_asking_for_amd_gpus_and_amds_daemonsets_pass(tmp_path: Path) -> None:
    job = hand_mounted({"dri": "/dev/dri"})
    job["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"amd.com/gpu": 1}}
    files = [("job.json", job), ("labeller.yaml", (VENDORS / "rocm-k8s-ds-amdgpu-labeller.yaml").read_text())]
    files.append(("health.yaml", (VENDORS / "rocm-k8s-ds-amdgpu-dp-health.yaml").read_text()))
    assert hits(doctor(tmp_path, *files), "GF024") == []


# --- GF027 ---------------------------------------------------------------------------------------------------------


def deviceconfig(spec: dict[str, Any], name: str = "default") -> dict[str, Any]:
    """An AMD GPU Operator DeviceConfig (amd.com/v1alpha1), as in ROCm/gpu-operator docs/dra/dra-driver.md."""
    base = {"selector": {"feature.node.kubernetes.io/amd-gpu": "true"}}
    return {
        "apiVersion": "amd.com/v1alpha1",
        "kind": "DeviceConfig",
        "metadata": {"name": name, "namespace": "kube-amd-gpu"},
        "spec": {**base, **spec},
    }


def dra_daemonset() -> dict[str, Any]:
    """The AMD DRA kubelet plugin DaemonSet, shaped as ROCm/k8s-gpu-dra-driver's Helm chart renders it."""
    ds = manifest("rocm-k8s-ds-amdgpu-dp.yaml")
    ds["metadata"] = {"name": "k8s-gpu-dra-driver-kubeletplugin", "namespace": "kube-amd-gpu"}
    c = container(ds)
    c.update(name="plugin", image="docker.io/rocm/k8s-gpu-dra-driver:v0.1.0", command=["gpu-kubeletplugin"])
    return ds


def test_a_deviceconfig_enabling_both_is_refused(tmp_path: Path) -> None:
    config = deviceconfig(
        {"draDriver": {"enable": True}, "devicePlugin": {"devicePluginImage": "rocm/k8s-device-plugin"}}
    )
    report = doctor(tmp_path, ("dc.yaml", config))
    [finding] = hits(report, "GF027")
    assert finding.severity == "critical" and "cannot be enabled at the same time" in finding.message
    assert "enableDevicePlugin: false" in finding.fix and finding.object == "DeviceConfig/kube-amd-gpu/default"
    assert hits(report, "GF090") == []  # a kind the rules read, not an unknown one


@pytest.mark.parametrize(
    "spec",
    [
        {"draDriver": {"enable": True}, "devicePlugin": {"enableDevicePlugin": False}},  # the documented DRA config
        {"draDriver": {"enable": True}},  # no devicePlugin section: the operator reads it as off
        {"devicePlugin": {"enableDevicePlugin": True}},
    ],
)
def test_a_deviceconfig_with_one_of_them_passes(tmp_path: Path, spec: dict[str, Any]) -> None:
    assert hits(doctor(tmp_path, ("dc.yaml", deviceconfig(spec))), "GF027") == []


def test_a_standalone_plugin_next_to_the_dra_driver(tmp_path: Path) -> None:
    plugin = (VENDORS / "rocm-k8s-ds-amdgpu-dp.yaml").read_text()
    [finding] = hits(doctor(tmp_path, ("dp.yaml", plugin), ("dra.yaml", dra_daemonset())), "GF027")
    assert finding.object == "DaemonSet/kube-system/amdgpu-device-plugin-daemonset"
    assert "k8s-gpu-dra-driver-kubeletplugin" in finding.message
    config = deviceconfig({"draDriver": {"enable": True}, "devicePlugin": {"enableDevicePlugin": False}})
    assert [f.rule for f in hits(doctor(tmp_path, ("dp.yaml", plugin), ("dc.yaml", config)), "GF027")] == ["GF027"]


def test_a_plugin_and_a_dra_driver_on_separate_nodes_pass(tmp_path: Path) -> None:
    plugin = manifest("rocm-k8s-ds-amdgpu-dp.yaml")
    plugin["spec"]["template"]["spec"]["nodeSelector"]["gpu-allocation"] = "device-plugin"
    dra = dra_daemonset()
    dra["spec"]["template"]["spec"]["nodeSelector"]["gpu-allocation"] = "dra"
    assert hits(doctor(tmp_path, ("dp.yaml", plugin), ("dra.yaml", dra)), "GF027") == []


# --- GF031 ---------------------------------------------------------------------------------------------------------


def test_the_partition_resources_follow_the_catalog_and_the_kernels_mode_pairs() -> None:
    names = amd_partition_resources()
    assert {"amd.com/spx_nps1", "amd.com/cpx_nps4", "amd.com/qpx_nps4", "amd.com/cpx_nps2"} <= names
    assert "amd.com/spx_nps4" not in names and "amd.com/dpx_nps4" not in names


@pytest.mark.parametrize(
    ("name", "hint"),
    [("amd.com/spx_nps4", "the names that exist"), ("amd.com/CPX-NPS4", "names it amd.com/cpx_nps4")],
)
def test_a_partition_resource_that_cannot_exist(tmp_path: Path, name: str, hint: str) -> None:
    report = doctor(tmp_path, ("p.yaml", gpu_pod(image="rocm/vllm:latest", limits={name: 1})))
    [finding] = hits(report, "GF031")
    assert finding.severity == "critical" and name in finding.message and hint in finding.message
    assert [f.rule for f in hits(report, "GF001") + hits(report, "GF002")] == []


def test_a_pod_pinned_to_another_partition_mode(tmp_path: Path) -> None:
    pod = gpu_pod(
        image="rocm/vllm:latest",
        limits={"amd.com/cpx_nps4": 1},
        nodeSelector={"amd.com/gpu.compute-memory-partition": "spx_nps1"},
    )
    [finding] = hits(doctor(tmp_path, ("p.yaml", pod)), "GF031")
    assert "amd.com/gpu.compute-memory-partition=spx_nps1" in finding.message
    assert "ask for amd.com/spx_nps1" in finding.fix


def mi300x_node(name: str, capacity: dict[str, str], mode: str) -> dict[str, Any]:
    labels = {"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM", "amd.com/gpu.compute-memory-partition": mode}
    return vendor_node(name, "amd", capacity=capacity, labels=labels)


def test_a_resource_the_captured_amd_nodes_do_not_offer(tmp_path: Path) -> None:
    nodes = node_list(
        mi300x_node("mi300x-01", {"amd.com/cpx_nps4": "64"}, "cpx_nps4"),
        mi300x_node("mi300x-02", {"amd.com/cpx_nps4": "64"}, "cpx_nps4"),
    )
    pod = gpu_pod(image="rocm/vllm:latest", limits={"amd.com/gpu": 8})
    [finding] = hits(doctor(tmp_path, ("p.yaml", pod), ("nodes.json", nodes)), "GF031")
    assert "amd.com/gpu: 8" in finding.message and "amd.com/cpx_nps4: 64" in finding.message
    assert "mi300x-01, mi300x-02" in finding.message


def test_requests_the_amd_nodes_offer_pass(tmp_path: Path) -> None:
    nodes = node_list(
        mi300x_node("mi300x-01", {"amd.com/cpx_nps4": "64"}, "cpx_nps4"),
        mi300x_node("mi300x-02", {"amd.com/gpu": "8"}, "spx_nps1"),
    )
    for limits in ({"amd.com/gpu": 8}, {"amd.com/cpx_nps4": 2}):
        pod = gpu_pod(image="rocm/vllm:latest", limits=limits)
        assert hits(doctor(tmp_path, ("p.yaml", pod), ("nodes.json", nodes)), "GF031") == []
