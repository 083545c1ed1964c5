"""Severity, action and root cause for AMD (amdgpu) and Intel Gaudi (habanalabs) kernel events, and how a finding
names them. NVIDIA's Xid policy is never consulted for these: `xid_policy.classify` asks these rules instead.

The rules, and why:

- An uncorrectable (or fatal) RAS error: the data it touched is lost and the driver resets the GPU. In the memory
  (UMC) it is an uncorrectable ECC error; on the XGMI links (xgmi_wafl) it is the scale-up fabric; in any other block
  a hardware error of the GPU. Critical, RESET_GPU: drain, reset, re-test before work goes back (AMD Instinct RAS
  guide: a GPU with uncorrectable errors is reset; past the bad-page threshold it is replaced).
- A correctable error was fixed by the hardware: one report is no incident (the detector counts them against a
  rate, as DCGM does single-bit errors). A deferred error left poisoned data behind that nothing has read yet: watch
  it (warning). The bad-page threshold reached (amdgpu_ras_eeprom.c "Replace this GPU"): return the board.
- A hang (ring or command-submission timeout): the driver resets the GPU itself; the job on it is lost and the GPU is
  drained and re-tested, since no repeat rule exists to tell a one-off from a failing part. A reset that succeeded
  is the driver's recovery (info); lost VRAM means every process on the GPU lost its work (warning).
- A reset that failed, a device lost from the bus or one that never initialised: the GPU is unusable until the node
  reboots (critical, REBOOT, filed as a lost GPU so the repeated-loss escalation counts it).
- Gaudi: RAZWI (an illegal access) and MMU page faults are the application's; a heartbeat failure is the device's
  firmware not answering (CRITICL_FW_ERR): critical.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gpufleet.model.incident import RootCause
from gpufleet.model.kernel import KernelEvent

DRIVERS = {"amd": "amdgpu", "intel": "habanalabs"}
_FATAL, _NONFATAL = True, False


class VendorAction(StrEnum):
    """The vendor-neutral action terms of these rules, the ones runbooks key on. RESET_GPU, RESTART_APP and IGNORE
    mean what NVIDIA's buckets of the same name mean."""

    RESET_GPU = "RESET_GPU"
    REBOOT = "REBOOT"  # the device is unusable until the node reboots
    DRAIN_RMA = "DRAIN_RMA"  # take the node out and return the board
    RESTART_APP = "RESTART_APP"
    NONE = "NONE"  # nothing to do at once: watch it
    IGNORE = "IGNORE"


@dataclass(frozen=True, slots=True)
class VendorRule:
    """What one vendor event means: fatal or not, the action term, the root cause, and the rule that said so."""

    fatal: bool
    action: VendorAction
    cause: RootCause
    rule: str
    reason: str


def _verdict(fatal: bool, action: VendorAction, cause: RootCause, rule: str, reason: str) -> VendorRule:
    return VendorRule(fatal, action, cause, rule, reason)


def is_bank_record(event: KernelEvent) -> bool:
    """An amdgpu ACA/MCA machine-check bank entry: the detailed record of errors a RAS count line also reports."""
    return event.kind == "hw_error" and (event.detail or "").startswith(("ACA ", "MCA "))


def _is_app_error(event: KernelEvent) -> bool:
    detail = event.detail or ""
    return "RAZWI" in detail or "PAGE_FAULT" in detail


def _error_verdict(event: KernelEvent, step: str) -> VendorRule:
    """A RAS count or a hardware-error record, by its severity and where it happened."""
    block = (event.ras_block or "").lower()
    severity = event.ras_severity
    if severity in ("uncorrectable", "fatal"):
        if block in ("umc", "hbm"):
            cause, why = RootCause.ecc_dbe, "uncorrectable error in GPU memory"
        elif block.startswith("xgmi"):
            cause, why = RootCause.scaleup_link, "uncorrectable error on the GPU-to-GPU links"
        else:
            cause, why = RootCause.gpu_ras, f"uncorrectable hardware error in {block or 'the GPU'}"
        return _verdict(_FATAL, VendorAction.RESET_GPU, cause, f"{step}-{severity}", f"{why}: drain, reset and re-test")
    if severity == "correctable":
        cause = RootCause.scaleup_link if block.startswith("xgmi") else RootCause.ecc_sbe_rate
        return _verdict(_NONFATAL, VendorAction.IGNORE, cause, f"{step}-correctable", "corrected by the hardware")
    if severity == "deferred":
        return _verdict(
            _NONFATAL, VendorAction.NONE, RootCause.gpu_ras, f"{step}-deferred",
            "poisoned data left behind, not yet consumed; the page is retired",
        )  # fmt: skip
    return _verdict(
        _NONFATAL, VendorAction.NONE, RootCause.gpu_ras, f"{step}-unrated", "hardware event of unknown severity"
    )


def classify_vendor(event: KernelEvent) -> VendorRule:
    """The verdict on one amdgpu or habanalabs event."""
    kind = event.kind
    if kind == "ras":
        return _error_verdict(event, "ras")
    if kind == "hw_error":
        if (event.detail or "").startswith("bad page threshold"):
            return _verdict(
                _FATAL, VendorAction.DRAIN_RMA, RootCause.retired_pages, "bad-page-threshold",
                "retired VRAM pages reached the driver's threshold: replace the GPU",
            )  # fmt: skip
        if _is_app_error(event):
            return _verdict(
                _NONFATAL, VendorAction.RESTART_APP, RootCause.gpu_ras, "app-access-error",
                "the application accessed memory it may not: its job fails, the device is fine",
            )  # fmt: skip
        return _error_verdict(event, "hw-error")
    if kind == "hang":
        if "soft recovered" in (event.detail or ""):
            return _verdict(
                _NONFATAL, VendorAction.IGNORE, RootCause.gpu_hang, "hang-soft-recovered", "recovered without a reset"
            )
        return _verdict(
            _NONFATAL, VendorAction.RESET_GPU, RootCause.gpu_hang, "hang",
            "the job on the GPU timed out and the driver resets the GPU: drain and re-test it",
        )  # fmt: skip
    if kind == "reset":
        if event.detail == "VRAM lost":
            return _verdict(
                _NONFATAL, VendorAction.RESTART_APP, RootCause.gpu_hang, "reset-vram-lost",
                "the reset cleared the GPU's memory: every process on it lost its work",
            )  # fmt: skip
        return _verdict(_NONFATAL, VendorAction.IGNORE, RootCause.gpu_hang, "reset", "the driver reset the GPU")
    if kind in ("reset_failed", "fallen_off_bus"):
        return _verdict(
            _FATAL, VendorAction.REBOOT, RootCause.gpu_lost, kind.replace("_", "-"),
            "the GPU is unusable until the node reboots",
        )  # fmt: skip
    return _verdict(_NONFATAL, VendorAction.NONE, RootCause.gpu_ras, f"unknown-{kind}", f"{kind} report")


def describe(event: KernelEvent, where: str) -> str:
    """A finding's summary in the driver's own words: `amdgpu RAS: 1 uncorrectable error in UMC on gpu/n/3`."""
    driver = DRIVERS.get(event.vendor, event.vendor)
    detail = event.detail or event.kind
    kind, severity = event.kind, event.ras_severity
    if kind == "ras":
        if severity == "fatal":
            return f"{driver} RAS: fatal hardware error ({detail}) on {where}"
        count = event.error_count or 1
        plural = "s" if count != 1 else ""
        what = "poison consumption" if "poison consumption" in detail else f"{severity} error{plural}"
        return f"{driver} RAS: {count} {what} in {(event.ras_block or '?').upper()} on {where}"
    if kind == "hw_error":
        if detail.startswith("bad page threshold"):
            return f"{driver}: retired VRAM pages reached the {detail} on {where}: replace the GPU"
        if _is_app_error(event):
            return f"{driver}: the application's illegal access ({detail}) on {where}"
        return f"{driver}: {severity or 'unrated'} hardware error ({detail}) on {where}"
    if kind == "hang":
        if "CS_TIMEOUT" in detail:
            return f"{driver}: command submission timed out ({detail}) on {where}; the driver resets the device"
        if detail.startswith("MES"):
            return f"{driver}: the MES firmware stopped answering ({detail}) on {where}"
        if detail.endswith("soft recovered"):
            ring = detail.removesuffix(" soft recovered")
            return f"{driver}: {ring} timed out on {where} and recovered without a reset"
        return f"{driver}: {detail} timed out on {where}; the driver resets the GPU"
    if kind == "reset":
        if detail == "VRAM lost":
            return f"{driver}: VRAM lost in the reset of {where}: work running on it is gone"
        if "succeeded" in detail:
            return f"{driver}: {where} recovered: the driver's reset succeeded ({detail})"
        return f"{driver}: the driver is resetting {where} ({detail})"
    if kind == "reset_failed":
        unusable = "" if "NOT usable" in detail else ": the GPU is unusable"
        return f"{driver}: {detail} on {where}{unusable}"
    if kind == "fallen_off_bus":
        return f"{driver}: {where} lost from the bus"
    return f"{driver}: {detail} on {where}"
