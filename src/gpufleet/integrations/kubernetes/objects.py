"""The Kubernetes objects gpufleet writes, built once for the scheduler and for remediation: an Eviction (the
policy/v1 subresource that honours PodDisruptionBudgets) and a core/v1 Event about a pod or a node."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from gpufleet.integrations.kubernetes.client import kubernetes_module

MESSAGE_MAX = 1024  # the API server refuses longer event messages


def eviction(name: str, namespace: str) -> Any:
    c = kubernetes_module().client
    return c.V1Eviction(
        api_version="policy/v1",
        kind="Eviction",
        metadata=c.V1ObjectMeta(name=name, namespace=namespace),
        delete_options=c.V1DeleteOptions(),
    )


def event(
    *,
    kind: str,
    name: str,
    namespace: str,
    reason: str,
    message: str,
    component: str,
    when: datetime,
    type_: str = "Warning",
    involved_namespace: str | None = None,
    uid: str | None = None,
) -> Any:
    """An Event in `namespace` about the `kind` object `name` (a Pod in `involved_namespace`, or a Node)."""
    c = kubernetes_module().client
    return c.CoreV1Event(
        api_version="v1",
        kind="Event",
        metadata=c.V1ObjectMeta(generate_name=f"{name}.", namespace=namespace),
        involved_object=c.V1ObjectReference(
            api_version="v1", kind=kind, name=name, namespace=involved_namespace, uid=uid or None
        ),
        reason=reason,
        message=message[:MESSAGE_MAX],
        type=type_,
        source=c.V1EventSource(component=component),
        first_timestamp=when,
        last_timestamp=when,
        count=1,
        reporting_component=component,
    )
