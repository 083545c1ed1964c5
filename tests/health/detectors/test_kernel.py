"""Kernel-log detector on hand-built events: which GPU a report is tied to (by PCI address, by the address alone when
NVML cannot list the GPU, the node when the report names none), the cause each class maps to, the severity from the
Xid policy, and the record kept for each report."""

from __future__ import annotations

import pytest

from gpufleet.health.detectors.kernel import KernelDetector
from gpufleet.health.detectors.seen import NodeSeen
from gpufleet.health.xid_policy import policy_from_text
from gpufleet.model import Entity, EntityKind, RootCause, Severity
from gpufleet.model.kernel import EventKind, KernelEvent

T0 = 1_800_000_000.0
PCI = "0000:18:00"


def event(kind: EventKind = "xid", xid: int | None = None, pci: str | None = PCI, **extra: object) -> KernelEvent:
    raw = f"NVRM: Xid (PCI:{pci}.0): {xid}, pid=1234, name=python" if kind == "xid" else f"NVRM: {kind} report"
    return KernelEvent(kind, 1, raw, f"{kind} {xid}", xid=xid, pci=pci, **extra)  # type: ignore[arg-type]


def judge(*events: KernelEvent, detector: KernelDetector | None = None):  # type: ignore[no-untyped-def]
    detector = detector or KernelDetector({("node-a", PCI): 5})
    seen = NodeSeen(kernel={"node-a": list(events)})
    return detector.detect(T0, seen), seen.reports


@pytest.mark.parametrize(
    ("xid", "cause", "severity", "action"),
    [
        (79, RootCause.gpu_lost, Severity.critical, "RESTART_BM"),
        (48, RootCause.ecc_dbe, Severity.critical, "WORKFLOW_XID_48"),
        (64, RootCause.retired_pages, Severity.info, "IGNORE"),  # a recording event whose text names no failure
        (74, RootCause.nvlink, Severity.critical, "WORKFLOW_NVLINK_ERR"),
        (119, RootCause.gpu_xid, Severity.critical, "RESET_GPU"),
        (13, RootCause.gpu_xid, Severity.warning, "RESTART_APP"),  # the application's fault: restart it
        (43, RootCause.gpu_xid, Severity.info, "IGNORE"),
        (63, RootCause.retired_pages, Severity.info, "IGNORE"),
    ],
)
def test_cause_severity_and_action_per_xid(xid: int, cause: RootCause, severity: Severity, action: str) -> None:
    (finding,), _ = judge(event(xid=xid))
    assert (finding.cause, finding.severity, finding.action, finding.xid) == (cause, severity, action, xid)
    assert finding.entity == Entity(EntityKind.gpu, "node-a", 5)
    assert finding.source == "kmsg" and finding.time == T0
    assert finding.summary.startswith(f"Xid {xid} on ")


@pytest.mark.parametrize(
    "message",
    [
        "Row Remapper Error: (0x0000000018f31d80) - Row Remapping table is full",
        "Row Remapper Error: (0x0000000018f31d80) - All reserved rows for bank are remapped",
        "DRAM Retirement failed due to no spare for retirement at 0x0000000018f31d80",
        "Row Remapper: Failed to remap a row, GPU must be serviced.",
    ],
)
def test_an_xid_64_that_names_a_remap_failure_is_filed_as_one(message: str) -> None:
    (finding,), _ = judge(KernelEvent("xid", 1, f"NVRM: Xid (PCI:{PCI}): 64, {message}", message, xid=64, pci=PCI))
    assert (finding.cause, finding.severity, finding.action) == (
        RootCause.row_remap_failure,
        Severity.critical,
        "CONTACT_SUPPORT",
    )


@pytest.mark.parametrize(
    "message",
    [
        "Row Remapper: New row (0x0000000018f31d80) marked for remapping, reset gpu to activate.",
        "Row Remapper: (0x0000000018f31d80) - Attempting to remap a row that is already pending remapping. "
        "Remapping will occur when the GPU is reset",
        "DRAM Retirement failed due to pending row remap at 0x0000000018f31d80",
    ],
)
def test_a_recorded_row_remap_is_watched_not_drained(message: str) -> None:
    xid = 63 if "New row" in message else 64
    (finding,), _ = judge(KernelEvent("xid", 1, f"NVRM: Xid (PCI:{PCI}): {xid}, {message}", message, xid=xid, pci=PCI))
    assert (finding.cause, finding.severity, finding.action) == (RootCause.retired_pages, Severity.info, "IGNORE")


def test_a_gpu_off_the_bus_is_lost_whatever_its_code() -> None:
    (finding,), _ = judge(event("fallen_off_bus"))
    assert (finding.cause, finding.severity, finding.action) == (RootCause.gpu_lost, Severity.critical, "RESTART_BM")
    assert finding.summary.startswith("fallen off bus on ")


def test_an_nvswitch_report_is_an_nvlink_fault() -> None:
    (finding,), _ = judge(event("sxid", sxid=12028, pci=None))
    assert finding.cause is RootCause.nvlink
    assert finding.entity == Entity(EntityKind.node, "node-a")


def test_driver_component_mismatch_cordons_the_node() -> None:
    (finding,), (report,) = judge(event("api_mismatch"))
    assert (finding.cause, finding.severity, finding.action) == (
        RootCause.driver_mismatch,
        Severity.critical,
        "CORDON",
    )
    assert finding.entity == Entity(EntityKind.node, "node-a")
    assert report.gpu is None


def test_a_gpu_nvml_cannot_list_is_named_by_its_pci_address() -> None:
    (finding,), (report,) = judge(event(xid=79, pci="0000:9a:00"))
    assert finding.entity == Entity(EntityKind.gpu, "node-a", name="0000:9a:00")
    assert report.gpu is None and report.pci == "0000:9a:00"


def test_the_same_address_on_another_node_is_not_this_gpu() -> None:
    detector = KernelDetector({("node-b", PCI): 2})
    (finding,), _ = judge(event(xid=79), detector=detector)
    assert finding.entity.index is None


def test_pci_addresses_match_in_any_spelling() -> None:
    (finding,), _ = judge(event(xid=79, pci="00000000:18:00"))
    assert finding.entity == Entity(EntityKind.gpu, "node-a", 5)


def test_a_report_without_an_address_is_about_the_node() -> None:
    (finding,), _ = judge(event(xid=79, pci=None))
    assert finding.entity == Entity(EntityKind.node, "node-a")


def test_an_unknown_code_says_so_and_asks_for_support() -> None:
    (finding,), _ = judge(event(xid=9999, known=False))
    assert "(unknown code)" in finding.summary
    assert (finding.cause, finding.severity, finding.action) == (
        RootCause.gpu_xid,
        Severity.critical,
        "CONTACT_SUPPORT",
    )


def test_a_policy_override_changes_severity_and_action() -> None:
    policy = policy_from_text("overrides:\n  13: {severity: FATAL, action: RESET_GPU}\n")
    (finding,), _ = judge(event(xid=13), detector=KernelDetector({("node-a", PCI): 5}, policy))
    assert (finding.severity, finding.action) == (Severity.critical, "RESET_GPU")


def test_one_record_per_report_with_the_gpu_it_is_tied_to() -> None:
    findings, reports = judge(event(xid=79), event(xid=13), event("api_mismatch"))
    assert len(findings) == len(reports) == 3
    assert [(r.node, r.kind, r.gpu, r.xid) for r in reports] == [
        ("node-a", "xid", 5, 79),
        ("node-a", "xid", 5, 13),
        ("node-a", "api_mismatch", None, None),
    ]
    assert all(r.time == T0 for r in reports)


def test_records_are_capped_so_one_flood_cannot_swell_a_batch() -> None:
    long = KernelEvent("xid", 1, "x" * 10_000, "m" * 5_000, xid=13, pci=PCI)
    _, (report,) = judge(long)
    assert len(report.raw) == 4000 and len(report.message) == 1000


def test_no_events_no_findings() -> None:
    assert judge() == ([], [])
