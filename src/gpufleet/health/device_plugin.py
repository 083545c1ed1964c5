"""What the NVIDIA device plugin's log says about a node's GPUs: the one judgement of its events, for every door that
reads the log (`gpufleet triage`).

- An Xid the plugin saw (as NVML's Xid event, carrying only its code) is judged as the Xid policy judges a report
  that carries only its code (health.xid_rating.code_reading), whether or not the plugin ignored it.
- A double-bit ECC event is an uncorrectable ECC error, judged as health.gpu_memory judges one.
- A device the plugin marked unhealthy is out of the node's allocatable GPUs: pods cannot get it. Before v0.15 the
  plugin never marks it healthy again (server.go: "there is no way to recover from the Unhealthy state"): a warning
  whose fix is the cause's, then a restart of the plugin pod.
- Every device marked unhealthy because NVML's event wait failed: the node offers no GPU; NVML failing there is
  what a lost GPU or a broken driver looks like: critical.
- NVML init failing: health checks are off, so Xids go unseen: a warning.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.health.gpu_memory import MemoryReading, judge_memory
from gpufleet.health.xid_rating import code_reading
from gpufleet.model import Severity
from gpufleet.parsers.nvidia.device_plugin import PluginEvent

RESTART = (
    "then restart the device plugin pod so the kubelet sees the GPU again (`kubectl delete pod` on the node's "
    "nvidia-device-plugin-daemonset pod)"
)


@dataclass(frozen=True, slots=True)
class PluginIssue:
    severity: Severity
    code: str
    message: str
    fix: str


def judge_plugin_event(event: PluginEvent) -> PluginIssue | None:
    """The issue one event of the plugin's log raises; None for one that asks nothing (a single-bit ECC event)."""
    if event.kind == "xid" and event.xid is not None:
        reading = code_reading(event.xid)
        said = f"Xid {event.xid}" + (f" ({event.detail})" if event.detail else "")
        reason = reading.verdict.reason or "see `gpufleet xid explain`"
        if reading.by_line:
            reason = "what it needs depends on the driver's own line for it: read the node's kernel log"
        return PluginIssue(reading.severity, f"Xid {event.xid}", f"the device plugin saw {said}",
                           f"{reading.verdict.action.value}: {reason}")  # fmt: skip
    if event.kind == "ecc_dbe":
        (issue, *_) = judge_memory(MemoryReading(uncorrectable=1))
        return PluginIssue(issue.severity, issue.code, f"NVML reported a double-bit ECC event: {issue.message}",
                           issue.fix)  # fmt: skip
    if event.kind == "unhealthy":
        why = f" ({event.detail})" if event.detail and not event.detail.startswith("nvidia.com") else ""
        device = event.device or "a device"
        return PluginIssue(Severity.warning, "marked unhealthy",
                           f"the device plugin marked {device} unhealthy{why}: Kubernetes no longer allocates it",
                           "fix the fault it reported (the Xid or NVML error before this line), "
                           + RESTART)  # fmt: skip
    if event.kind == "all_unhealthy":
        return PluginIssue(Severity.critical, "all devices unhealthy",
                           f"the device plugin marked every GPU unhealthy: NVML failed ({event.detail})",
                           "run nvidia-smi on the node: a lost GPU (Xid 79) or a broken driver fails NVML for all; "
                           "drain the node and reboot it, " + RESTART)  # fmt: skip
    if event.kind == "checks_disabled":
        return PluginIssue(Severity.warning, "health checks disabled",
                           f"the device plugin could not initialise NVML ({event.detail}): its health checks are off",
                           "check the plugin's access to the driver (runtime class, /dev/nvidia*), "
                           + RESTART)  # fmt: skip
    return None
