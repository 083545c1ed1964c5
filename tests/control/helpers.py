"""Pieces of the control-plane tests: a settable clock, a control plane over a state database with an observe-only
backend, and the batches an agent would push."""

from __future__ import annotations

from typing import Any

from gpufleet.control.service import ControlPlane
from gpufleet.model import Entity, EntityKind, RootCause, Severity
from gpufleet.model.observe import SCHEMA_VERSION, Batch, Finding, GpuInfo, NodeInventory, Record
from gpufleet.remediate.backends.observe import ObserveOnlyBackend
from gpufleet.state import Database

T0 = 1_800_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def plane_at(db: Database, clock: Clock, remediation: str = "off") -> ControlPlane:
    holder: dict[str, ControlPlane] = {}
    backend = ObserveOnlyBackend(lambda: sorted(holder["p"].fleet.nodes))
    plane = ControlPlane(db, backend, clock=clock, remediation=remediation)
    holder["p"] = plane
    return plane


def lost_gpu(node: str, when: float, gpu: int = 3) -> Finding:
    return Finding(
        when, RootCause.gpu_lost, Entity(EntityKind.gpu, node, gpu), Severity.critical,
        f"Xid 79 on gpu/{node}/{gpu}", "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.", "kmsg",
        action="RESTART_BM", xid=79,
    )  # fmt: skip


def batch(node: str, records: list[Record], incarnation: str = "inc-1", when: float = T0, **kw: Any) -> Batch:
    return Batch(v=SCHEMA_VERSION, agent=node, incarnation=incarnation, node=node, sent=when, records=records, **kw)


def inventory(node: str) -> NodeInventory:
    return NodeInventory(
        hostname=node, driver="550.90.07", cuda="12.4", gpus=[GpuInfo(i, f"GPU-{i}", "H100") for i in range(8)]
    )
