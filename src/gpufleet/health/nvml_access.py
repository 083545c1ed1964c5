"""When nvidia-smi (NVML) cannot run at all, or cannot reach one GPU: what the one line it prints instead of its
output means, how bad it is, and what to do. The one judgement of these lines, for every door that reads them
(`gpufleet triage` of a pasted nvidia-smi, whichever of its views was asked for).

What the lines are (nvidia-smi prints NVML's error string, `nvmlErrorString`, after its own words):
- `Failed to initialize NVML: <error>`: `nvmlInit` failed. NVML_ERROR_LIB_RM_VERSION_MISMATCH (18, "RM detects a
  driver/library version mismatch", printed `Driver/library version mismatch`): the loaded kernel module is not the
  version of the user-space driver (a driver changed without a reboot; the kernel log says `NVRM: API mismatch`).
  NVML_ERROR_DRIVER_NOT_LOADED (9), NVML_ERROR_NO_PERMISSION (4, `Insufficient Permissions`), NVML_ERROR_UNKNOWN
  (999, `Unknown Error`: inside a container, most often the container lost its access to /dev/nvidia*, NVIDIA
  container toolkit's "NVML: Unknown Error" after a systemd daemon-reload on cgroup v1).
- `NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA
  driver is installed and running.`: no kernel module answers (not loaded, or built for another kernel).
- `No devices were found`: NVML initialised but counts no GPU (the driver took none: not on the bus, or each failed
  to initialise, `NVRM: RmInitAdapter failed` in the kernel log; or a container given none).
- `Unable to determine the device handle for GPU <bus id>: <error>`: one GPU's handle failed. `Unknown Error` and
  `GPU is lost.  Reboot the system to recover this GPU` (NVML_ERROR_GPU_IS_LOST, 15: "The GPU has fallen off the bus
  or has otherwise become inaccessible") are a GPU lost to the driver; `GPU requires reset` (NVML_ERROR_RESET_REQUIRED,
  16) one that needs a reset first.
The meaning and fix of a driver/library mismatch and of a driver that is not loaded are the setup-error catalog's
(catalog/data/setup_errors.yaml), which triage also reads them from in an application's log.
Sources: nvml.h `nvmlReturn_t` (its comments quoted above, as vendored by NVIDIA/go-nvml), NVIDIA's Xid catalog
(Xid 79 "GPU has fallen off the bus": reboot the node, RMA if it repeats), the NVIDIA container toolkit's
troubleshooting page ("Failed to initialize NVML: Unknown Error" in containers), nvidia-smi 450-580 output.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpufleet.catalog.setup_errors import setup_error
from gpufleet.model import Severity


@dataclass(frozen=True, slots=True)
class AccessIssue:
    severity: Severity
    code: str
    message: str
    fix: str


_LOST_FIX = (
    "drain the node and reboot it (NVIDIA: a lost GPU is recovered by a reboot); before that, read `dmesg` for "
    "Xid 79 / `fallen off the bus` and PCIe AER errors on its slot; replace the GPU if it is lost again"
)
_RESET_FIX = (
    "drain the node, then reset the GPU (`nvidia-smi -r -i <id>`) or reboot; check `dmesg` for the Xid that led "
    "here (119, 154)"
)
# (pattern on the whole line, lower case) -> (severity, code, what it means, fix), first match wins
_FAILURES: tuple[tuple[re.Pattern[str], Severity, str, str, str], ...] = (
    (
        re.compile(r"driver/library version mismatch|rm version mismatch"),
        Severity.critical,
        "driver/library version mismatch",
        setup_error("nvml-version-mismatch").cause,
        setup_error("nvml-version-mismatch").fix,
    ),
    (
        re.compile(r"couldn't communicate with the nvidia driver|driver not loaded"),
        Severity.critical,
        "driver not loaded",
        setup_error("driver-not-loaded").cause,
        setup_error("driver-not-loaded").fix,
    ),
    (
        re.compile(r"gpu is lost"),
        Severity.critical,
        "GPU is lost",
        "NVML reports a GPU lost (fallen off the bus or otherwise inaccessible)",
        _LOST_FIX,
    ),
    (
        re.compile(r"no devices were found"),
        Severity.critical,
        "no devices found",
        "the NVIDIA driver has no GPU: none is on the bus, or each failed to initialise",
        "check `lspci -d 10de:` (a GPU missing there: reseat or power it, check the BIOS); if the GPUs are listed, "
        "`dmesg` says why the driver did not take them (`RmInitAdapter failed`, `fallen off the bus`): reboot, and "
        "replace a GPU that stays missing. In a container: the runtime gave it no GPU",
    ),
    (
        re.compile(r"insufficient permissions|no permission"),
        Severity.warning,
        "insufficient permissions",
        "nvidia-smi may not open the GPU devices",
        "run it as root, or check the permissions of /dev/nvidia*",
    ),
    (
        re.compile(r"failed to initialize nvml"),
        Severity.critical,
        "NVML init failed",
        "NVML could not initialise: nothing can read or use the GPUs from here",
        "run nvidia-smi on the host: if it works there, the container lost its access to /dev/nvidia* (restart "
        "the pod or container; the NVIDIA container toolkit documents this after a systemd daemon-reload); if it "
        "fails on the host too, check `dmesg` for NVRM errors and reboot the node",
    ),
)


def judge_failure(line: str) -> AccessIssue:
    """The line nvidia-smi printed instead of any output."""
    low = line.lower()
    for pattern, severity, code, meaning, fix in _FAILURES:
        if pattern.search(low):
            return AccessIssue(severity, code, f"{meaning}: {line.strip()}", fix)
    return AccessIssue(Severity.critical, "nvidia-smi failed", f"nvidia-smi failed: {line.strip()}",
                       "check the driver: `dmesg | grep -i nvrm`, then reboot the node")  # fmt: skip


def judge_unreachable(pci: str, why: str) -> AccessIssue:
    """`Unable to determine the device handle for GPU <pci>: <why>`: the GPU at `pci` cannot be reached."""
    low = why.lower()
    if "permission" in low:
        return AccessIssue(Severity.warning, "insufficient permissions",
                           f"nvidia-smi may not open GPU {pci}: {why}", "run nvidia-smi as root")  # fmt: skip
    if "reset" in low:
        return AccessIssue(Severity.critical, "GPU requires reset",
                           f"GPU {pci} needs a reset before nvidia-smi can reach it: {why}", _RESET_FIX)  # fmt: skip
    return AccessIssue(
        Severity.critical,
        "GPU is lost",
        f"nvidia-smi cannot reach GPU {pci} ({why.strip() or 'no reason given'}): the GPU is lost to the driver "
        "(fallen off the bus or not answering)",
        _LOST_FIX,
    )
