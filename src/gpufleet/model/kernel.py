"""Kernel-log fault reports: what the kernel-log parser produces and the health policy and detectors read.

They live in the model so consumers never import a concrete source to speak about a kernel event.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

# NVIDIA's: xid, sxid, fallen_off_bus, reset_required, api_mismatch, init_failed (the driver could not initialise a
# GPU: `RmInitAdapter failed`, no Xid). Every vendor's driver (amdgpu, habanalabs):
# ras (a RAS hardware-error count in a block), hang (a ring or command-submission timeout), reset (the driver reset
# the device and it came back), reset_failed (it did not: the device is unusable), hw_error (a critical hardware or
# firmware error event).
EventKind = Literal[
    "xid",
    "sxid",
    "fallen_off_bus",
    "reset_required",
    "api_mismatch",
    "init_failed",
    "ras",
    "hang",
    "reset",
    "reset_failed",
    "hw_error",
]
RasSeverity = Literal["uncorrectable", "correctable", "deferred", "fatal"]
NVL5_XIDS = frozenset(range(144, 151))  # NVLink5 errors whose action depends on the unit and status decode
RECOVERY_XID = 154  # the driver announcing the recovery action the GPU needs


@dataclass(frozen=True, slots=True)
class Nvl5Detail:
    """The decoded head of an NVLink5 Xid (144-150): unit, the driver's own severity word and the register
    words."""

    unit: str
    fatal: bool
    xc: int
    instance: int
    link: int
    words: tuple[int, ...]

    @property
    def intrinfo(self) -> int:
        return self.words[0]

    @property
    def error_status(self) -> int:
        return self.words[1] if len(self.words) > 1 else 0


@dataclass(frozen=True, slots=True)
class RecoveryChange:
    """Xid 154: the GPU's recovery action moved from one state to another (NVML's
    nvmlDeviceGpuRecoveryAction_t)."""

    from_code: int
    from_name: str
    to_code: int
    to_name: str


@dataclass(frozen=True, slots=True)
class SxidDetail:
    """An NVSwitch SXid line: which switch, its severity word, and the link it names.

    The driver follows a `Fatal, Link 63 ...` head with `Severity 1 Engine instance ...` and `Data {...}`
    lines for the same switch and code; those inherit the head's severity and link, and `continues_line`
    points at it.
    """

    switch: str
    fatal: bool | None
    link: int | None
    continues_line: int | None = None


@dataclass(frozen=True, slots=True)
class KernelEvent:
    """One GPU or NVSwitch fault reported by the kernel log."""

    kind: EventKind
    line: int  # 1-based line number of the event's first line
    raw: str
    message: str
    xid: int | None = None
    sxid: int | None = None
    pci: str | None = None  # normalised domain:bus:device
    wall_time: datetime | None = None
    uptime_s: float | None = None
    host: str | None = None
    pid: int | None = None
    process: str | None = None
    gpu_instance: int | None = None
    compute_instance: int | None = None
    root_xid: int | None = None
    known: bool = True  # False for an Xid code the catalog does not list
    gpu_uuid: str | None = None
    pci_device_id: str | None = None  # vendor:device from the fallen-off-the-bus report
    nvl5: Nvl5Detail | None = None
    recovery: RecoveryChange | None = None
    sxid_detail: SxidDetail | None = None
    gpc_tpc_sm: tuple[int, int, int] | None = None  # where a graphics exception hit (NVIDIA's WORKFLOW_XID_13)
    vendor: str = "nvidia"  # whose driver printed it: nvidia, amd (amdgpu), intel (habanalabs)
    ras_block: str | None = None  # amdgpu RAS block, lower case: umc, gfx, sdma, xgmi_wafl, ...
    ras_severity: RasSeverity | None = None
    error_count: int | None = None  # errors the line reports (RAS counts)
    detail: str | None = None  # the driver's own name for what happened: ring gfx_0.0.0, CS_TIMEOUT, CRITICL_HW_ERR

    @property
    def logged(self) -> float | None:
        """The wall time the line itself carries (Unix seconds), when it carries a plausible one (a syslog line has
        no year: a parser's guess before 1970 or past 2100 is no time at all)."""
        if self.wall_time is None:
            return None
        try:
            stamp = self.wall_time.timestamp()
        except (OverflowError, OSError, ValueError):
            return None
        return stamp if 0.0 <= stamp <= 4_102_444_800.0 else None

    @property
    def time(self) -> datetime | float | None:
        """Wall-clock time when the log gave one, else seconds since boot, else None."""
        return self.wall_time if self.wall_time is not None else self.uptime_s

    @property
    def code(self) -> int | None:
        return self.xid if self.kind == "xid" else self.sxid


def kernel_ident(node: str, event: KernelEvent) -> str:
    """A kernel-log report's identity on its node: the time the log gave the line (wall clock, or microseconds since
    boot from /dev/kmsg) and the line itself. The same line read again, by a restarted agent or from a rotated copy,
    has the same identity; two reports differ in one or the other."""
    stamp = event.wall_time.isoformat() if event.wall_time is not None else repr(event.uptime_s)
    digest = hashlib.sha256(f"{node}\0{stamp}\0{event.raw}".encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:32]
