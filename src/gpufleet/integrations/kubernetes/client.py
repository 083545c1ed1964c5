"""The official Kubernetes client, loaded on demand, and a CoreV1Api from whatever credentials the host has."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from gpufleet.errors import BackendError, DependencyMissingError


def kubernetes_module() -> ModuleType:
    """`import kubernetes`, or a clear error naming the extra that installs it."""
    try:
        import kubernetes
        import kubernetes.client  # the API classes every caller needs
    except ImportError:
        raise DependencyMissingError(
            "talking to Kubernetes needs the official Python client (kubernetes)", fix="pip install 'gpufleet[k8s]'"
        ) from None
    return kubernetes


def connect(kubeconfig: str | None = None, context: str | None = None, in_cluster: bool | None = None) -> Any:
    """A CoreV1Api. `in_cluster` True: the pod's service account; False: the kubeconfig; None: the kubeconfig,
    else the service account (what an agent or controller deployed either way wants)."""
    k8s = kubernetes_module()
    attempts = []
    if in_cluster is not True:
        attempts.append(lambda: k8s.config.load_kube_config(config_file=kubeconfig, context=context))
    if in_cluster is not False:
        attempts.append(k8s.config.load_incluster_config)
    error: Exception | None = None
    for load in attempts:
        try:
            load()
            return k8s.client.CoreV1Api()
        except Exception as exc:  # the client raises ConfigException and plain OSErrors here
            error = exc
    raise BackendError(
        f"cannot load Kubernetes credentials: {error}", fix="pass --kubeconfig or set KUBECONFIG, or run in the cluster"
    )
