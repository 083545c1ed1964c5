"""Rules on admission webhooks that gate GPU pods: a webhook on pod creation that refuses pods while its server is
down, waits too long, gates its own server's namespace, or cannot be verified (no CA)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gpufleet.doctor.objects import K8sObject, as_dict, as_list, mapping, selector_matches
from gpufleet.doctor.rules.base import Context, Hit, rule
from gpufleet.model import Severity

WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
NAME_LABEL = "kubernetes.io/metadata.name"  # set on every namespace by the API server
INJECT_CA = "cert-manager.io/inject-ca-from"
TIMEOUT_MAX_S = 10
SYSTEM_NAMESPACE = "kube-system"


def _on_pod_creation(webhook: dict[str, Any]) -> bool:
    for raw in as_list(webhook.get("rules")):
        r = as_dict(raw)
        groups = [str(g) for g in as_list(r.get("apiGroups"))]
        resources = [str(x) for x in as_list(r.get("resources"))]
        operations = [str(o) for o in as_list(r.get("operations"))]
        if (
            any(g in ("", "*") for g in groups)
            and any(x in ("pods", "*") for x in resources)
            and any(o in ("CREATE", "*") for o in operations)
        ):
            return True
    return False


def _is_preflight(webhook: dict[str, Any]) -> bool:
    service = as_dict(as_dict(webhook.get("clientConfig")).get("service"))
    where = f"{webhook.get('name', '')} {service.get('path', '')} {as_dict(webhook.get('clientConfig')).get('url', '')}"
    return "preflight" in where.lower()


def _namespace_labels(ctx: Context, name: str) -> dict[str, str]:
    """A namespace's labels: its Namespace object's when the input holds one, else only the name label."""
    for ns in ctx.of_kind("Namespace"):
        if ns.name == name:
            return {**ns.labels, NAME_LABEL: name}
    return {NAME_LABEL: name}


def _selects(selector: Any, labels: dict[str, str]) -> bool:
    if selector is None:  # no namespaceSelector: every namespace
        return True
    return selector_matches(as_dict(selector), labels)


def _webhook_hits(ctx: Context, config: K8sObject, webhook: dict[str, Any]) -> Iterator[Hit]:
    name = str(webhook.get("name") or "?")
    where = f"{config.ref} webhook {name}"
    preflight = _is_preflight(webhook)
    policy = str(webhook.get("failurePolicy") or "Fail")
    if policy == "Fail":
        unset = "" if webhook.get("failurePolicy") else " (unset: Fail is the v1 default)"
        yield Hit(
            f"{where} has failurePolicy Fail{unset}: while its server is down or slow, every pod it matches is"
            " refused, GPU pods included"
            + (" (a preflight is advisory: pods should start without it)" if preflight else ""),
            "set failurePolicy: Ignore"
            + ("" if preflight else " unless refusing pods when the webhook is down is intended"),
            config,
            severity=Severity.critical if preflight else Severity.warning,
        )
    timeout = webhook.get("timeoutSeconds")
    if timeout is None:
        yield Hit(
            f"{where} gives no timeoutSeconds: the API server waits the v1 default of 10 s on every pod creation"
            " when it does not answer",
            "set timeoutSeconds to what the webhook needs, at most 10 (e.g. 5)",
            config,
        )
    elif isinstance(timeout, int) and timeout > TIMEOUT_MAX_S:
        yield Hit(
            f"{where} waits timeoutSeconds {timeout} s: over 10 s a slow webhook holds every pod creation that long,"
            " and the waits of several webhooks add up against the API server's own request deadline",
            f"set timeoutSeconds to {TIMEOUT_MAX_S} or less",
            config,
        )
    selector = webhook.get("namespaceSelector")
    service = as_dict(as_dict(webhook.get("clientConfig")).get("service"))
    own = str(service.get("namespace") or "")
    gated = [
        ns
        for ns in dict.fromkeys([SYSTEM_NAMESPACE, *([own] if own else [])])
        if _selects(selector, _namespace_labels(ctx, ns))
    ]
    if gated:
        yield Hit(
            f"{where}'s namespaceSelector takes in {', '.join(gated)}: the webhook gates the pods"
            + (f" of its own server ({own})" if own in gated else "")
            + (" and of the cluster's system components" if SYSTEM_NAMESPACE in gated else "")
            + "; with failurePolicy Fail a server that is down cannot start again (the self-hosted deadlock)",
            f"add to namespaceSelector.matchExpressions: {{key: {NAME_LABEL}, operator: NotIn, values:"
            f" [{', '.join(dict.fromkeys([SYSTEM_NAMESPACE, *([own] if own else [])]))}]}}",
            config,
            severity=Severity.critical if policy == "Fail" else Severity.warning,
        )
    client = as_dict(webhook.get("clientConfig"))
    if (
        client.get("service")
        and not client.get("caBundle")
        and not mapping(config.metadata.get("annotations")).get(INJECT_CA)
    ):
        yield Hit(
            f"{where} calls Service {own}/{service.get('name', '?')} with an empty caBundle and no {INJECT_CA}"
            " annotation: the API server cannot verify the server's certificate, so every call fails"
            + (" and every pod it matches is refused" if policy == "Fail" else " and the webhook never runs"),
            f"set clientConfig.caBundle to the base64 PEM of the CA that signed the server's certificate, or let"
            f" cert-manager inject it ({INJECT_CA}: <namespace>/<Certificate>)",
            config,
            severity=Severity.critical,
        )


@rule("GF032")
def pod_admission_webhooks(ctx: Context) -> Iterator[Hit]:
    for config in ctx.of_kind(*WEBHOOK_KINDS):
        for raw in as_list(config.data.get("webhooks")):
            webhook = as_dict(raw)
            if _on_pod_creation(webhook):
                yield from _webhook_hits(ctx, config, webhook)
