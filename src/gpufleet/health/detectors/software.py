"""Software detectors over node inventories: driver, CUDA and fabric-manager versions that cannot work together.

- On the node (`node_checks`): the CUDA version needs a newer driver; the fabric manager does not match the driver.
- Across the fleet (`fleet_drift`, in the control plane): a node whose driver differs from most of the fleet's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

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


class SoftwareDetector:
    def __init__(self, thresholds: Thresholds) -> None:
        self.min_driver = thresholds.software.cuda_min_driver

    def node_checks(self, now: float, inventories: Sequence[NodeInventory]) -> list[Finding]:
        """CUDA against the driver and the fabric manager against the driver: NVIDIA's pairings, so NVIDIA's nodes."""
        out: list[Finding] = []
        for inv in inventories:
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

    def fleet_drift(self, now: float, inventories: Sequence[NodeInventory]) -> list[Finding]:
        """Nodes whose driver differs from most nodes of the same vendor (an amdgpu version is not an NVIDIA one)."""
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
