"""The twin's node clocks: each node's clock is disciplined by chrony against a stratum-2 server on the cluster's
network, so it sits within tens of microseconds of true time (a node's own offset drawn once from the twin's seed,
wandering a little per reading), as `chronyc -c tracking` would report it. `skew` sets a node's clock off by a given
offset (a daemon stopped, a bad source, a VM paused); `unsync` makes its daemon lose its sources (leap status Not
synchronised). The node's agent stamps its batches with its own clock, so a skewed node's `sent` is off too."""

from __future__ import annotations

import zlib

import numpy as np

from gpufleet.model.observe import ClockFact

TYPICAL_OFFSET_S = 30e-6  # chrony on a LAN against a nearby server: tens of microseconds
ROOT_DELAY_S = 400e-6
ROOT_DISPERSION_S = 60e-6


class TwinClocks:
    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self._base: dict[str, float] = {}
        self._skew: dict[str, float] = {}
        self._unsync: set[str] = set()

    def skew(self, node: str, offset_s: float) -> None:
        self._skew[node] = offset_s

    def unsync(self, node: str, unsynchronised: bool = True) -> None:
        (self._unsync.add if unsynchronised else self._unsync.discard)(node)

    def offset(self, node: str) -> float:
        """The node's clock minus true time now."""
        base = self._base.get(node)
        if base is None:
            rng = np.random.default_rng([self.seed, zlib.crc32(node.encode())])
            base = self._base[node] = float(rng.normal(0.0, TYPICAL_OFFSET_S))
        return base + self._skew.get(node, 0.0)

    def fact(self, node: str, now: float, reading: int = 0) -> ClockFact:
        """What the node's agent reads at true time `now` (`reading` varies the wander between readings)."""
        offset = self.offset(node) + float(np.sin(reading * 0.7)) * 2e-6
        synchronised = node not in self._unsync
        return ClockFact(
            time=now + offset,
            source="chrony",
            synchronised=synchronised,
            offset_s=offset,
            error_s=abs(offset) + ROOT_DISPERSION_S + ROOT_DELAY_S / 2 if synchronised else None,
            last_offset_s=offset * 0.1,
            root_delay_s=ROOT_DELAY_S,
            root_dispersion_s=ROOT_DISPERSION_S,
            stratum=3,
            reference="ntp1.twin (0A000001)",
            leap="Normal" if synchronised else "Not synchronised",
        )
