from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.doctor.helpers import deployment, doctor, gpu_node, gpu_pod, hits, node_list

# The GPU Operator's documented time-slicing ConfigMap (gpu-sharing.rst, time-slicing-config-all.yaml).
TIME_SLICING_CM = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: time-slicing-config-all
  namespace: gpu-operator
data:
  any: |-
    version: v1
    flags:
      migStrategy: none
    sharing:
      timeSlicing:
        resources:
        - name: nvidia.com/gpu
          replicas: 4
"""

RENAMED_CONFIG = """\
version: v1
flags:
  migStrategy: none
sharing:
  timeSlicing:
    renameByDefault: true
    failRequestsGreaterThanOne: true
    resources:
    - name: nvidia.com/gpu
      replicas: 10
"""

MPS_CONFIG = """\
version: v1
sharing:
  mps:
    resources:
    - name: nvidia.com/gpu
      replicas: 10
"""

# GPU Feature Discovery's labels on a node whose GPUs are time-sliced 4 ways (gpu-sharing.rst).
TIME_SLICED = {
    "nvidia.com/gpu.replicas": "4",
    "nvidia.com/gpu.sharing-strategy": "time-slicing",
    "nvidia.com/gpu.product": "Tesla-T4-SHARED",
}


def running_pod(name: str, namespace: str, node: str, phase: str = "Running", **limits: Any) -> dict[str, Any]:
    """A pod as `kubectl get pods -A -o json` prints it: bound to a node, with a status."""
    pod = gpu_pod(name, namespace=namespace, limits=limits or {"nvidia.com/gpu": 1})
    pod["metadata"].update(uid=f"uid-{name}", resourceVersion="1")
    pod["spec"]["nodeName"] = node
    pod["status"] = {"phase": phase}
    return pod


def pod_list(*pods: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "List", "items": list(pods), "metadata": {"resourceVersion": ""}}


def cluster_policy(**spec: Any) -> dict[str, Any]:
    """A ClusterPolicy (nvidia.com/v1) as the GPU Operator chart renders it, with `spec` overrides."""
    return {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "cluster-policy"},
        "spec": {
            "mig": {"strategy": "single"},
            "devicePlugin": {"enabled": True},
            "dcgmExporter": {"enabled": True, "serviceMonitor": {"enabled": True}},
            "migManager": {"enabled": True, "config": {"default": "all-disabled", "name": ""}},
            **spec,
        },
    }


def dcgm_exporter(env: dict[str, str] | None = None, args: list[str] | None = None) -> dict[str, Any]:
    """dcgm-exporter's DaemonSet as its Helm chart renders it (DCGM_EXPORTER_KUBERNETES=true by default)."""
    container: dict[str, Any] = {
        "name": "exporter",
        "image": "nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-ubuntu22.04",
        "args": args if args is not None else ["-f", "/etc/dcgm-exporter/dcp-metrics-included.csv"],
        "env": [
            {"name": k, "value": v}
            for k, v in (env if env is not None else {"DCGM_EXPORTER_KUBERNETES": "true"}).items()
        ],
        "ports": [{"name": "metrics", "containerPort": 9400}],
    }
    labels = {"app.kubernetes.io/name": "dcgm-exporter"}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "dcgm-exporter", "namespace": "monitoring"},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
        },
    }


# -- GF005 -----------------------------------------------------------------------------------------------------------


def test_gf005_operator_configmap_names_the_tenants_that_share(tmp_path: Path) -> None:
    train = deployment("train", gpu_pod(namespace="team-a"))
    serve = deployment("serve", gpu_pod(namespace="team-b"))
    cpu_only = deployment("web", {"metadata": {"namespace": "team-c"}, "spec": {"containers": [{"name": "w"}]}})
    report = doctor(tmp_path, ("cm.yaml", TIME_SLICING_CM), ("apps.yaml", [train, serve, cpu_only]))
    [finding] = hits(report, "GF005")
    assert finding.severity == "warning"
    assert finding.object == "ConfigMap/gpu-operator/time-slicing-config-all"
    assert "key 'any'" in finding.message and "nvidia.com/gpu x4" in finding.message
    assert "namespaces team-a, team-b" in finding.message and "team-c" not in finding.message
    assert "Deployment/team-a/train" in finding.message
    assert "failRequestsGreaterThanOne is false" in finding.message
    assert "MIG" in finding.fix and "failRequestsGreaterThanOne: true" in finding.fix
    assert hits(report, "GF006") == []


def test_gf005_standalone_config_with_rename_counts_pods_asking_for_the_shared_name(tmp_path: Path) -> None:
    shared = gpu_pod("notebook", namespace="research", limits={"nvidia.com/gpu.shared": 1})
    exclusive = gpu_pod("train", namespace="ml")
    report = doctor(tmp_path, ("plugin-config.yaml", RENAMED_CONFIG), ("pods.yaml", [shared, exclusive]))
    [finding] = hits(report, "GF005")
    assert finding.file.endswith("plugin-config.yaml") and finding.object == "DevicePluginConfig"
    assert "asked for as nvidia.com/gpu.shared" in finding.message
    assert "only namespace research has pods" in finding.message and "Pod/ml/train" not in finding.message
    assert "failRequestsGreaterThanOne" not in finding.message  # set to true: nothing to say
    assert hits(report, "GF090") == []  # the config is read, not skipped


def test_gf005_node_labels_and_pod_capture_name_the_pods_on_those_nodes(tmp_path: Path) -> None:
    nodes = node_list(
        gpu_node("t4-01", product="Tesla-T4-SHARED", gpus=16, labels=TIME_SLICED),
        gpu_node("t4-02", product="Tesla-T4-SHARED", gpus=16, labels=TIME_SLICED),
        gpu_node("h100-01"),
    )
    pods = pod_list(
        running_pod("a", "team-a", "t4-01"),
        running_pod("b", "team-b", "t4-02"),
        running_pod("c", "team-c", "h100-01"),  # not a time-sliced node
        running_pod("d", "team-d", "t4-01", phase="Succeeded"),  # finished: shares nothing
        running_pod("e", "team-e", "t4-01", **{"cpu": "1"}),  # no GPU
    )
    report = doctor(tmp_path, ("nodes.json", nodes), ("pods.json", pods))
    [finding] = hits(report, "GF005")
    assert finding.object == "Node/t4-01" and finding.file.endswith("nodes.json")
    assert "nodes t4-01, t4-02" in finding.message and "h100-01" not in finding.message
    assert "nvidia.com/gpu.sharing-strategy=time-slicing, nvidia.com/gpu.replicas=4" in finding.message
    assert "namespaces team-a, team-b" in finding.message
    for other in ("team-c", "team-d", "team-e"):
        assert other not in finding.message


def test_gf005_older_gpu_feature_discovery_without_the_strategy_label(tmp_path: Path) -> None:
    labels = {"nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.product": "Tesla-T4-SHARED"}
    report = doctor(tmp_path, ("nodes.json", node_list(gpu_node("t4-01", product="Tesla-T4-SHARED", labels=labels))))
    [finding] = hits(report, "GF005")
    assert "nvidia.com/gpu.replicas=4" in finding.message
    assert "cannot be named" in finding.message  # no pods in the input


def test_gf005_config_without_sharing_or_with_one_replica_is_fine(tmp_path: Path) -> None:
    no_sharing = TIME_SLICING_CM.replace(
        "    sharing:\n      timeSlicing:\n        resources:\n", "    x:\n      y:\n        z:\n"
    )
    one_replica = TIME_SLICING_CM.replace("replicas: 4", "replicas: 1").replace("-all", "-one")
    plain = "version: v1\nflags:\n  migStrategy: mixed\n"
    exclusive = {"nvidia.com/gpu.replicas": "1", "nvidia.com/gpu.sharing-strategy": "none"}
    report = doctor(
        tmp_path,
        ("a.yaml", no_sharing),
        ("b.yaml", one_replica),
        ("c.yaml", plain),
        ("nodes.json", node_list(gpu_node("h100-01", labels=exclusive))),
        ("p.yaml", gpu_pod()),
    )
    assert hits(report, "GF005") == [] and hits(report, "GF006") == []


def test_gf005_odd_configmaps_and_configs_do_not_crash(tmp_path: Path) -> None:
    odd_data = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: odd, namespace: x}
data:
  broken: "sharing: [unclosed"
  two: "sharing: 1\\n---\\nsharing: 2"
  deep: "version: v1\\nsharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: four}, 7, {replicas: 3}]}}"
  notes: "mps is not used here"
"""
    odd_config = "version: v1\nsharing:\n  timeSlicing: [1, 2]\n  mps: 'no'\n"
    weird = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: w}\ndata: [1, 2]\n"
    report = doctor(tmp_path, ("a.yaml", odd_data), ("b.yaml", odd_config), ("c.yaml", weird))
    assert [f for f in report.findings if f.rule in ("GF005", "GF006", "GF015", "GF022")] == []


# -- GF006 -----------------------------------------------------------------------------------------------------------


def test_gf006_mps_config_warns_about_shared_fault_domain(tmp_path: Path) -> None:
    cm = TIME_SLICING_CM.replace(
        "      timeSlicing:\n        resources:\n        - name: nvidia.com/gpu\n          replicas: 4",
        "      mps:\n        resources:\n        - name: nvidia.com/gpu\n          replicas: 10",
    )
    pods = [gpu_pod("a", namespace="team-a"), gpu_pod("b", namespace="team-b")]
    report = doctor(tmp_path, ("cm.yaml", cm), ("pods.yaml", pods))
    [finding] = hits(report, "GF006")
    assert finding.severity == "warning" and finding.object == "ConfigMap/gpu-operator/time-slicing-config-all"
    assert "MPS" in finding.message and "every client on that GPU" in finding.message
    assert "namespaces team-a, team-b" in finding.message
    assert hits(report, "GF005") == []  # MPS, not time-slicing


def test_gf006_mps_node_labels(tmp_path: Path) -> None:
    labels = {"nvidia.com/gpu.replicas": "10", "nvidia.com/gpu.sharing-strategy": "mps"}
    nodes = node_list(gpu_node("a100-01", labels=labels))
    pods = pod_list(running_pod("infer", "serving", "a100-01"))
    report = doctor(tmp_path, ("nodes.json", nodes), ("pods.json", pods))
    [finding] = hits(report, "GF006")
    assert finding.object == "Node/a100-01" and "nvidia.com/gpu.sharing-strategy=mps" in finding.message
    assert "only namespace serving has pods that share" in finding.message
    assert hits(report, "GF005") == []


def test_gf006_mps_with_one_replica_shares_nothing(tmp_path: Path) -> None:
    report = doctor(tmp_path, ("mps.yaml", MPS_CONFIG.replace("replicas: 10", "replicas: 1")))
    assert hits(report, "GF006") == [] and hits(report, "GF005") == []


def test_gf006_standalone_mps_config_without_workloads(tmp_path: Path) -> None:
    [finding] = hits(doctor(tmp_path, ("mps.yaml", MPS_CONFIG)), "GF006")
    assert "nvidia.com/gpu x10" in finding.message and "cannot be named" in finding.message


# -- GF015 -----------------------------------------------------------------------------------------------------------


def test_gf015_pod_mapping_without_virtual_gpus_on_time_sliced_gpus(tmp_path: Path) -> None:
    report = doctor(tmp_path, ("cm.yaml", TIME_SLICING_CM), ("dcgm.yaml", dcgm_exporter()))
    [finding] = hits(report, "GF015")
    assert finding.severity == "warning" and finding.object == "DaemonSet/monitoring/dcgm-exporter"
    assert "time-slicing" in finding.message and "one pod per GPU" in finding.message
    assert "KUBERNETES_VIRTUAL_GPUS=true" in finding.fix and "--kubernetes-virtual-gpus" in finding.fix


def test_gf015_short_flag_turns_the_mapping_on(tmp_path: Path) -> None:
    exporter = dcgm_exporter(env={}, args=["-f", "/etc/dcgm-exporter/default-counters.csv", "-k"])
    report = doctor(tmp_path, ("cm.yaml", TIME_SLICING_CM), ("dcgm.yaml", exporter))
    assert len(hits(report, "GF015")) == 1


def test_gf015_virtual_gpus_on_is_a_note_about_double_counting(tmp_path: Path) -> None:
    exporter = dcgm_exporter(env={"DCGM_EXPORTER_KUBERNETES": "true", "KUBERNETES_VIRTUAL_GPUS": "true"})
    report = doctor(tmp_path, ("cm.yaml", TIME_SLICING_CM), ("dcgm.yaml", exporter))
    [finding] = hits(report, "GF015")
    assert finding.severity == "info" and "once per pod" in finding.message


def test_gf015_no_pod_mapping_or_no_sharing_is_fine(tmp_path: Path) -> None:
    no_mapping = dcgm_exporter(env={})
    flag_off = dcgm_exporter(args=["--kubernetes=false"])
    assert hits(doctor(tmp_path, ("cm.yaml", TIME_SLICING_CM), ("d.yaml", [no_mapping, flag_off])), "GF015") == []
    assert hits(doctor(tmp_path / "b", ("dcgm.yaml", dcgm_exporter()), ("p.yaml", gpu_pod())), "GF015") == []


def test_gf015_cluster_policy_exporter_on_time_sliced_nodes(tmp_path: Path) -> None:
    nodes = node_list(gpu_node("t4-01", product="Tesla-T4-SHARED", labels=TIME_SLICED))
    report = doctor(tmp_path, ("cp.yaml", cluster_policy()), ("nodes.json", nodes))
    [finding] = hits(report, "GF015")
    assert finding.object == "ClusterPolicy/cluster-policy" and "nodes t4-01" in finding.message
    assert hits(report, "GF090") == []  # ClusterPolicy is a kind the rules read

    virtual = cluster_policy(dcgmExporter={"env": [{"name": "KUBERNETES_VIRTUAL_GPUS", "value": "true"}]})
    [note] = hits(doctor(tmp_path / "b", ("cp.yaml", virtual), ("nodes.json", nodes)), "GF015")
    assert note.severity == "info"

    disabled = cluster_policy(dcgmExporter={"enabled": False})
    assert hits(doctor(tmp_path / "c", ("cp.yaml", disabled), ("nodes.json", nodes)), "GF015") == []


# -- GF022 -----------------------------------------------------------------------------------------------------------


def mig_node(name: str, **labels: str) -> dict[str, Any]:
    """An A100 node using the mixed strategy with seven 1g.10gb instances, as the kubelet and GFD report it."""
    node = gpu_node(
        name, product="NVIDIA-A100-SXM4-80GB", gpus=0, labels={"nvidia.com/mig.strategy": "mixed", **labels}
    )
    for section in ("capacity", "allocatable"):
        node["status"][section].pop("nvidia.com/gpu")
        node["status"][section]["nvidia.com/mig-1g.10gb"] = "7"
    return node


def test_gf022_cluster_policy_without_mig_manager_while_nodes_use_mig(tmp_path: Path) -> None:
    policy = cluster_policy(mig={"strategy": "mixed"}, migManager={"enabled": False})
    report = doctor(tmp_path, ("cp.yaml", policy), ("nodes.json", node_list(mig_node("a100-01"), gpu_node("h100-01"))))
    [finding] = hits(report, "GF022")
    assert finding.severity == "warning" and finding.object == "ClusterPolicy/cluster-policy"
    assert "a100-01 (capacity nvidia.com/mig-1g.10gb)" in finding.message and "h100-01" not in finding.message
    assert "instances do not" in finding.message
    assert "nvidia.com/mig.config=" in finding.fix and "nvidia.com/mig.config.state=success" in finding.fix


def test_gf022_mig_nodes_without_any_mig_manager_in_the_input(tmp_path: Path) -> None:
    single = gpu_node(
        "h100-02",
        product="NVIDIA-H100-80GB-HBM3-MIG-1g.10gb",
        gpus=56,
        labels={"nvidia.com/mig.strategy": "single", "nvidia.com/gpu.slices.gi": "1"},
    )
    report = doctor(tmp_path, ("nodes.json", node_list(mig_node("a100-01"), single)))
    [finding] = hits(report, "GF022")
    assert finding.object == "Node/a100-01" and finding.file.endswith("nodes.json")
    assert "a100-01" in finding.message and "h100-02 (nvidia.com/mig.strategy=single" in finding.message


def test_gf022_mig_manager_evidence_means_the_layout_comes_back(tmp_path: Path) -> None:
    managed = mig_node("a100-01", **{"nvidia.com/mig.config": "all-1g.10gb", "nvidia.com/mig.config.state": "success"})
    assert hits(doctor(tmp_path, ("nodes.json", node_list(managed))), "GF022") == []

    mig_parted = """\
version: v1
mig-configs:
  all-1g.10gb:
  - devices: all
    mig-enabled: true
    mig-devices: {1g.10gb: 7}
"""
    report = doctor(tmp_path / "b", ("nodes.json", node_list(mig_node("a100-01"))), ("mig.yaml", mig_parted))
    assert hits(report, "GF022") == []

    enabled = cluster_policy(mig={"strategy": "mixed"})  # migManager.enabled true, as by default
    report = doctor(tmp_path / "c", ("cp.yaml", enabled), ("nodes.json", node_list(mig_node("a100-01"))))
    assert hits(report, "GF022") == []


def test_gf022_disabled_mig_manager_without_mig_in_use_is_fine(tmp_path: Path) -> None:
    policy = cluster_policy(migManager={"enabled": False})  # the chart's default strategy is single
    assert hits(doctor(tmp_path, ("cp.yaml", policy)), "GF022") == []
    report = doctor(tmp_path / "b", ("cp.yaml", policy), ("nodes.json", node_list(gpu_node("h100-01"))))
    assert hits(report, "GF022") == []


def test_gf022_mixed_strategy_with_mig_manager_off_and_no_node_capture(tmp_path: Path) -> None:
    policy = cluster_policy(mig={"strategy": "mixed"}, migManager={"enabled": False})
    [finding] = hits(doctor(tmp_path, ("cp.yaml", policy)), "GF022")
    assert "strategy: mixed" in finding.message


def test_gf022_odd_cluster_policy_does_not_crash(tmp_path: Path) -> None:
    odd = {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "x"},
        "spec": {"migManager": "off", "mig": 3, "dcgmExporter": [1]},
    }
    report = doctor(tmp_path, ("cp.yaml", odd), ("nodes.json", node_list(mig_node("a100-01"))))
    assert [f for f in report.findings if f.rule in ("GF015", "GF022") and f.severity == "info"] == []
    assert hits(report, "GF022") == []  # a ClusterPolicy is there and does not turn the MIG manager off
