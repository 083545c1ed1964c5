"""Kernel-log detector: every Xid, SXid, fallen-off-the-bus, reset-required and driver API-mismatch report becomes
a finding, classified by the Xid policy (severity and NVIDIA's action) and tied to the GPU by its PCI address.

The reports arrive parsed (the kernel-log source runs one streaming parser per node, so multi-line reports and
GPU identities work across reads); this detector only judges them.
"""

from __future__ import annotations

from functools import cache

from gpufleet.catalog.xid import xid_causes as catalog_xid_causes
from gpufleet.health.xid_policy import XidPolicy, classify, default_policy
from gpufleet.model import Entity, EntityKind, RootCause, Severity
from gpufleet.model.kernel import KernelEvent
from gpufleet.model.observe import Finding, KernelReport
from gpufleet.model.pci import normalise_pci


@cache
def xid_causes() -> dict[int, RootCause]:
    return {code: RootCause(cause) for code, cause in catalog_xid_causes().items()}


class KernelDetector:
    def __init__(self, gpu_by_pci: dict[tuple[str, str], int], policy: XidPolicy | None = None) -> None:
        """`gpu_by_pci` maps (node, PCI domain:bus:device) to the GPU index on that node."""
        self.gpu_by_pci = gpu_by_pci
        self.policy = policy or default_policy()

    def judge(self, now: float, node: str, events: list[KernelEvent]) -> tuple[list[Finding], list[KernelReport]]:
        """A finding for each event, and the record of it the control plane keeps."""
        findings, reports = [], []
        for event in events:
            finding = self.finding(now, node, event)
            findings.append(finding)
            reports.append(
                KernelReport(
                    now,
                    node,
                    event.kind,
                    event.message[:1000],
                    event.raw[:4000],
                    finding.entity.index if finding.entity.kind is EntityKind.gpu else None,
                    event.pci,
                    event.xid,
                    event.sxid,
                )
            )
        return findings, reports

    def finding(self, now: float, node: str, event: KernelEvent) -> Finding:
        """One event judged by the policy, tied to its GPU (or node)."""
        verdict = classify(event, self.policy)
        pci = normalise_pci(event.pci) if event.pci else None
        gpu = self.gpu_by_pci.get((node, pci)) if pci else None
        if gpu is not None:
            entity = Entity(EntityKind.gpu, node, gpu)
        elif pci:  # a node whose GPUs NVML cannot list (its driver is what broke): the GPU by its PCI address
            entity = Entity(EntityKind.gpu, node, name=pci)
        else:
            entity = Entity(EntityKind.node, node)
        if event.kind == "api_mismatch":
            return Finding(
                now,
                RootCause.driver_mismatch,
                Entity(EntityKind.node, node),
                Severity.critical,
                f"driver components disagree on {node}",
                event.raw.strip(),
                "kmsg",
                action="CORDON",
            )
        if verdict.cause is not None:
            cause = verdict.cause
        elif event.kind == "fallen_off_bus" or event.xid == 79:
            cause = RootCause.gpu_lost
        elif event.kind == "sxid":
            cause = RootCause.nvlink
        elif event.xid is not None:
            cause = xid_causes().get(event.xid, RootCause.gpu_xid)
        else:
            cause = RootCause.gpu_xid
        fatal = verdict.severity.value == "FATAL"
        severity = (
            Severity.critical if fatal else Severity.info if verdict.action.value == "IGNORE" else Severity.warning
        )
        what = f"Xid {event.xid}" if event.xid is not None else event.kind.replace("_", " ")
        known = "" if event.known else " (unknown code)"
        return Finding(
            now,
            cause,
            entity,
            severity,
            f"{what}{known} on {entity}: {event.message[:120]}",
            event.raw.strip(),
            "kmsg",
            action=verdict.action.value,
            xid=event.xid,
        )
