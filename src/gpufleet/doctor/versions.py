"""The GPU stack's version facts (data/stack.yaml) as typed, validated models, and the version arithmetic the
rules share: which operator release a version belongs to, which span of its platform matrix applies, and the nodes
and runtimes the operator's node software runs on."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from gpufleet.doctor.catalog import stack_facts
from gpufleet.doctor.facts import ClusterFacts, NodeFacts, Version, parse_version, show
from gpufleet.doctor.objects import as_dict

# --- the facts ------------------------------------------------------------------------------------------------------


class _Fact(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class LifeCycleTable(_Fact):
    published: str
    source: str
    supported: str
    deprecated: str
    end_of_support_through: str
    printed_supported: str | None = None
    note: str | None = None


class Span(_Fact):
    """A version range in force from one operator patch release on."""

    since: str = Field(alias="from")
    min: str
    max: str
    source: str
    note: str | None = None


class OsSpan(_Fact):
    os: str
    min: str
    max: str
    source: str


class Release(_Fact):
    major: str
    tags: tuple[str, ...]
    kubernetes: tuple[Span, ...]
    kubernetes_by_os: tuple[OsSpan, ...] = ()
    containerd: tuple[Span, ...]
    default_driver: dict[str, str]
    cdi_default: bool


class Upgrades(_Fact):
    rule: str
    source: str


class NriContainerd(_Fact):
    series: str
    min: str | None = None
    since: str = Field(alias="from")
    source: str


class NriCrio(_Fact):
    min: str
    since: str = Field(alias="from")
    source: str


class NriPlugin(_Fact):
    since: str
    requires_cdi: bool
    containerd: tuple[NriContainerd, ...]
    crio: NriCrio


class Operator(_Fact):
    life_cycle: tuple[LifeCycleTable, ...]
    upgrades: Upgrades
    releases: tuple[Release, ...]
    defaults_source: str
    nri_plugin: NriPlugin


class DriverSpan(_Fact):
    min: str
    below: str
    source: str


class MixedMigIssue(_Fact):
    issue: str
    listed: tuple[str, ...]
    affected: tuple[DriverSpan, ...]
    fixed: tuple[str, ...]
    workaround: str


class Branch(_Fact):
    branch: str
    kind: str
    end_of_life: str
    max_cuda: str


class DriverBranches(_Fact):
    source: str
    branches: tuple[Branch, ...]
    end_of_life: tuple[str, ...]


class Floor(_Fact):
    major: int
    driver: str


class ToolkitDriver(_Fact):
    cuda: str
    driver: str


class Cuda(_Fact):
    minor_version_floors: tuple[Floor, ...]
    floors_source: str
    toolkit_drivers: tuple[ToolkitDriver, ...]
    toolkit_source: str


class FeatureGate(_Fact):
    alpha: str
    beta: str
    ga: str
    removed_after: str
    components: tuple[str, ...]
    sources: tuple[str, ...]


class StackFacts(_Fact):
    gpu_operator: Operator
    mixed_mig_issue: MixedMigIssue
    driver_branches: DriverBranches
    cuda: Cuda
    feature_gates: dict[str, FeatureGate]


@cache
def stack() -> StackFacts:
    return StackFacts.model_validate(stack_facts())


# --- versions and where they come from -----------------------------------------------------------------------------


def ver(text: str) -> Version:
    return parse_version(text) or ()


def within(version: Version, low: str, high: str) -> bool:
    """Whether `version` is in [low, high], each bound compared on as many parts as it gives."""
    lo, hi = ver(low), ver(high)
    return lo <= version[: len(lo)] and version[: len(hi)] <= hi


def major_minor(version: Version) -> str:
    return show(version[:2])


def listed(names: Iterable[str], limit: int = 8) -> str:
    items = list(dict.fromkeys(names))
    shown = ", ".join(items[:limit])
    return f"{shown} and {len(items) - limit} more" if len(items) > limit else shown


def release_of(operator: Version) -> Release | None:
    return next((r for r in stack().gpu_operator.releases if ver(r.major) == operator[:2]), None)


def span_for(spans: tuple[Span, ...], operator: Version) -> Span:
    """The span in force for this operator version: the last one whose `from` is not after it (a version without a
    patch number takes the newest, so a guess never raises an alarm)."""
    chosen = spans[0]
    for span in spans:
        if len(operator) < 3 or ver(span.since) <= operator:
            chosen = span
    return chosen


def stack_nodes(facts: ClusterFacts) -> list[NodeFacts]:
    """The nodes the GPU Operator's node software runs on: the GPU nodes, or every node when none shows as one."""
    gpu = [n for n in facts.nodes.values() if n.is_gpu_node or (n.host and n.host.driver_version)]
    return gpu or list(facts.nodes.values())


@dataclass
class Runtime:
    """One container runtime version as the nodes report it, and the nodes that run it."""

    text: str  # containerd://2.0.5-k3s1, cri-o://1.34.1
    file: str
    object_ref: str
    nodes: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        found = re.match(r"\s*([a-z][a-z-]*)", self.text.lower())
        name = found.group(1) if found else ""
        return "cri-o" if name in ("crio", "cri-o") else name

    @property
    def version(self) -> Version | None:
        return parse_version(self.text)

    @property
    def where(self) -> str:
        return f"{listed(self.nodes)} ({self.text})" if self.nodes else f"the cluster ({self.text})"


def runtimes(facts: ClusterFacts) -> list[Runtime]:
    groups: dict[str, Runtime] = {}
    for node in stack_nodes(facts):
        text = node.runtime or facts.container_runtime
        if not text:
            continue
        if node.host and node.host.container_runtime:
            file = node.host_source
        else:
            file = node.source if node.container_runtime else facts.runtime_source
        groups.setdefault(text, Runtime(text, file, f"Node/{node.name}")).nodes.append(node.name)
    if not groups and facts.container_runtime:
        groups[facts.container_runtime] = Runtime(facts.container_runtime, facts.runtime_source, "")
    return list(groups.values())


def operator_version(facts: ClusterFacts) -> Version | None:
    """The GPU Operator's version when it is readable as at least YY.MM."""
    version = facts.gpu_operator_version
    return version if version and len(version) >= 2 else None


def policy_bool(spec: dict[str, Any], section: str, key: str) -> bool | None:
    value = as_dict(spec.get(section)).get(key)
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return value if isinstance(value, bool) else None
