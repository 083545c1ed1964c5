"""Kernel log lines in the driver's real text format, as `dmesg` prints them (`[seconds.micros] NVRM: ...`).

NVIDIA's follow open-gpu-kernel-modules; amdgpu's follow amdgpu_ras.c, amdgpu_job.c and amdgpu_device.c; habanalabs'
follow drivers/accel/habanalabs/common/device.c and command_submission.c. Each parses back through
`gpufleet.parsers.kernel.kmsg` to the event it stands for (tested as a round trip).
"""

from __future__ import annotations

from typing import Literal

from gpufleet.catalog.xid import xid_message
from gpufleet.errors import UserError
from gpufleet.parsers.kernel.format import bdf, dmesg_line, format_amdgpu, format_habanalabs, format_xid

# Processes the twin names as Xid culprits: training ranks and the tools that poke GPUs.
PROCESS_NAMES = ("python", "pt_main_thread", "nvidia-smi", "dcgm-exporter")
# amdgpu_ras.c ras_block_string and ras_mca_block_string: the blocks a RAS count can name
AMD_RAS_BLOCKS = (
    "umc", "sdma", "gfx", "mmhub", "athub", "pcie_bif", "hdp", "xgmi_wafl", "df", "smn", "sem", "mp0", "mp1", "fuse",
    "mca", "vcn", "jpeg", "mca_mp0", "mca_mp1", "mca_mpio", "mca_iohc",
)  # fmt: skip
AmdRasSeverity = Literal["correctable", "uncorrectable", "deferred", "fatal"]
AmdResetMethod = Literal["MODE1", "MODE2", "BACO", "PCI"]


def stamp(boot_seconds: float) -> str:
    """The `[ 3606.832215]` prefix dmesg prints: seconds since boot, right-aligned in 12 characters."""
    return dmesg_line("", boot_seconds).rstrip()


def xid_line(boot_seconds: float, pci_short: str, code: int, pid: int | None, process: str | None) -> str:
    """An Xid as dmesg shows it; with no process to blame the driver writes pid='<unknown>', name=<unknown>."""
    message = format_xid(pci_short, code, xid_message(code), pid=pid, process=process or "<unknown>")
    return dmesg_line(message, boot_seconds)


def fallen_off_bus_lines(boot_seconds: float, pci_short: str, uuid: str, serial: str) -> list[str]:
    """What a GPU dropping off the bus writes: identity lines, the Xid 79 line and the plain notice."""
    ts = stamp(boot_seconds)
    return [
        f"{ts} NVRM: GPU at PCI:{pci_short}: {uuid}",
        f"{ts} NVRM: GPU Board Serial Number: {serial}",
        f"{ts} NVRM: Xid (PCI:{pci_short}): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
        f"{ts} NVRM: GPU {pci_short}.0: GPU has fallen off the bus.",
    ]


def api_mismatch_lines(boot_seconds: float, client_version: str, kernel_version: str) -> list[str]:
    """nv.c's report when user-space and kernel-module driver versions differ, four NVRM lines."""
    ts = stamp(boot_seconds)
    return [
        f"{ts} NVRM: API mismatch: the client has the version {client_version}, but",
        f"{ts} NVRM: this kernel module has the version {kernel_version}.  Please",
        f"{ts} NVRM: make sure that this kernel module and all NVIDIA driver",
        f"{ts} NVRM: components have the same version.",
    ]


def carrier_message(netdev: str, up: bool) -> str:
    """The syslog line systemd-networkd writes when an IPoIB port loses or regains its link."""
    return f"systemd-networkd[1187]: {netdev}: {'Gained carrier' if up else 'lost carrier'}"


# --- AMD Instinct (amdgpu) -------------------------------------------------------------------------------------------


def _amd(boot_seconds: float, pci: str, message: str) -> str:
    return dmesg_line(format_amdgpu(pci, message), boot_seconds)


def amdgpu_ras_lines(
    boot_seconds: float,
    bdf_or_pci: str,
    block: str,
    severity: AmdRasSeverity,
    count: int,
    *,
    socket: int = 0,
    die: int = 0,
    event_id: int = 1,
) -> list[str]:
    """A RAS error count as an MI300-class GPU reports it (amdgpu_ras.c): `{id}socket: S, die: D, N new <severity>
    hardware errors detected in <block> block`, then the running total. `fatal` is the global fatal-error event
    (ERREVENT_ATHUB_INTERRUPT) before the uncorrectable count; the driver resets the GPU after it."""
    if block not in AMD_RAS_BLOCKS:
        raise UserError(f"unknown amdgpu RAS block {block!r}", fix=f"use one of: {', '.join(AMD_RAS_BLOCKS)}")
    if severity not in ("correctable", "uncorrectable", "deferred", "fatal"):
        raise UserError(f"unknown RAS severity {severity!r}", fix="use correctable, uncorrectable, deferred or fatal")
    if count < 1:
        raise UserError(f"a RAS report counts at least one error, not {count}", fix="pass count >= 1")
    where = f"{{{event_id}}}socket: {socket}, die: {die},"
    word = "uncorrectable" if severity == "fatal" else severity
    tail = ", no user action is needed" if severity == "correctable" else ""
    lines = (
        [f"{{{event_id}}}uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT) detected!"]
        if severity == "fatal"
        else []
    )
    lines += [
        f"{where} {count} new {word} hardware errors detected in {block} block{tail}",
        f"{where} {count} {word} hardware errors detected in total in {block} block{tail}",
    ]
    return [_amd(boot_seconds + i * 1e-5, bdf_or_pci, line) for i, line in enumerate(lines)]


def amdgpu_hang_lines(
    boot_seconds: float,
    bdf_or_pci: str,
    *,
    ring: str = "gfx_0.0.0",
    signaled: int = 57638,
    process: str = "python3",
    pid: int = 4242,
    method: AmdResetMethod = "MODE1",
    vram_lost: bool = True,
    reset_count: int = 1,
) -> list[str]:
    """A job timeout and the reset that recovers it (amdgpu_job.c, amdgpu_device.c): the ring timeout and its
    process, `GPU reset begin!`, the reset method, `GPU reset succeeded, trying to resume`, VRAM lost (a full reset
    loses it), `GPU reset(N) succeeded!`."""
    t = boot_seconds
    lines = [
        _amd(t, bdf_or_pci, f"ring {ring} timeout, signaled seq={signaled}, emitted seq={signaled + 2}"),
        _amd(t + 1e-5, bdf_or_pci, f" Process {process} pid {pid} thread {process} pid {pid}"),
        _amd(t + 0.25, bdf_or_pci, "GPU reset begin!. Source:  1"),
        _amd(t + 0.4, bdf_or_pci, f"{method} reset"),
        _amd(t + 3.1, bdf_or_pci, "GPU reset succeeded, trying to resume"),
    ]
    if vram_lost:
        lines.append(_amd(t + 3.1002, bdf_or_pci, "VRAM is lost due to GPU reset!"))
    lines.append(_amd(t + 3.9, bdf_or_pci, f"GPU reset({reset_count}) succeeded!"))
    return lines


def amdgpu_reset_failed_lines(
    boot_seconds: float, bdf_or_pci: str, *, error: int = -110, reset_count: int = 1, lost_from_bus: bool = False
) -> list[str]:
    """A reset that does not bring the GPU back (amdgpu_device.c): after `GPU reset begin!`, either the MODE1 reset
    and `GPU reset(N) failed`, or (`lost_from_bus`) the health check finding the device gone from the bus; then
    `GPU reset end with ret = E` (-19, ENODEV, for a lost device)."""
    if error >= 0:
        raise UserError(f"a failed reset ends with a negative errno, not {error}", fix="pass e.g. error=-110")
    t = boot_seconds
    lines = [_amd(t, bdf_or_pci, "GPU reset begin!. Source:  1")]
    if lost_from_bus:
        lines += [
            _amd(t + 0.5, bdf_or_pci, "device lost from bus!"),
            _amd(t + 0.6, bdf_or_pci, "GPU reset end with ret = -19"),
        ]
        return lines
    lines.append(_amd(t + 0.2, bdf_or_pci, "MODE1 reset"))
    lines.append(_amd(t + 5.0, bdf_or_pci, f"GPU reset({reset_count}) failed"))
    lines.append(_amd(t + 5.0001, bdf_or_pci, f"GPU reset end with ret = {error}"))
    return lines


# --- Intel Gaudi (habanalabs) -----------------------------------------------------------------------------------------


def _hl(boot_seconds: float, pci: str, message: str, hl_index: int | None) -> str:
    """One habanalabs line; `hl_index` names the device hlN as the out-of-tree driver does (its PCI address is then
    known to a reader only from the device's boot lines, `habanalabs_boot_lines`), else by its PCI address."""
    return dmesg_line(format_habanalabs(pci, message, hl_index=hl_index), boot_seconds)


def habanalabs_boot_lines(
    boot_seconds: float, bdf_or_pci: str, hl_index: int | None = None, *, asic: str = "GAUDI2", dram_gb: int = 96
) -> list[str]:
    """The end of a device's bring-up (device.c hl_device_init): `Found GAUDI2 device with 96GB DRAM`, then
    `Successfully added device <bdf> to habanalabs driver`, which ties an hlN name to its PCI address."""
    return [
        _hl(boot_seconds, bdf_or_pci, f"Found {asic} device with {dram_gb}GB DRAM", hl_index),
        _hl(
            boot_seconds + 1.2,
            bdf_or_pci,
            f"Successfully added device {bdf(bdf_or_pci)} to habanalabs driver",
            hl_index,
        ),
    ]


def habanalabs_reset_lines(boot_seconds: float, bdf_or_pci: str, hl_index: int | None = None) -> list[str]:
    """A hard reset that brought the device back (device.c hl_device_reset)."""
    return [
        _hl(boot_seconds, bdf_or_pci, "Going to reset device", hl_index),
        _hl(boot_seconds + 14.0, bdf_or_pci, f"Successfully finished resetting the {bdf(bdf_or_pci)} device", hl_index),
    ]


def habanalabs_reset_failed_lines(
    boot_seconds: float, bdf_or_pci: str, hl_index: int | None = None, *, busy_mask: int = 0x1F
) -> list[str]:
    """A hard reset after which the engines stay busy: the device is left unusable (device.c)."""
    name = bdf(bdf_or_pci)
    return [
        _hl(boot_seconds, bdf_or_pci, "Going to reset device", hl_index),
        _hl(boot_seconds + 14.0, bdf_or_pci, f"{name} device is not idle after reset (mask {busy_mask:#x})", hl_index),
        _hl(boot_seconds + 14.0001, bdf_or_pci, f"{name} Failed to reset! Device is NOT usable", hl_index),
    ]


def habanalabs_critical_lines(
    boot_seconds: float, bdf_or_pci: str, hl_index: int | None = None, *, repeated: bool = False
) -> list[str]:
    """The device CPU stopped answering (device.c hl_device_heartbeat, the CRITICL_FW_ERR path): `Device heartbeat
    failed!` and a hard reset. `repeated`: the second fatal error in a row, after which the driver gives up
    (`Consecutive fatal errors, stopping hard reset`) and the device is unusable."""
    name = bdf(bdf_or_pci)
    lines = [
        _hl(boot_seconds, bdf_or_pci, "Device heartbeat failed! PCI link is healthy", hl_index),
        _hl(boot_seconds + 1e-4, bdf_or_pci, "Going to reset device", hl_index),
    ]
    if repeated:
        lines += [
            _hl(boot_seconds + 12.0, bdf_or_pci, f"{name} Consecutive fatal errors, stopping hard reset", hl_index),
            _hl(boot_seconds + 12.0001, bdf_or_pci, f"{name} Failed to reset! Device is NOT usable", hl_index),
        ]
    else:
        lines.append(
            _hl(boot_seconds + 14.0, bdf_or_pci, f"Successfully finished resetting the {name} device", hl_index)
        )
    return lines


def habanalabs_cs_timeout_lines(
    boot_seconds: float, bdf_or_pci: str, hl_index: int | None = None, *, sequence: int = 1187, timeout_s: int = 30
) -> list[str]:
    """A command submission that never finished (command_submission.c cs_timedout, the TDR) and the reset after it."""
    return [
        _hl(
            boot_seconds,
            bdf_or_pci,
            f"Command submission {sequence} has not finished in {timeout_s} seconds!",
            hl_index,
        ),
        *habanalabs_reset_lines(boot_seconds + 0.01, bdf_or_pci, hl_index),
    ]
