"""Software detector: driver, CUDA and kernel versions that cannot work together, from each node's facts."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from gpufleet.health.findings import Finding
from gpufleet.health.thresholds import Thresholds
from gpufleet.model import Entity, EntityKind, RootCause, Severity


@dataclass(frozen=True, slots=True)
class NodeFacts:
    node: str
    driver: str
    cuda: str
    kernel: str
    fabric_manager: str


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


class SoftwareDetector:
    def __init__(self, thresholds: Thresholds) -> None:
        self.min_driver = {k: _version(v) for k, v in thresholds.software.cuda_min_driver.items()}

    def observe(self, now: float, facts: list[NodeFacts]) -> list[Finding]:
        out: list[Finding] = []
        if not facts:
            return out
        fleet_driver, _ = Counter(f.driver for f in facts).most_common(1)[0]
        for f in facts:
            problems = []
            need = self.min_driver.get(".".join(f.cuda.split(".")[:2]))
            if need is not None and _version(f.driver) < need:
                problems.append(f"CUDA {f.cuda} needs driver >= {'.'.join(map(str, need))}, node has {f.driver}")
            if f.driver != fleet_driver:
                problems.append(f"driver {f.driver} differs from the fleet's {fleet_driver}")
            if f.fabric_manager and f.fabric_manager != f.driver:
                problems.append(f"fabric manager {f.fabric_manager} does not match driver {f.driver}")
            if problems:
                out.append(
                    Finding(
                        now,
                        RootCause.driver_mismatch,
                        Entity(EntityKind.node, f.node),
                        Severity.critical,
                        f"driver/CUDA mismatch on {f.node}",
                        "; ".join(problems),
                        "software",
                        action="CORDON",
                    )
                )
        return out
