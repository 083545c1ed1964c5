"""Kernel log lines in the driver's real text format, as `dmesg` prints them (`[seconds.micros] NVRM: ...`)."""

from __future__ import annotations

from gpufleet.catalog.xid import xid_message
from gpufleet.sources.kmsg_format import dmesg_line, format_xid

# Processes the twin names as Xid culprits: training ranks and the tools that poke GPUs.
PROCESS_NAMES = ("python", "pt_main_thread", "nvidia-smi", "dcgm-exporter")


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
