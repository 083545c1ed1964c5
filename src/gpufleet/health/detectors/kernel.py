"""Kernel-log detector: every Xid, SXid, fallen-off-the-bus and reset-required report becomes a finding.

Lines are parsed as they arrive by one streaming parser per node (so multi-line reports and GPU identities work
across reads), classified by the Xid policy (severity and NVIDIA's action), and tied to the GPU by its PCI address.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

import yaml

from gpufleet.health.findings import Finding
from gpufleet.health.xid_policy import XidPolicy, classify, default_policy
from gpufleet.model import Entity, EntityKind, RootCause, Severity
from gpufleet.model.kernel import KernelEvent
from gpufleet.sources.kmsg import KmsgParser
from gpufleet.sources.pci import normalise_pci


@cache
def xid_causes() -> dict[int, RootCause]:
    text = resources.files("gpufleet.health").joinpath("data", "xid_causes.yaml").read_text(encoding="utf-8")
    return {int(k): RootCause(v) for k, v in yaml.safe_load(text).items()}


class KernelDetector:
    def __init__(self, gpu_by_pci: dict[tuple[str, str], int], policy: XidPolicy | None = None) -> None:
        """`gpu_by_pci` maps (node, PCI domain:bus:device) to the GPU index on that node."""
        self.gpu_by_pci = gpu_by_pci
        self.policy = policy or default_policy()
        self.parsers: dict[str, KmsgParser] = {}

    def lines(self, now: float, node: str, lines: list[str]) -> list[Finding]:
        parser = self.parsers.get(node)
        if parser is None:
            parser = self.parsers[node] = KmsgParser(host=node)
        out: list[Finding] = []
        for line in lines:
            if "API mismatch" in line:
                out.append(
                    Finding(
                        now,
                        RootCause.driver_mismatch,
                        Entity(EntityKind.node, node),
                        Severity.critical,
                        f"driver components disagree on {node}",
                        line.strip(),
                        "kmsg",
                        action="CORDON",
                    )
                )
                continue
            for event in parser.feed_line(line):
                out.append(self._finding(now, node, event))
        return out

    def _finding(self, now: float, node: str, event: KernelEvent) -> Finding:
        verdict = classify(event, self.policy)
        pci = normalise_pci(event.pci) if event.pci else None
        gpu = self.gpu_by_pci.get((node, pci)) if pci else None
        entity = Entity(EntityKind.gpu, node, gpu) if gpu is not None else Entity(EntityKind.node, node)
        if event.kind == "fallen_off_bus" or event.xid == 79:
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
