"""A CoreV1Api that records calls instead of sending them: it stands in for the network, nothing else."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubernetes import client


@dataclass
class Call:
    name: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


class RecordingCoreV1Api(client.CoreV1Api):  # type: ignore[misc]
    def __init__(self, nodes: Any, pods: Any) -> None:
        super().__init__(api_client=client.ApiClient())
        self.nodes = nodes
        self.pods = pods
        self.calls: list[Call] = []
        self.fail_with: dict[str, Exception] = {}

    def _record(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.calls.append(Call(name, args, kwargs))
        if name in self.fail_with:
            raise self.fail_with[name]

    def calls_to(self, name: str) -> list[Call]:
        return [c for c in self.calls if c.name == name]

    def list_node(self, *args: Any, **kwargs: Any) -> Any:
        self._record("list_node", args, kwargs)
        return self.nodes

    def list_pod_for_all_namespaces(self, *args: Any, **kwargs: Any) -> Any:
        self._record("list_pod_for_all_namespaces", args, kwargs)
        return self.pods

    def create_namespaced_binding(self, *args: Any, **kwargs: Any) -> Any:
        self._record("create_namespaced_binding", args, kwargs)

    def create_namespaced_event(self, *args: Any, **kwargs: Any) -> Any:
        self._record("create_namespaced_event", args, kwargs)
        return args[1]

    def create_namespaced_pod_eviction(self, *args: Any, **kwargs: Any) -> Any:
        self._record("create_namespaced_pod_eviction", args, kwargs)
