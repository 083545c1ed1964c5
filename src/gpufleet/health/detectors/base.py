"""How a detector is written: a class with one method, `detect(now, seen) -> findings`, registered with where it
runs and which of that place's inputs it reads (`seen.py` holds both places' inputs).

- Node-local (`@node_detector`): run where a node's data is, in its agent (`NodeHealth`), on one collection
  (`NodeSeen`). A frame may hold one node (a real agent) or many (the twin's agents, run vectorized).
- Fleet-wide (`@fleet_detector`): run in the control plane (`Correlator`), on what every node reported
  (`FleetSeen`).

`needs` names the inputs a detector reads (fields of its scope's view); it runs only when they are all given (not
None), so an agent handing over kernel reports alone runs the kernel detector alone. A detector is built from its
scope's setup (`build`), and the detectors of a scope run in the order `registered_node`/`registered_fleet` give:
their modules' order in `MODULES`, then the order they are defined in within a module.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import TYPE_CHECKING, Generic, Protocol, Self, TypeVar, runtime_checkable

from gpufleet.health.detectors.seen import FleetSeen, NodeSeen
from gpufleet.model.observe import Finding

if TYPE_CHECKING:
    from gpufleet.health.thresholds import Thresholds
    from gpufleet.health.xid_policy import XidPolicy
    from gpufleet.telemetry.frame import MetricFrame
    from gpufleet.telemetry.monitoring.objectives import SloConfig

# The modules that register detectors, in the order their detectors run.
MODULES = ("kernel", "gpu", "fabric", "training", "application", "slo", "software", "bmc", "dcgm")


class Scope(StrEnum):
    node = "node"  # in each node's agent, on that node's data
    fleet = "fleet"  # in the control plane, on what every node reported


@dataclass(frozen=True, slots=True)
class NodeSetup:
    """What node-local detectors are built from: the frame whose layout (GPUs, ports) they will see, and the rules."""

    frame: MetricFrame
    thresholds: Thresholds
    policy: XidPolicy | None = None


@dataclass(frozen=True, slots=True)
class FleetSetup:
    thresholds: Thresholds
    slo: SloConfig


class NodeDetector(Protocol):
    def detect(self, now: float, seen: NodeSeen) -> list[Finding]: ...


class FleetDetector(Protocol):
    def detect(self, now: float, seen: FleetSeen) -> list[Finding]: ...


class BuildsNodeDetector(NodeDetector, Protocol):
    @classmethod
    def build(cls, setup: NodeSetup) -> Self: ...


class BuildsFleetDetector(FleetDetector, Protocol):
    @classmethod
    def build(cls, setup: FleetSetup) -> Self: ...


@runtime_checkable
class Latches(Protocol):
    """A detector with state that must outlive a restart of its agent (kept with the agent's spool)."""

    def latched(self) -> dict[str, float]: ...

    def restore(self, latched: Mapping[str, float]) -> None: ...


SetupT = TypeVar("SetupT")
DetectorT = TypeVar("DetectorT")


@dataclass(frozen=True, slots=True)
class Registered(Generic[SetupT, DetectorT]):
    name: str
    scope: Scope
    needs: tuple[str, ...]  # the fields of its scope's view it reads; it runs only when they are all given
    build: Callable[[SetupT], DetectorT]
    module: str
    # Node-local only. True: its findings are conditions that last, reported when they start and then confirmed
    # every `finding_repeat_s` (NodeHealth holds back the rest). False: events, each reported once as it comes.
    lasting: bool = True

    def ready(self, seen: NodeSeen | FleetSeen) -> bool:
        return all(getattr(seen, name) is not None for name in self.needs)


NODE: dict[str, Registered[NodeSetup, NodeDetector]] = {}
FLEET: dict[str, Registered[FleetSetup, FleetDetector]] = {}

N = TypeVar("N", bound=BuildsNodeDetector)
F = TypeVar("F", bound=BuildsFleetDetector)


def _check(name: str, needs: tuple[str, ...], view: type[NodeSeen] | type[FleetSeen]) -> None:
    if name in NODE or name in FLEET:
        raise ValueError(f"detector {name} registered twice")
    unknown = set(needs) - {f.name for f in fields(view)}
    if unknown:
        raise ValueError(f"detector {name} needs {sorted(unknown)}, which {view.__name__} does not hold")


def node_detector(name: str, needs: tuple[str, ...], *, lasting: bool = True) -> Callable[[type[N]], type[N]]:
    """Register a node-local detector class, run by each agent's NodeHealth."""

    def register(cls: type[N]) -> type[N]:
        _check(name, needs, NodeSeen)
        NODE[name] = Registered(name, Scope.node, needs, cls.build, cls.__module__, lasting)
        return cls

    return register


def fleet_detector(name: str, needs: tuple[str, ...]) -> Callable[[type[F]], type[F]]:
    """Register a fleet-wide detector class, run by the control plane's Correlator."""

    def register(cls: type[F]) -> type[F]:
        _check(name, needs, FleetSeen)
        FLEET[name] = Registered(name, Scope.fleet, needs, cls.build, cls.__module__)
        return cls

    return register


def _load() -> None:
    for module in MODULES:
        importlib.import_module(f"{__package__}.{module}")


def _position(entry: Registered[SetupT, DetectorT], order: list[str]) -> tuple[int, int]:
    return MODULES.index(entry.module.rsplit(".", 1)[-1]), order.index(entry.name)


def registered_node() -> list[Registered[NodeSetup, NodeDetector]]:
    """Every node-local detector, in the order they run."""
    _load()
    order = list(NODE)
    return sorted(NODE.values(), key=lambda e: _position(e, order))


def registered_fleet() -> list[Registered[FleetSetup, FleetDetector]]:
    """Every fleet-wide detector, in the order they run."""
    _load()
    order = list(FLEET)
    return sorted(FLEET.values(), key=lambda e: _position(e, order))
