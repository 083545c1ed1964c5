"""Software detectors over node inventories: driver, CUDA and fabric-manager versions that cannot work together.

- On the node (`SoftwareDetector`): the CUDA version needs a newer driver; the fabric manager does not match the
  driver.
- Across the fleet (`DriverDriftDetector`, in the control plane, once a minute): a node whose driver differs from
  most of the fleet's.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from gpufleet.health.detectors.base import FleetSetup, NodeSetup, fleet_detector, node_detector
from gpufleet.health.detectors.seen import FleetSeen, NodeSeen
from gpufleet.health.thresholds import Thresholds
from gpufleet.model import Entity, EntityKind, RootCause, Severity
from gpufleet.model.observe import Finding, NodeInventory


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def _finding(now: float, node: str, problems: list[str]) -> Finding:
    return Finding(
        now,
        RootCause.driver_mismatch,
        Entity(EntityKind.node, node),
        Severity.critical,
        f"driver/CUDA mismatch on {node}",
        "; ".join(problems),
        "software",
        action="CORDON",
    )


DRIFT_EVERY_S = 60.0


@node_detector("software", needs=("inventories",))
class SoftwareDetector:
    def __init__(self, thresholds: Thresholds) -> None:
        self.min_driver = thresholds.software.cuda_min_driver

    @classmethod
    def build(cls, setup: NodeSetup) -> SoftwareDetector:
        return cls(setup.thresholds)

    def detect(self, now: float, seen: NodeSeen) -> list[Finding]:
        """CUDA against the driver and the fabric manager against the driver: NVIDIA's pairings, so NVIDIA's nodes."""
        out: list[Finding] = []
        for inv in seen.inventories or ():
            if not inv.driver or _vendor(inv) != "nvidia":
                continue
            problems = []
            need = self.min_driver.get(".".join(inv.cuda.split(".")[:2]))
            if need is not None and _version(inv.driver) < _version(need):
                problems.append(f"CUDA {inv.cuda} needs driver >= {need}, node has {inv.driver}")
            if inv.fabric_manager and inv.fabric_manager != inv.driver:
                problems.append(f"fabric manager {inv.fabric_manager} does not match driver {inv.driver}")
            if problems:
                out.append(_finding(now, inv.hostname, problems))
        return out


@fleet_detector("driver-drift", needs=("inventories",))
class DriverDriftDetector:
    def __init__(self, every_s: float = DRIFT_EVERY_S) -> None:
        self.every_s = every_s
        self.checked_at = -math.inf  # when the inventories were last read and compared

    @classmethod
    def build(cls, setup: FleetSetup) -> DriverDriftDetector:
        return cls()

    def detect(self, now: float, seen: FleetSeen) -> list[Finding]:
        """Nodes whose driver differs from most nodes of the same vendor (an amdgpu version is not an NVIDIA one),
        at most every `every_s` (a call in between reads no inventory)."""
        if seen.inventories is None or now - self.checked_at < self.every_s:
            return []
        self.checked_at = now
        return _drift(now, seen.inventories())


def _drift(now: float, inventories: Sequence[NodeInventory]) -> list[Finding]:
    by_vendor: dict[str, list[NodeInventory]] = {}
    for inv in inventories:
        if inv.driver and inv.gpus:
            by_vendor.setdefault(_vendor(inv), []).append(inv)
    out = []
    for vendor, drivers in by_vendor.items():
        if len(drivers) < 2:
            continue
        fleet_driver, _ = Counter(inv.driver for inv in drivers).most_common(1)[0]
        whose = "the fleet's" if len(by_vendor) == 1 else f"the fleet's {vendor} nodes'"
        out += [
            _finding(now, inv.hostname, [f"driver {inv.driver} differs from {whose} {fleet_driver}"])
            for inv in drivers
            if inv.driver != fleet_driver
        ]
    return out


def _vendor(inv: NodeInventory) -> str:
    return inv.gpus[0].vendor if inv.gpus else "nvidia"
