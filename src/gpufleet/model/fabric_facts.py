"""What the fabric tells the incident correlation about a hung job's hosts: the leaf each of their rails goes
through, and the cables with an active problem (a host's own cable, or a leaf's uplink). Plain data: the control
plane fills it from its fabric service, the correlator (which knows nothing of the fabric) reads it."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from gpufleet.model.observe import Finding


@dataclass(frozen=True, slots=True)
class HostRail:
    port: str  # the HCA port: "dgx-003/mlx5_2/1"
    rail: int
    leaf: str  # the switch its cable goes to


@dataclass(frozen=True, slots=True)
class LinkProblem:
    """A cable with an active fabric finding, and the finding as the fabric service puts it into the incident
    pipeline (its cause and entity are the fabric incident's)."""

    link: str  # "leaf-su1-r2/33 <-> spine-2/5"
    state: str  # what it does, to finish a sentence: "is flapping", "is down", "counts symbol errors"
    finding: Finding


@dataclass(slots=True)
class FabricFacts:
    rails: dict[str, tuple[HostRail, ...]] = field(default_factory=dict)  # host -> its rails
    cables: dict[str, tuple[LinkProblem, ...]] = field(default_factory=dict)  # host -> problems on its own cables
    uplinks: dict[str, tuple[LinkProblem, ...]] = field(default_factory=dict)  # leaf -> problems on its uplinks


# the hosts of a hung job -> what the fabric knows of them (None: no fabric seen)
FabricView = Callable[[Collection[str]], FabricFacts | None]
