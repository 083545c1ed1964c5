"""Faults on AMD and Gaudi devices, in their drivers' own words: amdgpu RAS errors, ring timeouts and resets, and
habanalabs command-submission timeouts, critical hardware events and failed resets. No Xid: that is NVIDIA's.

Each handler changes the twin as the real device behaves (an uncorrectable error wedges the device until a reset; a
hang is reset by the driver itself, which kills the work on it; a failed reset leaves the device unusable) and
writes the kernel lines the agent's parser reads through the one door.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import gpufleet.sim.kmsg as kmsg
from gpufleet.model import Gpu

if TYPE_CHECKING:
    from gpufleet.sim.fault_target import FaultTarget
    from gpufleet.sim.faults import InjectedFault

DEFAULT_RAS_BLOCK = "gfx"
# what each driver says when it loads after a reboot
BOOT_NOTICE = {
    "nvidia": "NVRM: loading NVIDIA UNIX x86_64 Kernel Module",
    "amd": "[drm] amdgpu kernel modesetting enabled.",
    "intel": "habanalabs: loading driver",
}


def _device(twin: FaultTarget, i: int) -> tuple[str, Gpu]:
    node = twin.cluster.nodes[int(twin.gpus.node_of[i])]
    return node.name, node.gpus[int(twin.gpus.index_on_node[i])]


def _fail_job(twin: FaultTarget, fault: InjectedFault, i: int, why: str) -> None:
    job = twin.training.job_holding(i)
    if job is not None:
        twin.stop_job(twin.cluster.job(job), why)
        fault.effects.append(f"job {job} failed")


def uncorrectable(twin: FaultTarget, fault: InjectedFault, i: int, block: str) -> None:
    """An uncorrectable error: amdgpu's RAS report for the block, or Gaudi's critical hardware-error event. The
    device answers but makes no progress until it is reset; the work on it is lost."""
    node, gpu = _device(twin, i)
    boot = twin.boot_seconds(node)
    if gpu.vendor == "amd":
        lines = kmsg.amdgpu_ras_lines(boot, gpu.pci_short, block, "uncorrectable", 1)
        twin.gpus.wedged[i] = True  # poisoned: no progress until the GPU is reset
    else:  # the device CPU stops answering and the driver resets the device: it comes back, the work is gone
        lines = kmsg.habanalabs_critical_lines(boot, gpu.pci_short)
    if block == "umc":  # memory: the counters a DBE raises (Gaudi reports it as a critical event)
        twin.gpus.double_bit_error(i)
    twin.write_kernel(node, lines, gpu=gpu.index, vendor=gpu.vendor, block=block)
    _fail_job(twin, fault, i, f"rank on {node} gpu {gpu.index} died: uncorrectable {block} error")


def hang(twin: FaultTarget, fault: InjectedFault, i: int) -> None:
    """A ring (amdgpu) or command-submission (habanalabs) timeout: the driver resets the device, which comes back,
    but what ran on it is gone (amdgpu says VRAM is lost)."""
    node, gpu = _device(twin, i)
    boot = twin.boot_seconds(node)
    if gpu.vendor == "amd":
        lines = kmsg.amdgpu_hang_lines(boot, gpu.pci_short)
    else:
        lines = kmsg.habanalabs_cs_timeout_lines(boot, gpu.pci_short)
    twin.write_kernel(node, lines, gpu=gpu.index, vendor=gpu.vendor)
    _fail_job(twin, fault, i, f"rank on {node} gpu {gpu.index} died: the driver reset the device after a hang")


def lost_lines(gpu: Gpu, boot_seconds: float) -> list[str]:
    """What a device that is gone for good writes: amdgpu's failed reset, habanalabs' "device is NOT usable"."""
    if gpu.vendor == "amd":
        return kmsg.amdgpu_reset_failed_lines(boot_seconds, gpu.pci_short)
    return kmsg.habanalabs_reset_failed_lines(boot_seconds, gpu.pci_short)


def handle(twin: FaultTarget, fault: InjectedFault, i: int) -> None:
    """A GPU fault on a device whose vendor is not NVIDIA (the scenario loader refused the ones it cannot have)."""
    kind = fault.type.value
    if kind == "ecc-dbe":
        uncorrectable(twin, fault, i, "umc")
    elif kind == "ras-error":
        uncorrectable(twin, fault, i, fault.block or DEFAULT_RAS_BLOCK)
    elif kind == "nvlink-errors":  # the scale-up fabric: Infinity Fabric's XGMI/WAFL block
        uncorrectable(twin, fault, i, "xgmi_wafl")
    elif kind == "gpu-hang":
        hang(twin, fault, i)
    else:
        raise ValueError(f"{kind} is not a vendor driver fault")
