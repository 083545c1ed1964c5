from __future__ import annotations

from pathlib import Path
from typing import Any

from gpufleet.doctor.objects import selector_matches
from tests.doctor.helpers import doctor, hits


def service_monitor(
    name: str = "nvidia-dcgm-exporter",
    namespace: str = "gpu-operator",
    labels: dict[str, str] | None = None,
    selector: dict[str, Any] | None = None,
    port: str = "gpu-metrics",
    **spec: Any,
) -> dict[str, Any]:
    """A ServiceMonitor like the GPU Operator's for dcgm-exporter (assets/state-dcgm-exporter)."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {"app": "nvidia-dcgm-exporter"}},
        "spec": {
            "endpoints": [{"port": port, "path": "/metrics"}],
            "jobLabel": "app",
            "namespaceSelector": {"matchNames": [namespace]},
            "selector": selector if selector is not None else {"matchLabels": {"app": "nvidia-dcgm-exporter"}},
            **spec,
        },
    }


def service(name: str = "nvidia-dcgm-exporter", namespace: str = "gpu-operator", **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {"app": "nvidia-dcgm-exporter"}},
        "spec": {
            "selector": {"app": "nvidia-dcgm-exporter"},
            "ports": [{"name": "gpu-metrics", "port": 9400, "targetPort": 9400, "protocol": "TCP"}],
        },
    }


def prometheus(
    name: str = "kube-prometheus-stack-prometheus", namespace: str = "monitoring", **spec: Any
) -> dict[str, Any]:
    """A Prometheus object as kube-prometheus-stack renders it (release label selector, all namespaces)."""
    defaults: dict[str, Any] = {
        "serviceMonitorSelector": {"matchLabels": {"release": "kube-prometheus-stack"}},
        "serviceMonitorNamespaceSelector": {},
        "podMonitorSelector": {"matchLabels": {"release": "kube-prometheus-stack"}},
        "podMonitorNamespaceSelector": {},
    }
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "Prometheus",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {**defaults, **spec},
    }


def pod_monitor(port: str = "metrics", labels: dict[str, str] | None = None, **selector: str) -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": {
            "name": "dcgm",
            "namespace": "monitoring",
            "labels": labels or {"release": "kube-prometheus-stack"},
        },
        "spec": {
            "selector": {"matchLabels": selector or {"app.kubernetes.io/name": "dcgm-exporter"}},
            "podMetricsEndpoints": [{"port": port, "path": "/metrics"}],
        },
    }


def exporter_daemonset() -> dict[str, Any]:
    labels = {"app.kubernetes.io/name": "dcgm-exporter"}
    container = {
        "name": "exporter",
        "image": "nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-ubuntu22.04",
        "ports": [{"name": "metrics", "containerPort": 9400}],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "dcgm-exporter", "namespace": "monitoring"},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
        },
    }


def namespace(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


# -- label selectors ----------------------------------------------------------------------------------------------


def test_selector_matches_follows_the_kubernetes_rules() -> None:
    labels = {"app": "dcgm", "tier": "gpu"}
    assert selector_matches({}, labels)
    assert selector_matches({"matchLabels": {"app": "dcgm"}}, labels)
    assert not selector_matches({"matchLabels": {"app": "dcgm", "release": "x"}}, labels)
    expressions = [
        {"key": "tier", "operator": "In", "values": ["gpu", "cpu"]},
        {"key": "env", "operator": "NotIn", "values": ["dev"]},
        {"key": "app", "operator": "Exists"},
        {"key": "legacy", "operator": "DoesNotExist"},
    ]
    assert selector_matches({"matchExpressions": expressions}, labels)
    assert not selector_matches({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["gpu"]}]}, labels)
    assert not selector_matches({"matchExpressions": [{"key": "env", "operator": "In", "values": ["dev"]}]}, labels)
    assert not selector_matches({"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]}, labels)
    # malformed selectors select nothing; they never raise
    assert not selector_matches({"matchExpressions": [{"key": "app", "operator": "Gt", "values": ["1"]}]}, labels)
    assert not selector_matches({"matchLabels": ["app"]}, labels)
    assert not selector_matches({"matchExpressions": "app"}, labels)
    assert not selector_matches({"matchExpressions": [7]}, labels)
    assert not selector_matches("app=dcgm", labels)  # type: ignore[arg-type]


# -- GF007 (a): no Prometheus picks the monitor up ----------------------------------------------------------------


def test_gf007_prometheus_selector_proves_the_monitor_is_ignored(tmp_path: Path) -> None:
    report = doctor(tmp_path, ("prom.yaml", prometheus()), ("sm.yaml", [service_monitor(), service()]))
    [finding] = hits(report, "GF007")
    assert finding.severity == "critical" and finding.object == "ServiceMonitor/gpu-operator/nvidia-dcgm-exporter"
    assert "Prometheus/monitoring/kube-prometheus-stack-prometheus" in finding.message
    assert "app=nvidia-dcgm-exporter" in finding.message
    assert "release: kube-prometheus-stack" in finding.fix
    assert hits(report, "GF090") == []  # ServiceMonitor and Prometheus are kinds the rules read


def test_gf007_labelled_monitor_is_picked_up(tmp_path: Path) -> None:
    labels = {"app": "nvidia-dcgm-exporter", "release": "kube-prometheus-stack"}
    report = doctor(tmp_path, ("prom.yaml", prometheus()), ("sm.yaml", [service_monitor(labels=labels), service()]))
    assert hits(report, "GF007") == []


def test_gf007_match_expressions_and_a_second_prometheus(tmp_path: Path) -> None:
    team = prometheus(
        "gpu", "gpu-monitoring", serviceMonitorSelector={"matchExpressions": [{"key": "app", "operator": "Exists"}]}
    )
    report = doctor(tmp_path, ("prom.yaml", [prometheus(), team]), ("sm.yaml", [service_monitor(), service()]))
    assert [f for f in hits(report, "GF007") if f.severity == "critical"] == []


def test_gf007_null_selectors(tmp_path: Path) -> None:
    unset = prometheus(serviceMonitorSelector=None)
    [finding] = hits(doctor(tmp_path, ("p.yaml", unset), ("sm.yaml", service_monitor())), "GF007")
    assert "serviceMonitorSelector is not set" in finding.message

    # a null namespace selector: the Prometheus object's own namespace only
    own = prometheus(serviceMonitorSelector={}, serviceMonitorNamespaceSelector=None)
    [finding] = hits(doctor(tmp_path / "b", ("p.yaml", own), ("sm.yaml", service_monitor())), "GF007")
    assert "own namespace monitoring only" in finding.message
    assert (
        hits(doctor(tmp_path / "c", ("p.yaml", own), ("sm.yaml", service_monitor(namespace="monitoring"))), "GF007")
        == []
    )


def test_gf007_namespace_selector_on_namespace_labels(tmp_path: Path) -> None:
    selecting = prometheus(
        serviceMonitorSelector={}, serviceMonitorNamespaceSelector={"matchLabels": {"monitoring": "on"}}
    )
    labelled = namespace("gpu-operator", monitoring="on")
    unlabelled = namespace("gpu-operator")
    sm = service_monitor()
    assert hits(doctor(tmp_path, ("p.yaml", [selecting, labelled, sm])), "GF007") == []
    [finding] = hits(doctor(tmp_path / "b", ("p.yaml", [selecting, unlabelled, sm])), "GF007")
    assert "does not take in namespace gpu-operator" in finding.message
    # without the Namespace object the labels are unknown: no verdict
    assert hits(doctor(tmp_path / "c", ("p.yaml", [selecting, sm])), "GF007") == []
    # the name label is always there
    by_name = prometheus(
        serviceMonitorSelector={},
        serviceMonitorNamespaceSelector={"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
    )
    [finding] = hits(doctor(tmp_path / "d", ("p.yaml", [by_name, sm])), "GF007")
    assert finding.severity == "critical"


def test_gf007_without_prometheus_assumes_kube_prometheus_stack(tmp_path: Path) -> None:
    [finding] = hits(doctor(tmp_path, ("sm.yaml", [service_monitor(), service()])), "GF007")
    assert finding.severity == "warning"
    assert "kube-prometheus-stack" in finding.message and "assumed" in finding.message
    assert "serviceMonitorSelectorNilUsesHelmValues" in finding.fix
    labelled = service_monitor(labels={"app": "nvidia-dcgm-exporter", "release": "gpu-monitoring"})
    assert hits(doctor(tmp_path / "b", ("sm.yaml", [labelled, service()])), "GF007") == []


# -- GF007 (b): the monitor scrapes nothing -----------------------------------------------------------------------

RELEASED = {"release": "kube-prometheus-stack"}


def test_gf007_service_monitor_selector_matches_no_service(tmp_path: Path) -> None:
    sm = service_monitor(labels=RELEASED, selector={"matchLabels": {"app": "dcgm-exporter"}})
    other = service("nvidia-dcgm-exporter", app="nvidia-dcgm-exporter")
    other["spec"]["selector"] = {"app": "dcgm-exporter"}  # the pods' labels, not the Service's
    [finding] = hits(doctor(tmp_path, ("sm.yaml", [sm, other])), "GF007")
    assert finding.severity == "warning" and "scrapes nothing" in finding.message
    assert "namespace gpu-operator (nvidia-dcgm-exporter)" in finding.message
    assert "own metadata.labels" in finding.message


def test_gf007_services_elsewhere_prove_nothing(tmp_path: Path) -> None:
    sm = service_monitor(labels=RELEASED, selector={"matchLabels": {"app": "dcgm-exporter"}})
    assert hits(doctor(tmp_path, ("sm.yaml", [sm, service(namespace="default")])), "GF007") == []
    any_namespace = service_monitor(
        labels=RELEASED, namespaceSelector={"any": True}, selector={"matchLabels": {"x": "y"}}
    )
    assert hits(doctor(tmp_path / "b", ("sm.yaml", [any_namespace, service()])), "GF007") == []


def test_gf007_endpoint_port_the_service_does_not_name(tmp_path: Path) -> None:
    sm = service_monitor(labels=RELEASED, port="metrics")
    [finding] = hits(doctor(tmp_path, ("sm.yaml", [sm, service()])), "GF007")
    assert "endpoints[0].port 'metrics'" in finding.message and "gpu-metrics" in finding.message
    assert hits(doctor(tmp_path / "b", ("sm.yaml", [service_monitor(labels=RELEASED), service()])), "GF007") == []


def test_gf007_pod_monitor_against_pod_templates(tmp_path: Path) -> None:
    prom = prometheus()
    ok = doctor(tmp_path, ("a.yaml", [prom, pod_monitor(), exporter_daemonset()]))
    assert hits(ok, "GF007") == []

    [wrong_port] = hits(
        doctor(tmp_path / "b", ("a.yaml", [prom, pod_monitor("gpu-metrics"), exporter_daemonset()])), "GF007"
    )
    assert "podMetricsEndpoints[0] port 'gpu-metrics'" in wrong_port.message and "metrics" in wrong_port.message

    selects_none = pod_monitor(app="nvidia-dcgm-exporter")
    [nothing] = hits(doctor(tmp_path / "c", ("a.yaml", [prom, selects_none, exporter_daemonset()])), "GF007")
    assert (
        "PodMonitor dcgm scrapes nothing" in nothing.message and "DaemonSet/monitoring/dcgm-exporter" in nothing.message
    )

    unpicked = pod_monitor(labels={"team": "gpu"})
    [ignored] = hits(doctor(tmp_path / "d", ("a.yaml", [prom, unpicked, exporter_daemonset()])), "GF007")
    assert ignored.severity == "critical" and "podMonitorSelector" in ignored.message


def test_gf007_odd_monitors_do_not_crash(tmp_path: Path) -> None:
    odd = [
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "ServiceMonitor",
            "metadata": {"name": "a", "labels": RELEASED},
            "spec": "x",
        },
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "ServiceMonitor",
            "metadata": {"name": "b", "namespace": "gpu-operator", "labels": RELEASED},
            "spec": {"selector": ["app"], "endpoints": "all", "namespaceSelector": {"matchNames": "gpu-operator"}},
        },
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "PodMonitor",
            "metadata": {"name": "c", "namespace": "monitoring", "labels": RELEASED},
            "spec": {"selector": {}, "podMetricsEndpoints": [None, {"portNumber": 9400}, {"targetPort": "x"}]},
        },
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "Prometheus",
            "metadata": {"name": "p"},
            "spec": {"serviceMonitorSelector": "all"},
        },
        {
            "apiVersion": "example.com/v1",
            "kind": "ServiceMonitor",
            "metadata": {"name": "not-prometheus-operator"},
            "spec": {},
        },
        service(),
        exporter_daemonset(),
    ]
    report = doctor(tmp_path, ("odd.yaml", odd))
    assert [f for f in report.findings if f.rule == "GF007" and "could not run" in f.message] == []
    found = hits(report, "GF007")
    assert {f.object for f in found} <= {"ServiceMonitor/a", "ServiceMonitor/gpu-operator/b", "PodMonitor/monitoring/c"}
    pod_ports = [
        f.message for f in found if f.object == "PodMonitor/monitoring/c" and "podMetricsEndpoints" in f.message
    ]
    assert len(pod_ports) == 1 and "podMetricsEndpoints[2] targetPort 'x'" in pod_ports[0]  # portNumber 9400 exists


# -- GF008 --------------------------------------------------------------------------------------------------------

CAPACITY_ALERT = """\
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: gpu-alerts
  namespace: monitoring
  labels: {release: kube-prometheus-stack}
spec:
  groups:
  - name: gpu-nodes
    rules:
    - record: node:gpu_capacity:sum
      expr: sum by (node) (kube_node_status_capacity{resource="nvidia_com_gpu"})
    - alert: GPUNodeLostGPU
      expr: kube_node_status_capacity{job="kube-state-metrics", resource="nvidia_com_gpu"} < 8
      for: 10m
      labels: {severity: critical}
"""


def test_gf008_alert_on_gpu_capacity(tmp_path: Path) -> None:
    [finding] = hits(doctor(tmp_path, ("rules.yaml", CAPACITY_ALERT)), "GF008")
    assert finding.severity == "warning" and finding.object == "PrometheusRule/monitoring/gpu-alerts"
    assert "GPUNodeLostGPU" in finding.message and "group gpu-nodes" in finding.message
    assert 'kube_node_status_allocatable{resource="nvidia_com_gpu"}' in finding.fix


def test_gf008_allocatable_and_non_gpu_alerts_are_fine(tmp_path: Path) -> None:
    gpus = 'resource="nvidia_com_gpu"'
    good = CAPACITY_ALERT.replace(
        f'kube_node_status_capacity{{job="kube-state-metrics", {gpus}}} < 8',
        f"kube_node_status_allocatable{{{gpus}}} < kube_node_status_capacity{{{gpus}}}",
    )
    cpu = CAPACITY_ALERT.replace('resource="nvidia_com_gpu"} < 8', 'resource="cpu"} < 64')
    assert hits(doctor(tmp_path, ("a.yaml", good)), "GF008") == []
    assert hits(doctor(tmp_path / "b", ("b.yaml", cpu)), "GF008") == []


def test_gf008_plain_rule_file_counting_dcgm_series(tmp_path: Path) -> None:
    rules = """\
groups:
- name: dcgm
  rules:
  - alert: GPUsMissing
    expr: count by (Hostname) (DCGM_FI_DEV_GPU_TEMP) < 8
    for: 15m
  - alert: GPUXid
    expr: count by (Hostname) (DCGM_FI_DEV_XID_ERRORS > 0) > 0
  - alert: MIGSlicesMissing
    expr: kube_node_status_capacity{resource=~"nvidia_com_mig_.*"} < 7
"""
    report = doctor(tmp_path, ("gpu.rules.yaml", rules))
    found = hits(report, "GF008")
    assert sorted(f.object for f in found) == ["Alert/GPUsMissing", "Alert/MIGSlicesMissing"]
    dcgm = next(f for f in found if f.object == "Alert/GPUsMissing")
    assert "DCGM_FI_DEV_GPU_TEMP" in dcgm.message and dcgm.file.endswith("gpu.rules.yaml") and dcgm.line == 1
    mig = next(f for f in found if f.object == "Alert/MIGSlicesMissing")
    assert 'resource="nvidia_com_mig_.*"' in mig.fix
    assert hits(report, "GF090") == []  # a rule file is a config the doctor reads


def test_gf008_odd_rule_files_do_not_crash(tmp_path: Path) -> None:
    odd = """\
groups:
- 7
- name: x
  rules: [1, {alert: A, expr: 5}, {alert: B}, {expr: kube_node_status_capacity}]
- rules: 3
"""
    odd_rule = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "r"},
        "spec": {"groups": {"a": 1}},
    }
    report = doctor(tmp_path, ("a.yaml", odd), ("b.yaml", odd_rule))
    assert hits(report, "GF008") == []
