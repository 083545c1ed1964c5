"""The Kubernetes backend's HyperNode sync through the official client's CustomObjectsApi over real HTTP
(k8s_api.CustomObjectsServer): fields the server adds are no difference, a replace carries the resourceVersion it
read (a change made in between is refused, not overwritten), and only gpufleet's HyperNodes are replaced or
deleted."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gpufleet.errors import BackendError
from gpufleet.integrations.kubernetes.topology_objects import MANAGED_BY

kube = pytest.importorskip("kubernetes.client")
from gpufleet.integrations.kubernetes.remediation import KubernetesBackend  # noqa: E402
from tests.integrations.kubernetes.k8s_api import CustomObjectsServer  # noqa: E402


def _hypernode(name: str, *nodes: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    members = [{"type": "Node", "selector": {"exactMatch": {"name": n}}} for n in nodes]
    return {"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode",
            "metadata": {"name": name, "labels": dict(MANAGED_BY if labels is None else labels)},
            "spec": {"tier": 1, "tierName": "leaf", "members": members}}  # fmt: skip


@pytest.fixture
def served() -> Iterator[tuple[CustomObjectsServer, KubernetesBackend]]:
    server = CustomObjectsServer([_hypernode("leaf-1", "a", "b")])
    custom, stop = server.serve()
    try:
        yield server, KubernetesBackend(object(), custom=custom)
    finally:
        stop()


def test_an_unchanged_hypernode_is_not_written_though_the_server_added_fields(
    served: tuple[CustomObjectsServer, KubernetesBackend],
) -> None:
    server, backend = served
    assert "uid" in server.objects["leaf-1"]["metadata"]
    assert backend.sync_hypernodes([_hypernode("leaf-1", "a", "b")]) == []
    assert server.writes() == []


def test_a_changed_hypernode_is_replaced_with_the_version_read(
    served: tuple[CustomObjectsServer, KubernetesBackend],
) -> None:
    server, backend = served
    read = server.objects["leaf-1"]["metadata"]["resourceVersion"]
    done = backend.sync_hypernodes([_hypernode("leaf-1", "a", "b", "c"), _hypernode("leaf-2", "d")])
    assert done == ["replace hypernode leaf-1 (tier 1, 3 members)", "create hypernode leaf-2 (tier 1, 1 members)"]
    put = next(body for method, _, body in server.requests if method == "PUT")
    assert put["metadata"]["resourceVersion"] == read
    assert len(server.objects["leaf-1"]["spec"]["members"]) == 3


def test_a_hypernode_changed_by_another_writer_in_between_is_refused(
    served: tuple[CustomObjectsServer, KubernetesBackend],
) -> None:
    server, backend = served
    original = server.handle

    def racing(method: str, path: str, body: Any) -> tuple[int, Any]:
        if method == "PUT":  # someone else writes it between our list and our replace
            server._stamp(server.objects["leaf-1"])
        return original(method, path, body)

    server.handle = racing  # type: ignore[method-assign]
    with pytest.raises(BackendError, match="409"):
        backend.sync_hypernodes([_hypernode("leaf-1", "a")])


def test_only_gpufleets_hypernodes_are_deleted(served: tuple[CustomObjectsServer, KubernetesBackend]) -> None:
    server, backend = served
    server.objects["theirs"] = _hypernode("theirs", "z", labels={"team": "net"})
    assert backend.sync_hypernodes([], dry_run=True) == ["would delete hypernode leaf-1"]
    assert server.writes() == []
    assert backend.sync_hypernodes([]) == ["delete hypernode leaf-1"]
    assert sorted(server.objects) == ["theirs"]
