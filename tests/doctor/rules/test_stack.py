from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from gpufleet.doctor.catalog import rule_catalog
from gpufleet.doctor.facts import parse_version
from gpufleet.doctor.rules.drivers import container_cuda, toolkit_driver
from gpufleet.doctor.versions import stack
from gpufleet.model import Severity
from tests.doctor.helpers import doctor, gpu_node, gpu_pod, hits, node_list

STACK_RULES = ("GF009", "GF010", "GF011", "GF012", "GF016", "GF017", "GF019", "GF020")


def operator(version: str) -> dict[str, Any]:
    """The GPU Operator's Deployment as its Helm chart renders it."""
    labels = {"app": "gpu-operator", "helm.sh/chart": f"gpu-operator-v{version}"}
    container = {"name": "gpu-operator", "image": f"nvcr.io/nvidia/gpu-operator:v{version}"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "gpu-operator", "namespace": "gpu-operator", "labels": labels},
        "spec": {
            "selector": {"matchLabels": {"app": "gpu-operator"}},
            "template": {"metadata": {"labels": {"app": "gpu-operator"}}, "spec": {"containers": [container]}},
        },
    }


def cluster_policy(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "cluster-policy"},
        "spec": spec,
    }


def kubectl_version(git_version: str) -> dict[str, Any]:
    """`kubectl version -o json`."""
    client = {"major": "1", "minor": "33", "gitVersion": "v1.33.1"}
    return {"clientVersion": client, "serverVersion": {"major": "1", "minor": "33+", "gitVersion": git_version}}


def driver_node(name: str, driver: str, **kwargs: Any) -> dict[str, Any]:
    """A GPU node with GPU Feature Discovery's driver label."""
    labels = {"nvidia.com/cuda.driver-version.full": driver, **kwargs.pop("labels", {})}
    return gpu_node(name, labels=labels, **kwargs)


def daemonset(name: str, container: dict[str, Any]) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "kube-system"},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
        },
    }


def device_plugin(strategy: str) -> dict[str, Any]:
    return daemonset(
        "nvidia-device-plugin",
        {
            "name": "nvidia-device-plugin-ctr",
            "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0",
            "env": [{"name": "DEVICE_LIST_STRATEGY", "value": strategy}],
        },
    )


def kubelet_config(**gates: bool) -> dict[str, Any]:
    return {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration", "featureGates": gates}


def apiserver(*flags: str) -> dict[str, Any]:
    container = {"name": "kube-apiserver", "image": "registry.k8s.io/kube-apiserver:v1.28.9"}
    container["command"] = ["kube-apiserver", "--secure-port=6443", *flags]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "kube-apiserver-cp1", "namespace": "kube-system", "uid": "u1"},
        "spec": {"containers": [container]},
    }


def only(report: Any, rule: str) -> Any:
    found = hits(report, rule)
    assert len(found) == 1, [f.message for f in found]
    return found[0]


def no_rule_failed(report: Any) -> None:
    assert not [f for f in report.findings if "could not run" in f.message]


# --- the data ---------------------------------------------------------------------------------------------------------


def test_every_stack_rule_is_described_with_sources() -> None:
    catalog = rule_catalog()
    for rule_id in STACK_RULES:
        assert catalog[rule_id].sources and catalog[rule_id].description


def test_the_life_cycle_tables_are_dated_in_order_and_each_consistent() -> None:
    tables = stack().gpu_operator.life_cycle
    assert [t.published for t in tables] == sorted(t.published for t in tables)
    for table in tables:
        supported, deprecated, gone = (parse_version(v) for v in (table.supported, table.deprecated,
                                                                   table.end_of_support_through))  # fmt: skip
        assert supported and deprecated and gone and supported > deprecated > gone
    newest = tables[-1]
    assert (newest.supported, newest.printed_supported, newest.end_of_support_through) == ("26.7", "26.6.x", "25.10")


def test_every_release_lists_its_tags_and_default_drivers() -> None:
    for release in stack().gpu_operator.releases:
        assert set(release.default_driver) == set(release.tags)
        assert release.kubernetes[0].since == release.containerd[0].since == release.tags[0]


def test_toolkit_drivers_grow_with_the_cuda_release() -> None:
    table = sorted((parse_version(e.cuda), parse_version(e.driver)) for e in stack().cuda.toolkit_drivers)
    drivers = [driver for _, driver in table]
    assert drivers == sorted(drivers)  # the lookup's lower bound for unlisted releases relies on it


# --- GF009: NRI plugin ------------------------------------------------------------------------------------------------

NRI_ON = cluster_policy(cdi={"enabled": True, "nriPluginEnabled": True})


def nri(tmp_path: Path, version: str | None, *runtimes: str, policy: dict[str, Any] = NRI_ON) -> Any:
    nodes = node_list(*(gpu_node(f"gpu-{i:02}", runtime=r) for i, r in enumerate(runtimes, 1)))
    files: list[tuple[str, Any]] = [("policy.yaml", policy), ("nodes.json", nodes)]
    if version:
        files.append(("operator.yaml", operator(version)))
    return doctor(tmp_path, *files)


def test_nri_plugin_on_cri_o_before_26_3_2_is_an_error_naming_the_nodes(tmp_path: Path) -> None:
    finding = only(nri(tmp_path, "26.3.1", "cri-o://1.34.1"), "GF009")
    assert finding.severity is Severity.critical and finding.object == "ClusterPolicy/cluster-policy"
    assert "gpu-01 (cri-o://1.34.1)" in finding.message and "26.3.2" in finding.message
    assert "nriPluginEnabled" in finding.fix and "1.34" in finding.fix


def test_nri_plugin_on_cri_o_1_34_with_26_3_2_is_fine(tmp_path: Path) -> None:
    assert not hits(nri(tmp_path, "26.3.2", "cri-o://1.34.1"), "GF009")


def test_nri_plugin_needs_cri_o_1_34(tmp_path: Path) -> None:
    finding = only(nri(tmp_path, "26.3.3", "cri-o://1.33.4"), "GF009")
    assert "CRI-O 1.34 or later" in finding.message


@pytest.mark.parametrize(
    ("runtime", "bad"),
    [
        ("containerd://1.7.29", True),
        ("containerd://1.7.30", False),
        ("containerd://2.0.5-k3s1", True),  # 2.0 is not in the list
        ("containerd://2.1.4", False),
        ("containerd://2.2.1", False),
        ("containerd://1.6.33", True),
        ("containerd://2.9.0", False),  # newer than the data: not judged
        ("containerd://weird", False),  # unreadable: not judged
    ],
)
def test_nri_plugin_containerd_versions(tmp_path: Path, runtime: str, bad: bool) -> None:
    report = nri(tmp_path, "26.3.3", runtime)
    assert bool(hits(report, "GF009")) is bad
    no_rule_failed(report)


def test_containerd_2_3_with_the_nri_plugin_needs_a_late_26_3_patch(tmp_path: Path) -> None:
    finding = only(nri(tmp_path / "a", "26.3.1", "containerd://2.3.0"), "GF009")
    assert "26.3.3" in finding.message
    assert not hits(nri(tmp_path / "b", "26.3.3", "containerd://2.3.0"), "GF009")
    assert not hits(nri(tmp_path / "c", "26.7.0", "containerd://2.3.0"), "GF009")


def test_nri_plugin_with_cdi_off_is_an_error(tmp_path: Path) -> None:
    policy = cluster_policy(cdi={"enabled": False, "nriPluginEnabled": True})
    finding = only(nri(tmp_path, "26.3.3", "containerd://2.2.1", policy=policy), "GF009")
    assert "spec.cdi.enabled: false" in finding.message


def test_nri_plugin_off_or_absent_is_not_checked(tmp_path: Path) -> None:
    policy = cluster_policy(cdi={"enabled": True, "nriPluginEnabled": False})
    assert not hits(nri(tmp_path / "a", "26.3.1", "cri-o://1.30.0", policy=policy), "GF009")
    assert not hits(nri(tmp_path / "b", "26.3.1", "cri-o://1.30.0", policy=cluster_policy()), "GF009")


def test_nri_plugin_on_an_operator_without_one_is_a_warning(tmp_path: Path) -> None:
    finding = only(nri(tmp_path, "25.10.1", "containerd://2.2.1"), "GF009")
    assert finding.severity is Severity.warning and "26.3.0" in finding.message


def test_without_the_operator_version_only_the_runtime_version_is_judged(tmp_path: Path) -> None:
    assert not hits(nri(tmp_path / "a", None, "cri-o://1.34.0"), "GF009")
    finding = only(nri(tmp_path / "b", None, "cri-o://1.33.0"), "GF009")
    assert "version not known here" in finding.message


def test_nri_plugin_runtime_from_the_cluster_facts_file(tmp_path: Path) -> None:
    report = doctor(tmp_path, ("policy.yaml", NRI_ON), facts={"containerRuntime": "cri-o://1.33.0"})
    assert "the cluster (cri-o://1.33.0)" in only(report, "GF009").message


# --- GF010: R570 with mixed MIG ---------------------------------------------------------------------------------------

MIXED = {"nvidia.com/mig.strategy": "mixed"}


@pytest.mark.parametrize(
    ("driver", "bad"),
    [
        ("570.124.06", True),
        ("570.133.20", True),
        ("570.148.08", True),
        ("570.158.01", True),
        ("570.172.08", False),  # the fix
        ("570.86.15", False),  # before the bug
        ("580.65.06", False),
        ("575.57.08", True),  # released before the fix, the maintainers say
    ],
)
def test_mixed_mig_nodes_with_affected_drivers(tmp_path: Path, driver: str, bad: bool) -> None:
    report = doctor(tmp_path, ("nodes.json", node_list(driver_node("gpu-01", driver, labels=MIXED))))
    found = hits(report, "GF010")
    assert bool(found) is bad
    if bad:
        assert found[0].object == "Node/gpu-01" and driver in found[0].message and "Pending" in found[0].message
        assert "570.172.08" in found[0].fix and "580.65.06" in found[0].fix


def test_single_strategy_with_an_affected_driver_is_fine(tmp_path: Path) -> None:
    node = driver_node("gpu-01", "570.148.08", labels={"nvidia.com/mig.strategy": "single"})
    assert not hits(doctor(tmp_path, ("nodes.json", node_list(node))), "GF010")


def test_mig_slices_next_to_whole_gpus_in_capacity_count_as_mixed(tmp_path: Path) -> None:
    node = gpu_node("gpu-07", gpus=4)
    node["status"]["capacity"]["nvidia.com/mig-1g.10gb"] = "7"
    report = doctor(
        tmp_path, ("nodes.json", node_list(node)), facts={"nodes": {"gpu-07": {"driverVersion": "570.133.20"}}}
    )
    finding = only(report, "GF010")
    assert "nvidia.com/mig-1g.10gb" in finding.message and finding.file.endswith("cluster-facts.yaml")


def test_cluster_policy_deploying_an_affected_driver_with_mixed_mig(tmp_path: Path) -> None:
    bad = cluster_policy(mig={"strategy": "mixed"}, driver={"version": "570.158.01"})
    finding = only(doctor(tmp_path / "a", ("policy.yaml", bad)), "GF010")
    assert finding.object == "ClusterPolicy/cluster-policy" and "570.158.01" in finding.message
    fixed = cluster_policy(mig={"strategy": "mixed"}, driver={"version": "570.172.08"})
    assert not hits(doctor(tmp_path / "b", ("policy.yaml", fixed)), "GF010")


def test_cluster_policy_without_a_driver_version_uses_the_operator_default(tmp_path: Path) -> None:
    policy = cluster_policy(mig={"strategy": "mixed"})
    finding = only(doctor(tmp_path / "a", ("p.yaml", policy), ("o.yaml", operator("25.3.1"))), "GF010")
    assert "570.148.08" in finding.message and "default of GPU Operator 25.3.1" in finding.message
    assert not hits(doctor(tmp_path / "b", ("p.yaml", policy), ("o.yaml", operator("25.3.3"))), "GF010")
    assert not hits(doctor(tmp_path / "c", ("p.yaml", policy)), "GF010")  # no version to go by


def test_precompiled_branch_or_host_driver_is_not_a_driver_version(tmp_path: Path) -> None:
    precompiled = cluster_policy(mig={"strategy": "mixed"}, driver={"usePrecompiled": True, "version": "570"})
    assert not hits(doctor(tmp_path / "a", ("p.yaml", precompiled)), "GF010")
    host = cluster_policy(mig={"strategy": "mixed"}, driver={"enabled": False, "version": "570.148.08"})
    assert not hits(doctor(tmp_path / "b", ("p.yaml", host)), "GF010")


# --- GF011: life cycle ------------------------------------------------------------------------------------------------


def test_an_operator_out_of_support_is_an_error_with_the_upgrade_path(tmp_path: Path) -> None:
    finding = only(doctor(tmp_path, ("operator.yaml", operator("25.10.1"))), "GF011")
    assert finding.severity is Severity.critical and finding.object == "Deployment/gpu-operator/gpu-operator"
    assert "2026-08-21" in finding.message and "26.7.x" in finding.message and '"26.6.x"' in finding.message
    assert "25.10 -> 26.3 -> 26.7" in finding.fix and finding.line == 1


def test_a_deprecated_operator_is_a_warning(tmp_path: Path) -> None:
    finding = only(doctor(tmp_path, ("operator.yaml", operator("26.3.2"))), "GF011")
    assert finding.severity is Severity.warning and "deprecated" in finding.message


def test_the_supported_operator_is_fine(tmp_path: Path) -> None:
    assert not hits(doctor(tmp_path, ("operator.yaml", operator("26.7.0"))), "GF011")


def test_an_operator_newer_than_the_data_is_a_note(tmp_path: Path) -> None:
    finding = only(doctor(tmp_path, ("operator.yaml", operator("27.1.0"))), "GF011")
    assert finding.severity is Severity.info and "newer than the doctor's data" in finding.message


def test_operator_version_from_the_facts_file_and_odd_forms(tmp_path: Path) -> None:
    finding = only(doctor(tmp_path / "a", facts={"gpuOperatorVersion": "v24.9.2"}), "GF011")
    assert finding.file.endswith("cluster-facts.yaml") and "24.9 -> 25.3 -> 25.10 -> 26.3 -> 26.7" in finding.fix
    assert not hits(doctor(tmp_path / "b", facts={"gpuOperatorVersion": "latest"}), "GF011")
    assert not hits(doctor(tmp_path / "c", ("pod.yaml", gpu_pod())), "GF011")


# --- GF012: Kubernetes in the platform matrix -------------------------------------------------------------------------


def matrix(tmp_path: Path, version: str, kube: str, *more: tuple[str, Any]) -> Any:
    return doctor(tmp_path, ("operator.yaml", operator(version)), ("version.json", kubectl_version(kube)), *more)


def test_kubernetes_newer_than_the_operator_release_supports(tmp_path: Path) -> None:
    finding = only(matrix(tmp_path, "26.3.1", "v1.36.2"), "GF012")
    assert finding.severity is Severity.critical and "1.32-1.35" in finding.message
    assert "26.3.2" in finding.fix and finding.file.endswith("version.json")


def test_a_late_patch_widens_the_range(tmp_path: Path) -> None:
    assert not hits(matrix(tmp_path, "26.3.2", "v1.36.2"), "GF012")


def test_kubernetes_older_than_the_operator_supports(tmp_path: Path) -> None:
    finding = only(matrix(tmp_path, "25.10.0", "v1.29.10"), "GF012")
    assert "1.30-1.34" in finding.message and "upgrade Kubernetes to 1.30" in finding.fix


def test_eks_style_versions_are_read(tmp_path: Path) -> None:
    assert not hits(matrix(tmp_path / "a", "25.3.1", "v1.33.2-eks-abc1234"), "GF012")
    finding = only(matrix(tmp_path / "b", "25.3.0", "v1.33.2-eks-abc1234"), "GF012")
    assert "Kubernetes 1.33.2" in finding.message and "25.3.1" in finding.fix


def test_the_ubuntu_24_04_row_admits_1_32_on_26_7(tmp_path: Path) -> None:
    assert hits(matrix(tmp_path / "a", "26.7.0", "v1.32.5"), "GF012")
    noble = gpu_node("gpu-01", kubelet="v1.32.5")
    noble["status"]["nodeInfo"]["osImage"] = "Ubuntu 24.04.2 LTS"
    assert not hits(matrix(tmp_path / "b", "26.7.0", "v1.32.5", ("nodes.json", node_list(noble))), "GF012")


def test_kubernetes_from_the_kubelets_when_no_version_capture(tmp_path: Path) -> None:
    nodes = node_list(gpu_node("gpu-01", kubelet="v1.36.1"))
    report = doctor(tmp_path, ("operator.yaml", operator("25.10.1")), ("nodes.json", nodes))
    fix = only(report, "GF012").fix
    assert "upgrade the GPU Operator to 26.3" in fix and "stay on Kubernetes 1.35" in fix


def test_without_both_versions_there_is_nothing_to_check(tmp_path: Path) -> None:
    assert not hits(doctor(tmp_path / "a", ("operator.yaml", operator("26.3.0"))), "GF012")
    assert not hits(doctor(tmp_path / "b", ("version.json", kubectl_version("v1.36.0"))), "GF012")
    assert not hits(matrix(tmp_path / "c", "23.9.2", "v1.36.0"), "GF012")  # a release the data does not hold


# --- GF016: container CUDA against the node driver --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("image", "env", "cuda"),
    [
        ("nvidia/cuda:12.4.1-runtime-ubuntu22.04", {}, (12, 4, 1)),
        ("nvcr.io/nvidia/cuda:13.0.0-base-ubuntu24.04", {}, (13, 0, 0)),
        ("pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime", {}, (12, 4)),
        ("ghcr.io/example/serve:1.2-cu118", {}, (11, 8)),
        ("example/app:latest", {"CUDA_VERSION": "12.6.3"}, (12, 6, 3)),
        ("example/app:latest", {"NVIDIA_REQUIRE_CUDA": "cuda>=12.8 brand=tesla,driver>=535"}, (12, 8)),
        ("example/app:latest", {}, None),
        ("nvcr.io/nvidia/pytorch:25.01-py3", {}, None),  # the NGC release does not say in its tag
    ],
)
def test_container_cuda_is_read_from_image_and_env(image: str, env: dict[str, str], cuda: Any) -> None:
    container = {"image": image, "env": [{"name": k, "value": v} for k, v in env.items()]}
    found = container_cuda(container)
    assert (found[0] if found else None) == cuda


def test_releases_the_table_does_not_list_take_the_nearest_listed_below() -> None:
    assert toolkit_driver((12, 7)) == ("12.6.3", "560.35.05")
    assert toolkit_driver((13, 4, 1)) == ("13.1.0", "590.44.01")
    assert toolkit_driver((12, 4)) == ("12.4.0", "550.54.14")
    assert toolkit_driver((14, 0)) is None


def cuda_run(tmp_path: Path, image: str, *drivers: str, **spec: Any) -> Any:
    nodes = node_list(*(driver_node(f"gpu-{i:02}", d) for i, d in enumerate(drivers, 1)))
    return doctor(tmp_path, ("pod.yaml", gpu_pod(image=image, **spec)), ("nodes.json", nodes))


def test_driver_below_the_cuda_major_floor_is_an_error(tmp_path: Path) -> None:
    finding = only(cuda_run(tmp_path, "nvidia/cuda:12.4.1-runtime-ubuntu22.04", "470.256.02"), "GF016")
    assert finding.severity is Severity.critical and finding.object == "Pod/ml/train"
    assert "gpu-01 (470.256.02)" in finding.message and "cudaErrorInsufficientDriver" in finding.message
    assert "550.54.15" in finding.fix


def test_driver_above_the_floor_but_below_the_toolkit_driver_is_a_warning(tmp_path: Path) -> None:
    finding = only(cuda_run(tmp_path, "nvidia/cuda:12.4.1-runtime-ubuntu22.04", "535.104.05"), "GF016")
    assert finding.severity is Severity.warning and "minor-version compatibility" in finding.message
    assert "PTX JIT" in finding.message


def test_a_new_enough_driver_is_fine(tmp_path: Path) -> None:
    assert not hits(cuda_run(tmp_path / "a", "nvidia/cuda:12.4.1-runtime-ubuntu22.04", "550.54.15"), "GF016")
    assert not hits(cuda_run(tmp_path / "b", "nvidia/cuda:13.0.0-base-ubuntu24.04", "580.65.06"), "GF016")


def test_cuda_13_on_an_r575_driver_is_an_error(tmp_path: Path) -> None:
    finding = only(cuda_run(tmp_path, "nvidia/cuda:13.0.1-base-ubuntu24.04", "575.57.08"), "GF016")
    assert "floor of 580" in finding.message


def test_node_selector_keeps_the_pod_off_old_drivers(tmp_path: Path) -> None:
    old = driver_node("gpu-old", "470.256.02", labels={"pool": "old"})
    new = driver_node("gpu-new", "560.35.05", labels={"pool": "new"})
    pod = gpu_pod(image="pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime", nodeSelector={"pool": "new"})
    assert not hits(doctor(tmp_path / "a", ("pod.yaml", pod), ("nodes.json", node_list(old, new))), "GF016")
    del pod["spec"]["nodeSelector"]
    finding = only(doctor(tmp_path / "b", ("pod.yaml", pod), ("nodes.json", node_list(old, new))), "GF016")
    assert "gpu-old" in finding.message and "gpu-new" not in finding.message


def test_cuda_checks_need_a_gpu_request_and_node_drivers(tmp_path: Path) -> None:
    cpu_pod = gpu_pod(image="nvidia/cuda:12.4.1-runtime-ubuntu22.04", limits={"cpu": "1"})
    nodes = node_list(driver_node("gpu-01", "470.256.02"))
    assert not hits(doctor(tmp_path / "a", ("pod.yaml", cpu_pod), ("nodes.json", nodes)), "GF016")
    no_driver = node_list(gpu_node("gpu-01"))
    pod = gpu_pod(image="nvidia/cuda:12.4.1-runtime-ubuntu22.04")
    assert not hits(doctor(tmp_path / "b", ("pod.yaml", pod), ("nodes.json", no_driver)), "GF016")


def test_cuda_from_the_manifest_env_and_drivers_from_the_facts_file(tmp_path: Path) -> None:
    pod = gpu_pod(image="example/app:1.0")
    pod["spec"]["containers"][0]["env"] = [{"name": "CUDA_VERSION", "value": "12.8.1"}]
    report = doctor(tmp_path, ("pod.yaml", pod), facts={"nodes": {"gpu-09": {"driverVersion": "525.147.05"}}})
    finding = only(report, "GF016")
    assert "env CUDA_VERSION=12.8.1" in finding.message and "570.124.06" in finding.fix


# --- GF017: nouveau and kernel headers --------------------------------------------------------------------------------


def host_facts(tmp_path: Path, *files: tuple[str, Any], **hosts: dict[str, Any]) -> Any:
    return doctor(tmp_path, *files, facts={"nodes": hosts})


def test_nouveau_loaded_and_not_denylisted_is_an_error(tmp_path: Path) -> None:
    report = host_facts(tmp_path, gpu01={"nouveauLoaded": True, "nouveauBlacklisted": False})
    finding = only(report, "GF017")
    assert finding.severity is Severity.critical and finding.object == "Node/gpu01"
    assert "cannot load" in finding.message and "blacklist nouveau" in finding.fix and "initramfs" in finding.fix


def test_nouveau_denylisted_but_still_loaded_needs_the_initramfs_and_a_reboot(tmp_path: Path) -> None:
    finding = only(host_facts(tmp_path, gpu01={"nouveauLoaded": True, "nouveauBlacklisted": True}), "GF017")
    assert "still loaded" in finding.message and "reboot" in finding.fix


def test_nouveau_not_loaded_is_fine_unless_vgpu_needs_it_denylisted(tmp_path: Path) -> None:
    assert not hits(host_facts(tmp_path / "a", gpu01={"nouveauLoaded": False, "nouveauBlacklisted": False}), "GF017")
    vgpu = cluster_policy(vgpuManager={"enabled": True})
    report = host_facts(tmp_path / "b", ("p.yaml", vgpu), gpu01={"nouveauLoaded": False, "nouveauBlacklisted": False})
    assert "MSI-X" in only(report, "GF017").message


def test_missing_headers_without_a_cluster_policy_say_when_they_matter(tmp_path: Path) -> None:
    finding = only(host_facts(tmp_path, gpu01={"kernel": "5.15.0-1071-nvidia", "kernelHeaders": False}), "GF017")
    assert finding.severity is Severity.warning and "5.15.0-1071-nvidia" in finding.message
    assert "matters when" in finding.message and "usePrecompiled" in finding.fix


def test_missing_headers_matter_only_when_the_operator_compiles_the_driver(tmp_path: Path) -> None:
    host = {"kernel": "6.8.0-60-generic", "kernelHeaders": False}
    compiled = cluster_policy(driver={"enabled": True})
    finding = only(host_facts(tmp_path / "a", ("p.yaml", compiled), gpu01=host), "GF017")
    assert "compiles the driver" in finding.message
    precompiled = cluster_policy(driver={"usePrecompiled": True, "version": "580"})
    assert not hits(host_facts(tmp_path / "b", ("p.yaml", precompiled), gpu01=host), "GF017")
    host_driver = cluster_policy(driver={"enabled": False})
    assert not hits(host_facts(tmp_path / "c", ("p.yaml", host_driver), gpu01=host), "GF017")


def test_unknown_host_facts_raise_nothing(tmp_path: Path) -> None:
    assert not hits(host_facts(tmp_path, gpu01={"kernel": "6.8.0-60-generic"}), "GF017")


# --- GF019: containerd in the platform matrix -------------------------------------------------------------------------


def runtime_run(tmp_path: Path, version: str, *nodes: dict[str, Any]) -> Any:
    return doctor(tmp_path, ("operator.yaml", operator(version)), ("nodes.json", node_list(*nodes)))


def test_containerd_newer_than_the_operator_release_supports(tmp_path: Path) -> None:
    report = runtime_run(tmp_path, "25.3.4", gpu_node("gpu-01", runtime="containerd://2.2.0"))
    finding = only(report, "GF019")
    assert finding.severity is Severity.critical and finding.object == "Node/gpu-01"
    assert "gpu-01 (containerd://2.2.0)" in finding.message and "1.6-2.1" in finding.message
    assert "25.10" in finding.fix


def test_containerd_in_range_is_fine(tmp_path: Path) -> None:
    assert not hits(runtime_run(tmp_path / "a", "25.10.1", gpu_node("gpu-01", runtime="containerd://2.2.0")), "GF019")
    assert not hits(runtime_run(tmp_path / "b", "26.3.1", gpu_node("gpu-01", runtime="containerd://2.2.3")), "GF019")


def test_containerd_2_3_came_with_a_late_26_3_patch(tmp_path: Path) -> None:
    finding = only(runtime_run(tmp_path / "a", "26.3.2", gpu_node("gpu-01", runtime="containerd://2.3.0")), "GF019")
    assert "26.3.3" in finding.fix
    assert not hits(runtime_run(tmp_path / "b", "26.3.3", gpu_node("gpu-01", runtime="containerd://2.3.0")), "GF019")


def test_containerd_1_7_on_26_7_and_k3s_versions(tmp_path: Path) -> None:
    finding = only(runtime_run(tmp_path / "a", "26.7.0", gpu_node("gpu-01", runtime="containerd://1.7.27")), "GF019")
    assert "no 1.8 release" in finding.message and "upgrade containerd" in finding.fix
    k3s = gpu_node("gpu-01", runtime="containerd://2.0.5-k3s1")
    assert "2.0.5-k3s1" in only(runtime_run(tmp_path / "b", "24.9.2", k3s), "GF019").message


def test_cri_o_and_cpu_nodes_are_not_range_checked(tmp_path: Path) -> None:
    crio = gpu_node("gpu-01", runtime="cri-o://1.34.1")
    cpu = gpu_node("cpu-01", runtime="containerd://1.6.0", gpus=0)
    del cpu["metadata"]["labels"]["nvidia.com/gpu.present"]
    assert not hits(runtime_run(tmp_path, "26.3.3", crio, cpu), "GF019")


def test_containerd_from_the_facts_file(tmp_path: Path) -> None:
    facts: dict[str, Any] = {"containerRuntime": "containerd://1.6.38"}
    finding = only(doctor(tmp_path / "a", ("operator.yaml", operator("26.3.3")), facts=facts), "GF019")
    assert "the cluster (containerd://1.6.38)" in finding.message and finding.file.endswith("cluster-facts.yaml")
    facts["nodes"] = {"gpu-01": {"driverVersion": "580.126.20", "containerRuntime": "containerd://2.1.0"}}
    assert not hits(doctor(tmp_path / "b", ("operator.yaml", operator("26.3.3")), facts=facts), "GF019")


# --- GF020: DevicePluginCDIDevices ------------------------------------------------------------------------------------


def gates(tmp_path: Path, kube: str, *files: tuple[str, Any], facts: dict[str, Any] | None = None) -> Any:
    return doctor(tmp_path, ("version.json", kubectl_version(kube)), *files, facts=facts)


def test_cdi_cri_on_1_28_without_the_gate_is_an_error_naming_both_components(tmp_path: Path) -> None:
    finding = only(gates(tmp_path, "v1.28.9", ("dp.yaml", device_plugin("cdi-cri"))), "GF020")
    assert finding.severity is Severity.critical and finding.object == "DaemonSet/kube-system/nvidia-device-plugin"
    assert "kubelet: off by default" in finding.message and "kube-apiserver: off by default" in finding.message
    assert "--feature-gates=DevicePluginCDIDevices=true" in finding.fix and "KubeletConfiguration" in finding.fix


def test_cdi_cri_on_1_28_with_the_gate_on_both_sides_is_fine(tmp_path: Path) -> None:
    report = gates(
        tmp_path,
        "v1.28.9",
        ("dp.yaml", device_plugin("cdi-cri")),
        ("kubelet.yaml", kubelet_config(DevicePluginCDIDevices=True)),
        ("apiserver.yaml", apiserver("--feature-gates=DevicePluginCDIDevices=true")),
    )
    assert not hits(report, "GF020")


def test_beta_gate_turned_off_on_the_kubelet(tmp_path: Path) -> None:
    report = gates(
        tmp_path,
        "v1.29.4",
        ("dp.yaml", device_plugin("cdi-cri")),
        ("kubelet.yaml", kubelet_config(DevicePluginCDIDevices=False)),
    )
    finding = only(report, "GF020")
    assert "kubelet: turned off in" in finding.message and "kube-apiserver" not in finding.fix


def test_ga_and_too_old_versions(tmp_path: Path) -> None:
    assert not hits(gates(tmp_path / "a", "v1.31.0", ("dp.yaml", device_plugin("cdi-cri"))), "GF020")
    finding = only(gates(tmp_path / "b", "v1.27.3", ("dp.yaml", device_plugin("cdi-cri"))), "GF020")
    assert "has no DevicePluginCDIDevices" in finding.message and "cdi-annotations" in finding.fix


def test_other_strategies_are_not_checked_and_mixed_ones_are_a_warning(tmp_path: Path) -> None:
    assert not hits(gates(tmp_path / "a", "v1.28.9", ("dp.yaml", device_plugin("envvar"))), "GF020")
    finding = only(gates(tmp_path / "b", "v1.28.9", ("dp.yaml", device_plugin("cdi-annotations,cdi-cri"))), "GF020")
    assert finding.severity is Severity.warning and "cdi-annotations" in finding.message


def test_cluster_policy_device_plugin_env_and_gates_from_the_facts_file(tmp_path: Path) -> None:
    policy = cluster_policy(devicePlugin={"env": [{"name": "DEVICE_LIST_STRATEGY", "value": "cdi-cri"}]})
    facts = {"featureGates": {"apiserver": {"DevicePluginCDIDevices": False}}}
    finding = only(gates(tmp_path, "v1.30.2", ("p.yaml", policy), facts=facts), "GF020")
    assert finding.object == "ClusterPolicy/cluster-policy" and "kube-apiserver: turned off in" in finding.message


def test_the_operator_sets_cdi_cri_itself_from_25_10(tmp_path: Path) -> None:
    facts = {"featureGates": {"kubelet": {"DevicePluginCDIDevices": False}}}
    files = (("p.yaml", cluster_policy()), ("o.yaml", operator("25.10.1")))
    finding = only(gates(tmp_path / "a", "v1.30.2", *files, facts=facts), "GF020")
    assert finding.severity is Severity.warning and "GPU Operator 25.10.1 sets this" in finding.message
    older = (("p.yaml", cluster_policy(cdi={"enabled": True})), ("o.yaml", operator("25.3.4")))
    assert not hits(gates(tmp_path / "b", "v1.30.2", *older, facts=facts), "GF020")


def test_device_plugin_config_file(tmp_path: Path) -> None:
    config = {"version": "v1", "flags": {"plugin": {"deviceListStrategy": ["cdi-cri"]}}}
    finding = only(gates(tmp_path, "v1.28.9", ("config.yaml", config)), "GF020")
    assert finding.object == "DevicePluginConfig" and finding.file.endswith("config.yaml")


def test_no_kubernetes_version_means_no_gate_check(tmp_path: Path) -> None:
    assert not hits(doctor(tmp_path, ("dp.yaml", device_plugin("cdi-cri"))), "GF020")


# --- odd input --------------------------------------------------------------------------------------------------------


def test_malformed_cluster_policies_and_versions_never_break_a_rule(tmp_path: Path) -> None:
    odd = cluster_policy(cdi="yes", mig=["mixed"], driver="570.148.08", devicePlugin={"env": ["x", {"name": 1}]})
    also = cluster_policy(cdi={"nriPluginEnabled": "true"}, mig={"strategy": "mixed"}, driver={"version": 570})
    node = gpu_node("gpu-01", runtime="", kubelet="vX")
    node["status"]["capacity"]["nvidia.com/mig-1g.10gb"] = "lots"
    weird_pod = copy.deepcopy(gpu_pod(image="nvidia/cuda:latest"))
    weird_pod["spec"]["containers"][0]["env"] = [{"name": "CUDA_VERSION", "value": None}, "junk"]
    report = doctor(
        tmp_path,
        ("odd.yaml", [odd, also, weird_pod]),
        ("nodes.json", node_list(node)),
        ("version.json", kubectl_version("v1")),
        facts={
            "gpuOperatorVersion": "26",
            "containerRuntime": "cri-o",
            "nodes": {"gpu-02": {"driverVersion": "garbage", "kernelHeaders": False}},
        },
    )
    no_rule_failed(report)
    assert not [f for f in report.findings if f.rule in ("GF010", "GF012", "GF016", "GF019", "GF020")]
