"""amdgpu and habanalabs events judged: the vendor's rules (never NVIDIA's Xid policy), the driver's own words in the
summary, a corrected error kept as a record until a burst of them, and real captures judged end to end."""

from __future__ import annotations

import pytest

from gpufleet.health.detectors.kernel import KernelDetector
from gpufleet.health.detectors.seen import NodeSeen
from gpufleet.health.incidents import IncidentBook
from gpufleet.health.xid_policy import Action, XidSeverity, classify, policy_from_text
from gpufleet.model import Entity, EntityKind, RootCause, Severity
from gpufleet.model.kernel import EventKind, KernelEvent, RasSeverity
from gpufleet.parsers.kernel.kmsg import scan_kmsg
from tests.conftest import CAPTURES

T0 = 1_800_000_000.0
PCI = "0000:1c:00"
DATA = CAPTURES


def amd(
    kind: EventKind,
    detail: str | None = None,
    *,
    block: str | None = None,
    severity: RasSeverity | None = None,
    count: int | None = None,
    pci: str | None = PCI,
    vendor: str = "amd",
    uptime: float | None = None,
) -> KernelEvent:
    driver = "amdgpu" if vendor == "amd" else "habanalabs"
    return KernelEvent(
        kind, 1, f"{driver} {pci}.0: {detail}", detail or kind, pci=pci, vendor=vendor, ras_block=block,
        ras_severity=severity, error_count=count, detail=detail, uptime_s=uptime,
    )  # fmt: skip


def judge(*events: KernelEvent, detector: KernelDetector | None = None, node: str = "node-a"):  # type: ignore[no-untyped-def]
    detector = detector or KernelDetector({("node-a", PCI): 3})
    seen = NodeSeen(kernel={node: list(events)})
    return detector.detect(T0, seen), seen.reports


@pytest.mark.parametrize(
    ("event", "cause", "severity", "action", "summary"),
    [
        (amd("ras", "umc uncorrectable", block="umc", severity="uncorrectable", count=1), RootCause.ecc_dbe,
         Severity.critical, "RESET_GPU", "amdgpu RAS: 1 uncorrectable error in UMC on gpu/node-a/3"),
        (amd("ras", "xgmi_wafl uncorrectable", block="xgmi_wafl", severity="uncorrectable", count=2),
         RootCause.scaleup_link, Severity.critical, "RESET_GPU",
         "amdgpu RAS: 2 uncorrectable errors in XGMI_WAFL on gpu/node-a/3"),
        (amd("ras", "gfx uncorrectable", block="gfx", severity="uncorrectable", count=1), RootCause.gpu_ras,
         Severity.critical, "RESET_GPU", "amdgpu RAS: 1 uncorrectable error in GFX on gpu/node-a/3"),
        (amd("ras", "ERREVENT_ATHUB_INTERRUPT", block="athub", severity="fatal", count=1), RootCause.gpu_ras,
         Severity.critical, "RESET_GPU", "amdgpu RAS: fatal hardware error (ERREVENT_ATHUB_INTERRUPT) on gpu/node-a/3"),
        (amd("ras", "umc deferred", block="umc", severity="deferred", count=1), RootCause.gpu_ras, Severity.warning,
         "NONE", "amdgpu RAS: 1 deferred error in UMC on gpu/node-a/3"),
        (amd("ras", "umc poison created", block="umc", severity="deferred", count=1), RootCause.gpu_ras,
         Severity.warning, "NONE", "amdgpu RAS: 1 deferred error in UMC on gpu/node-a/3"),
        (amd("ras", "gfx poison consumption", block="gfx", severity="uncorrectable", count=1), RootCause.gpu_ras,
         Severity.critical, "RESET_GPU", "amdgpu RAS: 1 poison consumption in GFX on gpu/node-a/3"),
        (amd("hw_error", "ACA entry 0 fatal", severity="fatal", count=1), RootCause.gpu_ras, Severity.critical,
         "RESET_GPU", "amdgpu: fatal hardware error (ACA entry 0 fatal) on gpu/node-a/3"),
        (amd("hw_error", "bad page threshold 128", block="umc", severity="uncorrectable", count=129),
         RootCause.retired_pages, Severity.critical, "DRAIN_RMA", "replace the GPU"),
        (amd("hang", "ring gfx_0.0.0"), RootCause.gpu_hang, Severity.warning, "RESET_GPU",
         "amdgpu: ring gfx_0.0.0 timed out on gpu/node-a/3; the driver resets the GPU"),
        (amd("hang", "ring comp_1.1.0 soft recovered"), RootCause.gpu_hang, Severity.info, "IGNORE",
         "amdgpu: ring comp_1.1.0 timed out on gpu/node-a/3 and recovered without a reset"),
        (amd("reset", "succeeded"), RootCause.gpu_hang, Severity.info, "IGNORE",
         "amdgpu: gpu/node-a/3 recovered: the driver's reset succeeded"),
        (amd("reset", "VRAM lost"), RootCause.gpu_hang, Severity.warning, "RESTART_APP",
         "amdgpu: VRAM lost in the reset of gpu/node-a/3: work running on it is gone"),
        (amd("reset_failed", "reset failed"), RootCause.gpu_lost, Severity.critical, "REBOOT",
         "amdgpu: reset failed on gpu/node-a/3: the GPU is unusable"),
        (amd("fallen_off_bus", "lost from bus"), RootCause.gpu_lost, Severity.critical, "REBOOT",
         "amdgpu: gpu/node-a/3 lost from the bus"),
        (amd("reset_failed", "device NOT usable after reset", vendor="intel"), RootCause.gpu_lost, Severity.critical,
         "REBOOT", "habanalabs: device NOT usable after reset on gpu/node-a/3"),
        (amd("hang", "CS_TIMEOUT", vendor="intel"), RootCause.gpu_hang, Severity.warning, "RESET_GPU",
         "habanalabs: command submission timed out (CS_TIMEOUT) on gpu/node-a/3"),
        (amd("hw_error", "CRITICL_FW_ERR: heartbeat failed", severity="fatal", vendor="intel"), RootCause.gpu_ras,
         Severity.critical, "RESET_GPU", "habanalabs: fatal hardware error (CRITICL_FW_ERR: heartbeat failed)"),
        (amd("hw_error", "RAZWI", vendor="intel"), RootCause.gpu_ras, Severity.warning, "RESTART_APP",
         "habanalabs: the application's illegal access (RAZWI) on gpu/node-a/3"),
        (amd("hw_error", "MMU_PAGE_FAULT", vendor="intel"), RootCause.gpu_ras, Severity.warning, "RESTART_APP",
         "illegal access (MMU_PAGE_FAULT)"),
        (amd("hw_error", "HBM0_MC0_DERR", severity="uncorrectable", vendor="intel"), RootCause.gpu_ras,
         Severity.critical, "RESET_GPU", "habanalabs: uncorrectable hardware error (HBM0_MC0_DERR)"),
    ],
)  # fmt: skip
def test_vendor_events_are_judged_by_the_vendors_rules(
    event: KernelEvent, cause: RootCause, severity: Severity, action: str, summary: str
) -> None:
    (finding,), (report,) = judge(event)
    assert (finding.cause, finding.severity, finding.action) == (cause, severity, action)
    assert summary in finding.summary
    assert "Xid" not in finding.summary and finding.xid is None
    assert finding.entity == Entity(EntityKind.gpu, "node-a", 3)
    assert (report.vendor, report.detail, report.gpu) == (event.vendor, event.detail, 3)


def test_the_xid_policy_is_never_consulted_for_another_vendor() -> None:
    site = policy_from_text("fallen_off_bus: {severity: NONFATAL, action: IGNORE}\nreset_required: {severity: NONFATAL,"
                            " action: IGNORE}")  # fmt: skip
    nvidia = KernelEvent("fallen_off_bus", 1, "NVRM: GPU 0000:1c:00.0: GPU has fallen off the bus.", "x", pci=PCI)
    assert classify(nvidia, site).action is Action.IGNORE  # the site's policy speaks for NVIDIA's events
    verdict = classify(amd("fallen_off_bus", "lost from bus"), site)
    assert (verdict.severity, verdict.action.value, verdict.rule) == (
        XidSeverity.FATAL,
        "REBOOT",
        "amd: fallen-off-bus",
    )
    lost = amd("reset_failed", "device NOT usable after reset", vendor="intel")
    assert classify(lost, site).rule == "intel: reset-failed"
    (finding,), _ = judge(lost, detector=KernelDetector({("node-a", PCI): 3}, site))
    assert finding.severity is Severity.critical
    # the terms NVIDIA's vocabulary shares are its members: one comparison serves both
    assert classify(amd("reset", "succeeded")).action is Action.IGNORE


def test_a_single_corrected_error_is_a_record_not_a_finding() -> None:
    event = amd("ras", "umc correctable", block="umc", severity="correctable", count=1, uptime=100.0)
    findings, (report,) = judge(event)
    assert findings == []
    assert (report.kind, report.vendor, report.detail) == ("ras", "amd", "umc correctable")


def test_a_burst_of_corrected_errors_becomes_one_finding_a_minute() -> None:
    detector = KernelDetector({("node-a", PCI): 3}, correctable_per_minute=10)

    def corrected(at: float, count: int, block: str = "umc") -> list:  # type: ignore[type-arg]
        findings, _ = judge(
            amd("ras", f"{block} correctable", block=block, severity="correctable", count=count, uptime=at),
            detector=detector,
        )
        return findings

    assert corrected(100.0, 6) == [] and corrected(110.0, 4) == []  # 10 in the minute: at the limit, not over it
    [burst] = corrected(120.0, 1)
    assert (burst.cause, burst.severity, burst.action) == (RootCause.ecc_sbe_rate, Severity.warning, "NONE")
    assert burst.summary.startswith("amdgpu: 11 corrected errors in UMC on gpu/node-a/3 within a minute (limit 10)")
    assert corrected(130.0, 5) == []  # reported once a window
    assert corrected(300.0, 3) == []  # the old ones left the window
    [links] = corrected(301.0, 1533, block="xgmi_wafl")  # the links are counted apart from the memory
    assert links.cause is RootCause.scaleup_link and "XGMI_WAFL" in links.summary


def test_machine_check_bank_records_are_not_counted_twice() -> None:
    banks = [amd("hw_error", f"ACA entry {i} correctable", severity="correctable", count=1, uptime=5.0 + i)
             for i in range(30)]  # fmt: skip
    findings, reports = judge(*banks)
    assert findings == [] and len(reports) == 30


def test_a_gaudi_device_not_yet_tied_to_its_address_is_reported_on_the_node() -> None:
    event = amd("hang", "CS_TIMEOUT (hl3)", pci=None, vendor="intel")
    (finding,), (report,) = judge(event)
    assert finding.entity == Entity(EntityKind.node, "node-a")
    assert "(hl3)" in finding.summary and report.detail == "CS_TIMEOUT (hl3)" and report.gpu is None


def _capture(directory: str, name: str) -> list[KernelEvent]:
    return scan_kmsg((DATA / directory / f"{name}.log").read_text(), year=2026).events


def test_mi300x_fatal_error_and_hive_reset_judged_end_to_end() -> None:
    events = _capture("kmsg_amd", "rocm_4021_mi300x_athub_mode1")
    buses = ["1b", "3d", "4e", "5f", "9d", "bd", "cd", "dd"]
    detector = KernelDetector({("mi300-07", f"0000:{bus}:00"): i for i, bus in enumerate(buses)})
    findings, reports = judge(*events, detector=detector, node="mi300-07")
    assert len(reports) == len(events) and {r.vendor for r in reports} == {"amd"}
    by_gpu: dict[int, set[tuple[RootCause, Severity]]] = {}
    for f in findings:
        assert f.entity.index is not None and "Xid" not in f.summary
        by_gpu.setdefault(f.entity.index, set()).add((f.cause, f.severity))
    assert (RootCause.gpu_ras, Severity.critical) in by_gpu[7]  # dd: the fatal RAS event
    assert (RootCause.gpu_ras, Severity.critical) in by_gpu[0]  # 1b: the uncorrected, context-corrupt bank
    assert (RootCause.scaleup_link, Severity.warning) in by_gpu[4]  # 9d: 1533 corrected XGMI errors at once
    assert by_gpu[1] == {(RootCause.gpu_hang, Severity.info)}  # 3d: only reset along with its hive
    # one incident per GPU: each GPU's reset lines join the fault that caused them
    book = IncidentBook()
    for f in findings:
        book.add(f)
    incidents = {i.entity.index: i for i in book.open_incidents()}
    assert len(incidents) == 8
    assert (incidents[7].cause, incidents[7].action) == (RootCause.gpu_ras, "RESET_GPU")
    assert (incidents[4].cause, incidents[4].action) == (RootCause.scaleup_link, "NONE")
    assert (incidents[1].cause, incidents[1].action) == (RootCause.gpu_hang, "IGNORE")


def test_a_ring_timeout_and_its_recovery_are_one_hang_incident() -> None:
    events = _capture("kmsg_amd", "cosmic_epoch_3764_rx5700xt_ring_timeout")
    findings, _ = judge(*events, detector=KernelDetector({("desk", "0000:28:00"): 0}), node="desk")
    book = IncidentBook()
    for f in findings:
        book.add(f)
    [incident] = book.open_incidents()
    assert (incident.cause, incident.severity, incident.action) == (RootCause.gpu_hang, Severity.warning, "RESET_GPU")
    assert incident.summary == "amdgpu: ring gfx_0.0.0 timed out on gpu/desk/0; the driver resets the GPU"
    assert incident.count == len(events)


def test_gaudi_devices_left_unusable_are_lost_gpus() -> None:
    events = _capture("kmsg_gaudi", "setup_and_install_1_gaudi_init_failed")
    findings, _ = judge(*events, detector=KernelDetector({("g2", "0000:1a:00"): 2}), node="g2")
    assert [(f.cause, f.severity, f.action) for f in findings] == [
        (RootCause.gpu_lost, Severity.critical, "REBOOT")
    ] * 3
    assert findings[0].entity == Entity(EntityKind.gpu, "g2", 2)
    assert findings[1].entity == Entity(EntityKind.gpu, "g2", name="0000:34:00")  # not in the inventory: by address
    assert findings[0].summary == "habanalabs: init failed: device NOT usable on gpu/g2/2"


def test_a_failed_resets_announcement_is_part_of_the_failure() -> None:
    """`GPU reset begin!` then `GPU reset(1) failed` on one GPU: one lost-GPU finding, no separate reset notice."""
    from gpufleet.sim import kmsg

    lines = kmsg.amdgpu_reset_failed_lines(100.0, "0000:1c:00.0")
    events = scan_kmsg("\n".join(lines) + "\n", year=2026).events
    findings, reports = judge(*events, detector=KernelDetector({("n", "0000:1c:00"): 3}), node="n")
    assert len(reports) == len(events) >= 3
    assert {(f.cause, f.entity.index) for f in findings} == {(RootCause.gpu_lost, 3)}  # failed, and its ret
