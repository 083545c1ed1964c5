"""What the discovered fabric tells placement, as plain data: the leaf each node reaches on each rail, each leaf's
health and the uplink capacity it has left, and nodes whose own cable has a problem. gpufleet.fabric.placement
builds it from a fabric; the scheduler reads it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

LeafState = Literal["ok", "degraded", "down"]


@dataclass(frozen=True, slots=True)
class LeafHealth:
    """One leaf switch as placement sees it. `degraded`: an uplink is down, missing or slow, or a cable of it has a
    problem; `down`: its links to the nodes are down. `uplink_capacity` is the fraction of its uplink bandwidth
    still there."""

    state: LeafState = "ok"
    uplink_capacity: float = 1.0
    reasons: tuple[str, ...] = ()


LEAF_OK = LeafHealth()


@dataclass(slots=True)
class FabricHealth:
    """What the discovered fabric tells placement: the leaf each node reaches on each rail, each leaf's health,
    and nodes whose own cable has a problem. A node or leaf it does not name is taken as ok (unknown = ok)."""

    rails: dict[str, dict[int, str]] = field(default_factory=dict)  # node -> rail -> leaf switch
    leaves: dict[str, LeafHealth] = field(default_factory=dict)
    cables: dict[str, tuple[str, ...]] = field(default_factory=dict)  # node -> what is wrong with its own cables

    def leaf(self, name: str) -> LeafHealth:
        return self.leaves.get(name, LEAF_OK)

    def node_state(self, node: str) -> tuple[LeafState, float, tuple[str, ...]]:
        """The worst leaf the node's rails go through (a bad cable of its own counts as degraded), the least
        uplink capacity among them, and why."""
        rank = {"ok": 0, "degraded": 1, "down": 2}
        state: LeafState = "degraded" if self.cables.get(node) else "ok"
        capacity = 1.0
        reasons = list(self.cables.get(node, ()))
        for leaf in sorted(set(self.rails.get(node, {}).values())):
            health = self.leaf(leaf)
            capacity = min(capacity, health.uplink_capacity)
            if rank[health.state] > rank[state]:
                state = health.state
            reasons += [f"{leaf}: {why}" for why in health.reasons]
        return state, capacity, tuple(reasons)
