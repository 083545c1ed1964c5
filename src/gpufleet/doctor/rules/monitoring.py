"""Rules on monitoring GPU clusters with the Prometheus Operator: ServiceMonitors and PodMonitors that no
Prometheus picks up or that scrape nothing, and alerts meant to catch lost GPUs that cannot fire."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from gpufleet.doctor.objects import K8sObject, PodTemplate, as_dict, as_list, mapping, selector_matches
from gpufleet.doctor.rules.base import Context, Hit, rule
from gpufleet.model import Severity

PROMETHEUS_KINDS = ("Prometheus", "PrometheusAgent")
NAME_LABEL = "kubernetes.io/metadata.name"  # set on every namespace by the API server


@dataclass(frozen=True, slots=True)
class MonitorKind:
    kind: str
    selector: str  # the Prometheus field that selects this kind
    namespace_selector: str
    helm_value: str  # kube-prometheus-stack's value that turns the release-label default off


MONITOR_KINDS = {
    "ServiceMonitor": MonitorKind(
        "ServiceMonitor",
        "serviceMonitorSelector",
        "serviceMonitorNamespaceSelector",
        "serviceMonitorSelectorNilUsesHelmValues",
    ),
    "PodMonitor": MonitorKind(
        "PodMonitor", "podMonitorSelector", "podMonitorNamespaceSelector", "podMonitorSelectorNilUsesHelmValues"
    ),
}


def shown(selector: Any) -> str:
    return json.dumps(selector, sort_keys=True, default=str)


def listed(names: list[str], limit: int = 8) -> str:
    items = list(dict.fromkeys(names))
    text = ", ".join(items[:limit])
    return f"{text} and {len(items) - limit} more" if len(items) > limit else text


def _selector_keys(selector: dict[str, Any]) -> set[str]:
    keys = {str(k) for k in as_dict(selector.get("matchLabels"))}
    keys |= {str(as_dict(e).get("key", "")) for e in as_list(selector.get("matchExpressions"))}
    return keys


def namespace_selected(
    selector: Any, namespace: str, own_namespace: str, namespaces: dict[str, dict[str, str]]
) -> bool | None:
    """Whether a Prometheus namespace selector takes in `namespace` (None when the input cannot tell: a namespace
    not given, or labels of a Namespace object that is not in the input)."""
    if selector is None:  # a null selector: the Prometheus object's own namespace only
        return namespace == own_namespace if namespace and own_namespace else None
    if not isinstance(selector, dict):
        return None
    if not selector:
        return True
    if not namespace:
        return None
    if namespace not in namespaces and not _selector_keys(selector) <= {NAME_LABEL}:
        return None
    return selector_matches(selector, {NAME_LABEL: namespace, **namespaces.get(namespace, {})})


@dataclass(frozen=True, slots=True)
class Choice:
    prometheus: K8sObject
    picked: bool | None  # None: cannot tell from the input
    why: str = ""  # why not, when not
    namespace_only: bool = False  # the labels match; the namespace is what keeps it out


def choice(
    prometheus: K8sObject, monitor: K8sObject, kind: MonitorKind, namespaces: dict[str, dict[str, str]]
) -> Choice:
    spec = prometheus.spec
    selector = spec.get(kind.selector)
    if selector is None:
        return Choice(prometheus, False, f"its {kind.selector} is not set (a null selector selects no {kind.kind})")
    if not isinstance(selector, dict):
        return Choice(prometheus, False, f"its {kind.selector} {shown(selector)} is not a label selector")
    if not selector_matches(selector, monitor.labels):
        return Choice(prometheus, False, f"its {kind.selector} {shown(selector)} does not match these labels")
    ns_selector = spec.get(kind.namespace_selector)
    picked = namespace_selected(ns_selector, monitor.namespace, prometheus.namespace, namespaces)
    if picked is False:
        if ns_selector is None:
            why = (
                f"it reads {kind.kind}s from its own namespace {prometheus.namespace} only"
                f" ({kind.namespace_selector} is not set)"
            )
        else:
            why = f"its {kind.namespace_selector} {shown(ns_selector)} does not take in namespace {monitor.namespace}"
        return Choice(prometheus, False, why, namespace_only=True)
    return Choice(prometheus, picked)


def _missing_labels(monitor: K8sObject, choices: list[Choice], kind: MonitorKind) -> str:
    wanted: dict[str, str] = {}
    for c in choices:
        for key, value in mapping(as_dict(c.prometheus.spec.get(kind.selector)).get("matchLabels")).items():
            if monitor.labels.get(key) != value:
                wanted.setdefault(key, value)
    return ", ".join(f"{k}: {v}" for k, v in wanted.items())


def unpicked(ctx: Context, monitor: K8sObject, kind: MonitorKind, namespaces: dict[str, dict[str, str]]) -> Hit | None:
    prometheuses = [p for p in ctx.of_kind(*PROMETHEUS_KINDS) if p.group == "monitoring.coreos.com"]
    labels = ", ".join(f"{k}={v}" for k, v in sorted(monitor.labels.items())) or "none"
    if not prometheuses:
        if "release" in monitor.labels:
            return None
        return Hit(
            f"{kind.kind} {monitor.name} has no release label (its labels: {labels}). No Prometheus object is in"
            " the input, so kube-prometheus-stack's defaults are assumed: its Prometheus selects only"
            f" {kind.kind}s labelled release=<the Helm release name> ({kind.helm_value}: true), and ignores this"
            " one without a word",
            f"add the label release: <the kube-prometheus-stack release name> (e.g. release: kube-prometheus-stack;"
            " with the GPU Operator's dcgm-exporter, dcgmExporter.serviceMonitor.additionalLabels), or set"
            f" prometheus.prometheusSpec.{kind.helm_value}=false; add `kubectl get prometheus -A -o yaml` to the"
            " input to check against the real selector",
            monitor,
        )
    choices = [choice(p, monitor, kind, namespaces) for p in prometheuses]
    if any(c.picked is not False for c in choices):
        return None
    reasons = "; ".join(f"{c.prometheus.ref}: {c.why}" for c in choices)
    if any(c.namespace_only for c in choices):
        fix = (
            f"create the {kind.kind} in a namespace the Prometheus {kind.namespace_selector} takes in, or widen that"
            " selector (an empty selector {} takes in every namespace)"
        )
    else:
        missing = _missing_labels(monitor, choices, kind)
        fix = (
            f"add the labels {missing} to the {kind.kind}'s metadata.labels"
            if missing
            else f"give the {kind.kind} labels that a Prometheus {kind.selector} matches"
        )
    return Hit(
        f"no Prometheus in the input picks up {kind.kind} {monitor.name} (labels: {labels}): {reasons}. It is"
        " ignored without a word and its targets are never scraped",
        fix,
        monitor,
        severity=Severity.critical,
    )


def _searched_namespaces(monitor: K8sObject) -> set[str] | None:
    """The namespaces a monitor looks for targets in; None for all of them (namespaceSelector.any)."""
    selector = as_dict(monitor.spec.get("namespaceSelector"))
    if selector.get("any") is True:
        return None
    names = [str(n) for n in as_list(selector.get("matchNames")) if n]
    return set(names) if names else {monitor.namespace}


def _service_ports(service: K8sObject) -> list[str]:
    return [str(as_dict(p).get("name") or "") for p in as_list(service.spec.get("ports"))]


def service_monitor_targets(ctx: Context, monitor: K8sObject) -> Iterator[Hit]:
    searched = _searched_namespaces(monitor)
    selector = monitor.spec.get("selector")
    if searched is None or not isinstance(selector, dict):
        return  # every namespace: the input cannot hold them all; no selector: a schema error, not ours
    services = ctx.of_kind_in("Service", sorted(searched))
    if not services:
        return  # the input does not show those namespaces' Services
    matched = [s for s in services if selector_matches(selector, s.labels)]
    where = listed(sorted(n or "(no namespace)" for n in searched))
    if not matched:
        hint = ""
        by_pod_labels = [s.name for s in services if selector_matches(selector, mapping(s.spec.get("selector")))]
        if by_pod_labels:
            hint = (
                f"; it matches the pod selector of Service {listed(by_pod_labels)}, but a ServiceMonitor selects"
                " Services by their own metadata.labels"
            )
        yield Hit(
            f"ServiceMonitor {monitor.name} scrapes nothing: its selector {shown(selector)} matches none of the"
            f" Services in namespace {where} ({listed([s.name for s in services])}){hint}",
            "make spec.selector match the metadata.labels of the Service to scrape (or label that Service), and"
            " spec.namespaceSelector name its namespace",
            monitor,
        )
        return
    ports = {p for s in matched for p in _service_ports(s)}
    for i, endpoint in enumerate(as_list(monitor.spec.get("endpoints"))):
        port = as_dict(endpoint).get("port")
        if isinstance(port, str) and port and port not in ports:
            named = listed(sorted(p for p in ports if p)) or "none named"
            yield Hit(
                f"ServiceMonitor {monitor.name} endpoints[{i}].port {port!r} is not a port name of the Service"
                f" it selects ({listed([s.name for s in matched])}; port names: {named}): that endpoint scrapes"
                " nothing",
                "set endpoints[].port to the name of the Service port that serves /metrics (ports[].name in the"
                " Service), or name that port in the Service",
                monitor,
            )


def _container_ports(templates: list[PodTemplate]) -> tuple[set[str], set[int]]:
    names: set[str] = set()
    numbers: set[int] = set()
    for t in templates:
        for c in t.containers():
            for p in as_list(c.get("ports")):
                p = as_dict(p)
                if p.get("name"):
                    names.add(str(p["name"]))
                if isinstance(p.get("containerPort"), int):
                    numbers.add(p["containerPort"])
    return names, numbers


def pod_monitor_targets(ctx: Context, monitor: K8sObject) -> Iterator[Hit]:
    searched = _searched_namespaces(monitor)
    selector = monitor.spec.get("selector")
    if searched is None or not isinstance(selector, dict):
        return
    templates = ctx.templates_in(sorted(searched))
    if not templates:
        return
    matched = [t for t in templates if selector_matches(selector, t.labels)]
    where = listed(sorted(n or "(no namespace)" for n in searched))
    if not matched:
        yield Hit(
            f"PodMonitor {monitor.name} scrapes nothing: its selector {shown(selector)} matches the pods of none"
            f" of the workloads in namespace {where} ({listed([t.obj.ref for t in templates])})",
            "make spec.selector match the labels in the pod template (spec.template.metadata.labels) of the"
            " workload to scrape, and spec.namespaceSelector name its namespace",
            monitor,
        )
        return
    names, numbers = _container_ports(matched)
    for i, endpoint in enumerate(as_list(monitor.spec.get("podMetricsEndpoints"))):
        endpoint = as_dict(endpoint)
        port, number, target = endpoint.get("port"), endpoint.get("portNumber"), endpoint.get("targetPort")
        wrong = ""
        if isinstance(port, str) and port:
            wrong = f"port {port!r}" if port not in names else ""
        elif isinstance(number, int) and not isinstance(number, bool):
            wrong = f"portNumber {number}" if number not in numbers else ""
        elif isinstance(target, str) and target:
            wrong = f"targetPort {target!r}" if target not in names else ""
        elif isinstance(target, int) and not isinstance(target, bool):
            wrong = f"targetPort {target}" if target not in numbers else ""
        if wrong:
            yield Hit(
                f"PodMonitor {monitor.name} podMetricsEndpoints[{i}] {wrong} is not a container port of the pods"
                f" it selects ({listed([t.obj.ref for t in matched])}; port names:"
                f" {listed(sorted(names)) or 'none named'}): that endpoint scrapes nothing",
                "set podMetricsEndpoints[].port to the name of the container port that serves /metrics"
                " (containers[].ports[].name), or declare and name that port in the pod template",
                monitor,
            )


@rule("GF007", reads=("ServiceMonitor", "PodMonitor", *PROMETHEUS_KINDS))
def monitor_not_scraped(ctx: Context) -> Iterator[Hit]:
    namespaces = {ns.name: ns.labels for ns in ctx.of_kind("Namespace")}
    for monitor in ctx.of_kind(*MONITOR_KINDS):
        if monitor.group != "monitoring.coreos.com":
            continue
        kind = MONITOR_KINDS[monitor.kind]
        hit = unpicked(ctx, monitor, kind, namespaces)
        if hit:
            yield hit
        if kind.kind == "ServiceMonitor":
            yield from service_monitor_targets(ctx, monitor)
        else:
            yield from pod_monitor_targets(ctx, monitor)


# -- GF008: alerts on GPU capacity --------------------------------------------------------------------------------

_CAPACITY = re.compile(r"\bkube_node_status_capacity\b\s*(\{[^}]*\})?")
_ALLOCATABLE = re.compile(r"\bkube_node_status_allocatable\b\s*(\{[^}]*\})?")
_RESOURCE = re.compile(r"""\bresource\s*(=~|=|!=|!~)\s*(?:"([^"]*)"|'([^']*)'|`([^`]*)`)""")
_GPU_RESOURCE = re.compile(r"nvidia|amd_com_gpu|habana_ai_gaudi|gpu", re.IGNORECASE)
# count(DCGM_FI_...) or count by (node) (DCGM_FI_...{...}): how many GPUs an exporter reports
_EXPORTER_COUNT = re.compile(r"\bcount\s*(?:(?:by|without)\s*\([^)]*\)\s*)?\(\s*(\w+)\s*(?:\{[^}]*\})?\s*\)")
# Per-device series of each vendor's exporter (dcgm-exporter, AMD's device-metrics-exporter, Gaudi's
# metric exporter), each with the kube-state-metrics resource of that vendor's GPUs.
_EXPORTER_SERIES = (
    (re.compile(r"^(DCGM|dcgm)_"), "nvidia_com_gpu"),
    (re.compile(r"^gpu_(gfx_activity|health|package_power|average_package_power|power_usage|\w*temperature"
                r"|total_vram|used_vram|free_vram|umc_activity|clock|ecc_\w+)$"), "amd_com_gpu"),
    (re.compile(r"^habanalabs_"), "habana_ai_gaudi"),
)  # fmt: skip


def _gpu_resource(matchers: str | None) -> str | None:
    """The GPU resource a kube-state-metrics selector's `resource` matcher picks, if it picks one."""
    for found in _RESOURCE.finditer(matchers or ""):
        operator, value = found.group(1), next(g for g in found.groups()[1:] if g is not None)
        if operator in ("=", "=~") and _GPU_RESOURCE.search(value):
            return value
    return None


def lost_gpu_check(expr: str) -> tuple[str, str] | None:
    """(what the expression counts, the resource to use instead) when it watches a GPU count that a failed GPU
    does not lower; None when it also reads allocatable (a capacity-minus-allocatable alert is the right one)."""
    if any(_gpu_resource(m.group(1)) for m in _ALLOCATABLE.finditer(expr)):
        return None
    for m in _CAPACITY.finditer(expr):
        resource = _gpu_resource(m.group(1))
        if resource:
            return f'kube_node_status_capacity{{resource="{resource}"}}', resource
    for found in _EXPORTER_COUNT.finditer(expr):
        for series, resource in _EXPORTER_SERIES:
            if series.match(found.group(1)):
                return f"the number of {found.group(1)} series", resource
    return None


@dataclass(frozen=True, slots=True)
class Alert:
    name: str
    group: str
    expr: str
    obj: K8sObject | None
    file: str
    line: int


def alerts(ctx: Context) -> Iterator[Alert]:
    """Alerting rules of PrometheusRule objects and of plain Prometheus rule files."""
    sources: list[tuple[Any, K8sObject | None, str, int]] = [
        (o.spec.get("groups"), o, o.doc.file, o.doc.line)
        for o in ctx.of_kind("PrometheusRule")
        if o.group == "monitoring.coreos.com"
    ]
    sources += [
        (d.data.get("groups"), None, d.file, d.line) for d in ctx.configs if isinstance(d.data.get("groups"), list)
    ]
    for groups, obj, file, line in sources:
        for group in as_list(groups):
            group = as_dict(group)
            for item in as_list(group.get("rules")):
                item = as_dict(item)
                if isinstance(item.get("alert"), str) and isinstance(item.get("expr"), str):
                    yield Alert(item["alert"], str(group.get("name") or "?"), item["expr"], obj, file, line)


@rule("GF008", reads=("PrometheusRule", "prometheus-rules"))
def alert_on_gpu_capacity(ctx: Context) -> Iterator[Hit]:
    for alert in alerts(ctx):
        found = lost_gpu_check(alert.expr)
        if not found:
            continue
        counted, resource = found
        message = (
            f"alert {alert.name} (group {alert.group}) watches {counted} to catch lost GPUs, but a GPU that fails"
            " while the node runs (the device plugin marks it unhealthy, e.g. after an uncorrectable ECC error) still"
            " counts there: the kubelet lowers only the node's allocatable, so the alert does not fire while pods"
            " cannot get that GPU"
        )
        allocatable = f'kube_node_status_allocatable{{resource="{resource}"}}'
        fix = (
            f"alert on {allocatable} instead: compare it with the count each node should have (e.g. {allocatable}"
            f' < 8), or with capacity ({allocatable} < kube_node_status_capacity{{resource="{resource}"}})'
        )
        if alert.obj is not None:
            yield Hit(message, fix, alert.obj)
        else:
            yield Hit(message, fix, file=alert.file, line=alert.line, object_ref=f"Alert/{alert.name}")
