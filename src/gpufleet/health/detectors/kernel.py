"""Kernel-log detector: every Xid, SXid, fallen-off-the-bus, reset-required and driver API-mismatch report becomes
a finding, classified by the Xid policy (severity and NVIDIA's action) and tied to the GPU by its PCI address.

AMD (amdgpu) and Intel Gaudi (habanalabs) reports are judged by their vendor's rules (`vendor_policy`) and named in
the driver's own words. A correctable error the hardware fixed is no incident on its own (an info finding becomes an
incident, and incidents go to remediation): it is kept as a report, and only a burst of them on one GPU (more errors
in a minute than the single-bit ECC rate DCGM allows) becomes a finding.

The reports arrive parsed (the kernel-log source runs one streaming parser per node, so multi-line reports and
GPU identities work across reads); this detector only judges them, and records each as a KernelReport.
"""

from __future__ import annotations

from collections import deque
from datetime import datetime
from functools import cache

import msgspec

from gpufleet.catalog.xid import xid_causes as catalog_xid_causes
from gpufleet.health.detectors.base import NodeSetup, node_detector
from gpufleet.health.detectors.seen import NodeSeen
from gpufleet.health.thresholds import load_thresholds
from gpufleet.health.vendor_policy import DRIVERS, describe, is_bank_record
from gpufleet.health.xid_policy import Verdict, XidPolicy, classify, default_policy
from gpufleet.health.xid_rating import finding_severity
from gpufleet.model import Entity, EntityKind, RootCause, Severity
from gpufleet.model.kernel import KernelEvent, kernel_ident
from gpufleet.model.observe import Finding, KernelReport
from gpufleet.model.pci import normalise_pci

RATE_WINDOW_S = 60.0  # correctable errors are counted per GPU over this window
_CORRECTED_CAUSES = (RootCause.ecc_sbe_rate, RootCause.scaleup_link)


@cache
def xid_causes() -> dict[int, RootCause]:
    return {code: RootCause(cause) for code, cause in catalog_xid_causes().items()}


def _announced(event: KernelEvent, finding: Finding) -> bool:
    return event.kind == "reset" and finding.action == "IGNORE" and "succeeded" not in (event.detail or "")


def _reset_under_way(event: KernelEvent, finding: Finding) -> bool:
    """habanalabs announcing a reset it has begun ("Going to reset device"): the same device always ends it with
    "Successfully finished resetting" or "Failed to reset", and that line (or the hang before it) is the finding.
    amdgpu's "GPU reset begin!" stays a finding: a GPU reset with its XGMI hive prints nothing else of its own."""
    return event.vendor == "intel" and _announced(event, finding)


@node_detector("kernel", needs=("kernel",), lasting=False)
class KernelDetector:
    def __init__(
        self,
        gpu_by_pci: dict[tuple[str, str], int],
        policy: XidPolicy | None = None,
        correctable_per_minute: float | None = None,
    ) -> None:
        """`gpu_by_pci` maps (node, PCI domain:bus:device) to the GPU index on that node; `correctable_per_minute`
        (default: the thresholds' single-bit ECC rate) is how many corrected errors a GPU may report in a minute."""
        self.gpu_by_pci = gpu_by_pci
        self.policy = policy or default_policy()
        self.correctable_limit = (
            correctable_per_minute if correctable_per_minute is not None else load_thresholds().ecc.sbe_per_minute
        )
        self._corrected: dict[str, deque[tuple[float, int]]] = {}  # finding key -> (when, errors) in the window
        self._rate_reported: dict[str, float] = {}  # finding key -> when its rate was last reported

    @classmethod
    def build(cls, setup: NodeSetup) -> KernelDetector:
        gpu_by_pci = {}
        for e in setup.frame.entities:
            pci = normalise_pci(e.pci_bus_id) if e.pci_bus_id else None
            if pci:
                gpu_by_pci[(e.hostname, pci)] = e.gpu
        return cls(gpu_by_pci, setup.policy, correctable_per_minute=setup.thresholds.ecc.sbe_per_minute)

    def detect(self, now: float, seen: NodeSeen) -> list[Finding]:
        """A finding for each event (a corrected error only as part of a burst); the record of each goes to
        `seen.reports`."""
        findings: list[Finding] = []
        for node, events in (seen.kernel or {}).items():
            if events:
                judged, reports = self._judge(now, node, list(events))
                findings += judged
                seen.reports += reports
        return findings

    def _judge(self, now: float, node: str, events: list[KernelEvent]) -> tuple[list[Finding], list[KernelReport]]:
        findings, reports = [], []
        # devices whose reset failed in this batch: the announcement of that reset is part of the failure
        failed = frozenset(
            e.pci for e in events if e.vendor != "nvidia" and e.kind in ("reset_failed", "fallen_off_bus")
        )
        for event in events:
            ident = kernel_ident(node, event)
            finding = msgspec.structs.replace(self.finding(now, node, event), ident=ident)
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
                    vendor=event.vendor,
                    detail=(event.detail or "")[:256],
                    ident=ident,
                    logged=event.logged,
                )
            )
            filed = self.filed(now, event, finding, failed)
            if filed is not None:
                findings.append(filed)
        return findings, reports

    def filed(
        self, now: float, event: KernelEvent, finding: Finding, failed: frozenset[str | None] = frozenset()
    ) -> Finding | None:
        """What the detector files for `event`, whose judgement is `finding` (`self.finding`): that finding, a burst
        of corrected errors once they pass their rate, or nothing (a corrected error below the rate, an announcement
        the next line ends). `failed`: devices whose reset failed in the same read. `gpufleet triage` asks the same
        of every line of a log, so a burst of corrected errors reads alike there."""
        if _reset_under_way(event, finding) or (event.pci in failed and _announced(event, finding)):
            return None  # the line that ends it (succeeded, failed, not usable) or the hang before it is the finding
        if event.vendor != "nvidia" and finding.severity is Severity.info and finding.cause in _CORRECTED_CAUSES:
            # a machine-check bank record details errors the RAS count line reports: counted once, there
            burst = None if is_bank_record(event) else self._corrected_burst(now, event, finding)
            return None if burst is None else msgspec.structs.replace(burst, ident=finding.ident)
        return finding

    def finding(self, now: float, node: str, event: KernelEvent) -> Finding:
        """One event judged by the policy, tied to its GPU (or node)."""
        return self.judged(now, node, event, classify(event, self.policy))

    def judged(self, now: float, node: str, event: KernelEvent, verdict: Verdict) -> Finding:
        """The finding for `event` under `verdict`: its root cause, its severity (health.xid_rating's
        `finding_severity`: critical when the verdict is FATAL, info when it asks for nothing, else warning) and its
        action, tied to its GPU (or node)."""
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
        severity = finding_severity(verdict)
        if event.vendor != "nvidia":
            summary = describe(event, str(entity))
        else:
            what = f"Xid {event.xid}" if event.xid is not None else event.kind.replace("_", " ")
            known = "" if event.known else " (unknown code)"
            summary = f"{what}{known} on {entity}: {event.message[:120]}"
        return Finding(
            now,
            cause,
            entity,
            severity,
            summary,
            event.raw.strip(),
            "kmsg",
            action=verdict.action.value,
            xid=event.xid,
        )

    def _corrected_burst(self, now: float, event: KernelEvent, finding: Finding) -> Finding | None:
        """The finding for a GPU whose corrected errors in the last minute passed the limit, at most once a window;
        None while they stay under it."""
        when = _event_time(event, now)
        key = finding.key
        window = self._corrected.setdefault(key, deque())
        if window and when < window[-1][0]:  # another clock (a new boot, a different framing): start again
            window.clear()
        window.append((when, event.error_count or 1))
        while window and when - window[0][0] > RATE_WINDOW_S:
            window.popleft()
        errors = sum(n for _, n in window)
        last = self._rate_reported.get(key)
        if errors <= self.correctable_limit or (last is not None and 0 <= when - last < RATE_WINDOW_S):
            return None
        self._rate_reported[key] = when
        block = event.ras_block.upper() if event.ras_block else "the GPU"
        driver = DRIVERS.get(event.vendor, event.vendor)
        return msgspec.structs.replace(
            finding,
            severity=Severity.warning,
            action="NONE",
            summary=f"{driver}: {errors} corrected errors in {block} on {finding.entity} within a minute "
            f"(limit {self.correctable_limit:g}): a part that keeps needing correction is failing",
            evidence=f"{finding.evidence[:12_000]}\n{errors} corrected errors in {RATE_WINDOW_S:.0f} s",
        )


def _event_time(event: KernelEvent, now: float) -> float:
    """When the line says it happened (epoch, or seconds since boot); the judging time when it says nothing."""
    when = event.time
    if isinstance(when, datetime):
        return when.timestamp()
    return when if when is not None else now
