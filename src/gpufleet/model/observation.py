"""Observations: what sources and the twin emit, and consumers read."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class EntityKind(StrEnum):
    gpu = "gpu"
    node = "node"
    port = "port"
    link = "link"
    job = "job"
    service = "service"


@dataclass(frozen=True, slots=True)
class Entity:
    kind: EntityKind
    node: str = ""
    index: int | None = None  # GPU index, port number
    name: str = ""  # job name, HCA name, link key

    def __str__(self) -> str:
        parts = [self.kind.value, self.node or self.name]
        if self.index is not None:
            parts.append(str(self.index))
        if self.name and self.node:
            parts.append(self.name)
        return "/".join(p for p in parts if p)


@dataclass(frozen=True, slots=True)
class Sample:
    time: float
    entity: Entity
    field: str
    value: float


@dataclass(frozen=True, slots=True)
class Event:
    """Something that happened at one instant: a kernel log line, a link state change, a job hang."""

    time: float
    entity: Entity
    kind: str  # kmsg, link_state, job_state, ...
    message: str
    attrs: dict[str, Any] = field(default_factory=dict)
