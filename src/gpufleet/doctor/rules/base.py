"""How a rule is written: a function from the context (objects, cluster facts, configs) to hits, registered
under its id with the kinds it reads. Its title, default severity, explanation and sources are data
(data/rules/*.yaml), so the catalog can be listed and checked without running anything."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property

from gpufleet.doctor.facts import ClusterFacts
from gpufleet.doctor.load import Document
from gpufleet.doctor.objects import K8sObject, PodTemplate, pod_templates
from gpufleet.model import Severity


@dataclass(frozen=True, slots=True)
class Hit:
    message: str
    fix: str
    obj: K8sObject | None = None
    file: str = ""  # for a hit on a fact or a config rather than an object: where the fact came from
    line: int = 0
    severity: Severity | None = None  # None: the rule's default
    object_ref: str = ""  # names a non-Kubernetes thing (a node from a capture, a config) when obj is None


@dataclass
class Context:
    objects: list[K8sObject]
    facts: ClusterFacts
    configs: list[Document] = field(default_factory=list)  # device-plugin and mig-parted configs

    # Rules ask these once per object they check: indexed once, so a check stays linear in the repository's size.
    @cached_property
    def _by_kind(self) -> dict[str, list[K8sObject]]:
        index: dict[str, list[K8sObject]] = {}
        for o in self.objects:
            index.setdefault(o.kind, []).append(o)
        return index

    @cached_property
    def _position(self) -> dict[int, int]:
        return {id(o): i for i, o in enumerate(self.objects)}

    @cached_property
    def _by_kind_namespace(self) -> dict[tuple[str, str], list[K8sObject]]:
        index: dict[tuple[str, str], list[K8sObject]] = {}
        for o in self.objects:
            index.setdefault((o.kind, o.namespace), []).append(o)
        return index

    def of_kind(self, *kinds: str) -> list[K8sObject]:
        """Objects of these kinds, in input order."""
        if len(kinds) == 1:
            return self._by_kind.get(kinds[0], [])
        found = [o for k in dict.fromkeys(kinds) for o in self._by_kind.get(k, [])]
        return sorted(found, key=lambda o: self._position[id(o)])

    def of_kind_in(self, kind: str, namespaces: Iterable[str]) -> list[K8sObject]:
        """Objects of `kind` in these namespaces."""
        return [o for ns in namespaces for o in self._by_kind_namespace.get((kind, ns), [])]

    @cached_property
    def templates(self) -> list[PodTemplate]:
        return [t for o in self.objects for t in pod_templates(o)]

    @cached_property
    def _templates_by_namespace(self) -> dict[str, list[PodTemplate]]:
        index: dict[str, list[PodTemplate]] = {}
        for t in self.templates:
            index.setdefault(t.obj.namespace, []).append(t)
        return index

    def templates_in(self, namespaces: Iterable[str]) -> list[PodTemplate]:
        return [t for ns in namespaces for t in self._templates_by_namespace.get(ns, [])]

    @cached_property
    def gpu_operator_policies(self) -> list[K8sObject]:
        """NVIDIA GPU Operator ClusterPolicies (nvidia.com); the Intel Gaudi Base Operator's ClusterPolicy
        (habanalabs.habana.ai) shares the kind but none of its fields."""
        return [o for o in self.of_kind("ClusterPolicy") if o.group in ("nvidia.com", "")]


Check = Callable[[Context], Iterable[Hit]]


@dataclass(frozen=True, slots=True)
class Registered:
    id: str
    check: Check
    reads: tuple[str, ...]  # custom-resource kinds and config kinds this rule understands


REGISTRY: dict[str, Registered] = {}


def rule(rule_id: str, reads: tuple[str, ...] = ()) -> Callable[[Check], Check]:
    def register(fn: Check) -> Check:
        if rule_id in REGISTRY:
            raise ValueError(f"rule {rule_id} registered twice")
        REGISTRY[rule_id] = Registered(rule_id, fn, reads)
        return fn

    return register
