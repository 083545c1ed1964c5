"""Kernel-log lines in the driver's own text, for the digital twin and for tests: the inverse of `kmsg`.

The Xid layout follows open-gpu-kernel-modules `krcReportXid`; the others follow the captures in the corpus.
What these functions write, `scan_kmsg` reads back field for field (tested as a round trip).
"""

from __future__ import annotations

from gpufleet.errors import UserError
from gpufleet.model.pci import normalise_pci


def _pci(pci: str) -> str:
    normal = normalise_pci(pci)
    if normal is None:
        raise UserError(f"not a PCI address: {pci!r}", fix="use domain:bus:device, e.g. 0000:3b:00")
    return normal


def format_xid(
    pci: str,
    xid: int,
    message: str,
    *,
    pid: int | None = None,
    process: str | None = None,
    gpu_instance: int | None = None,
    compute_instance: int | None = None,
    root_xid: int | None = None,
) -> str:
    """`NVRM: Xid (PCI:0000:3b:00[ GPU-I:01[ GPU-CI:00]]): 79, pid=1234, name=python, <message>`.

    Without a process the driver prints no pid/name at all; with a process but no pid it prints
    `pid='<unknown>'`.
    """
    attr = f"PCI:{_pci(pci)}"
    if gpu_instance is not None:
        attr += f" GPU-I:{gpu_instance:02d}"
        if compute_instance is not None:
            attr += f" GPU-CI:{compute_instance:02d}"
    root = f" caused by previous Xid {root_xid}" if root_xid is not None else ""
    if process is None and pid is None:
        return f"NVRM: Xid ({attr}): {xid}, {message}{root}"
    pid_text = str(pid) if pid is not None else "'<unknown>'"
    return f"NVRM: Xid ({attr}): {xid}, pid={pid_text}, name={process or '<unknown>'}, {message}{root}"


def format_sxid(switch: int, pci: str, sxid: int, message: str, *, fatal: bool) -> str:
    """`nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 63 LTSSM Fault Up`."""
    severity = "Fatal" if fatal else "Non-fatal"
    return f"nvidia-nvswitch{switch}: SXid (PCI:{_pci(pci)}.0): {sxid:05d}, {severity}, {message}"


def format_fallen_off_bus(pci: str, device_id: str = "10de:2330") -> list[str]:
    """The three-line probe-time report of a GPU the driver cannot reach (no Xid)."""
    return [
        f"NVRM: The NVIDIA GPU {_pci(pci)}.0",
        f"NVRM: (PCI ID: {device_id}) installed in this system has",
        "NVRM: fallen off the bus and is not responding to commands.",
    ]


def dmesg_line(message: str, uptime_s: float) -> str:
    """`[ 3606.832215] message`, as `dmesg` prints a record."""
    return f"[{uptime_s:12.6f}] {message}"


def bdf(pci: str) -> str:
    """`0000:1c:00.0`: a PCI address as amdgpu and habanalabs name their device (function included)."""
    return f"{_pci(pci)}.0"


def format_amdgpu(pci: str, message: str) -> str:
    """`amdgpu 0000:1c:00.0: <message>`: amdgpu's dev_info/dev_err (mainline kernels print no inner `amdgpu: `)."""
    return f"amdgpu {bdf(pci)}: {message}"


def format_habanalabs(pci: str, message: str, *, hl_index: int | None = None) -> str:
    """`habanalabs 0000:19:00.0: <message>` (the kernel's accel driver), or `habanalabs hl0: <message>` for the
    out-of-tree driver, which names its devices hlN."""
    device = f"hl{hl_index}" if hl_index is not None else bdf(pci)
    return f"habanalabs {device}: {message}"
