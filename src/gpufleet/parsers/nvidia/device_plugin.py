"""The NVIDIA Kubernetes device plugin's log: the Xids it saw, the NVML events it skipped and the devices it marked
unhealthy (and so took out of the node's allocatable `nvidia.com/gpu`), as typed events.

The lines, by version (NVIDIA/k8s-device-plugin; each may carry klog's `I0201 12:00:00.123456  1 health.go:151] `
or the log package's `2021/02/01 12:00:00 ` prefix):
- v0.14+ (internal/rm/health.go, klog): `XidCriticalError: Xid=79 on Device=GPU-...; marking device as unhealthy.`,
  `Processing event {Device:{Handle:0x..} EventType:8 EventData:79 GpuInstanceId:.. ComputeInstanceId:..}`,
  `Skipping non-nvmlEventTypeXidCriticalError event: {... EventType:2 EventData:0 ...}`, `Skipping event {...}` (an
  Xid the plugin ignores: 13, 31, 43, 45, 68, 109 and DP_DISABLE_HEALTHCHECKS), `Error waiting for event: ...;
  marking all devices as unhealthy`, `Marking device GPU-... as unhealthy: ...`, `unable to get device handle from
  UUID: ...; marking it as unhealthy`, `Could not determine device placement for ...; marking it unhealthy.`,
  `NVML init failed: ...; health checks disabled`, and from the plugin's ListAndWatch (server.go)
  `'nvidia.com/gpu' device marked unhealthy: GPU-...`.
- v0.9-v0.13 (cmd/nvidia-device-plugin/nvidia.go, log.Printf): `XidCriticalError: Xid=79 on Device=GPU-..., the
  device will go unhealthy.` (`on GPU=` in the oldest), `XidCriticalError: Xid=48, All devices will go unhealthy.`
NVML's event types (nvml.h): 0x1 single-bit ECC, 0x2 double-bit ECC, 0x4 P-state, 0x8 Xid critical error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Kind = Literal["xid", "ecc_dbe", "ecc_sbe", "skipped_event", "unhealthy", "all_unhealthy", "checks_disabled"]

_XID = re.compile(
    r"XidCriticalError: Xid=(?P<xid>\d{1,5})(?: on (?:Device|GPU)=(?P<device>[^\s,;]+)(?:, uuid=(?P<uuid>[^\s,;]+))?"
    r"|, (?P<all>All devices will go unhealthy)| on (?P<unknown>unknown device))?"
)
_EVENT = re.compile(
    r"(?P<what>Skipping non-nvmlEventTypeXidCriticalError event|Skipping event|Processing event):? "
    r"\{.*?EventType:(?P<type>\d+) EventData:(?P<data>\d+)"
)
_MARKED = re.compile(r"'(?P<resource>[\w./-]+)' device marked unhealthy: (?P<device>\S+)")
_MARKING = re.compile(
    r"(?:Marking device (?P<a>\S+) as unhealthy: (?P<why_a>.*)"
    r"|unable to (?:get device handle from UUID|determine the supported events for (?P<b>\S+?)): (?P<why_b>.*?);"
    r" marking it as unhealthy"
    r"|Could not determine device placement for (?P<c>\S+?): (?P<why_c>.*?); marking it unhealthy)"
)
_ALL = re.compile(
    r"(?P<why>(?:Error waiting for event|Failed to determine uuid for event).*?);? [Mm]arking all devices"
)
_DISABLED = re.compile(r"NVML init failed: (?P<why>.*?); health checks disabled")
_XID_EVENT = 8
_DBE_EVENT = 2
_SBE_EVENT = 1


@dataclass(frozen=True, slots=True)
class PluginEvent:
    kind: Kind
    line: int
    raw: str
    device: str | None = None  # GPU-... or MIG-..., as the plugin names it
    xid: int | None = None
    detail: str = ""


def read_line(number: int, raw: str) -> PluginEvent | None:
    """The event a line of the plugin's log reports, or None."""
    if "Xid" in raw:
        match = _XID.search(raw)
        if match is not None:
            device = match["uuid"] or match["device"]
            detail = "all devices" if match["all"] else "unknown device" if match["unknown"] else ""
            return PluginEvent("xid", number, raw, device, int(match["xid"]), detail)
    if "event" in raw:
        event = _EVENT.search(raw)
        if event is not None:
            kind, data = int(event["type"]), int(event["data"])
            if kind == _XID_EVENT:
                if event["what"] == "Processing event":
                    return None  # its `XidCriticalError: Xid=N on Device=...` line follows and names the device
                return PluginEvent("xid", number, raw, None, data, "ignored by the plugin")
            if kind & _DBE_EVENT:
                return PluginEvent("ecc_dbe", number, raw)
            if kind & _SBE_EVENT:
                return PluginEvent("ecc_sbe", number, raw)
            return PluginEvent("skipped_event", number, raw, detail=f"NVML event type {kind}")
    if "nhealthy" in raw:
        marked = _MARKED.search(raw)
        if marked is not None:
            return PluginEvent("unhealthy", number, raw, marked["device"], detail=marked["resource"])
        marking = _MARKING.search(raw)
        if marking is not None:
            device = marking["a"] or marking["b"] or marking["c"]
            why = marking["why_a"] or marking["why_b"] or marking["why_c"] or ""
            return PluginEvent("unhealthy", number, raw, device, detail=why.strip())
        every = _ALL.search(raw)
        if every is not None:
            return PluginEvent("all_unhealthy", number, raw, detail=every["why"].strip())
    if "health checks disabled" in raw:
        disabled = _DISABLED.search(raw)
        if disabled is not None:
            return PluginEvent("checks_disabled", number, raw, detail=disabled["why"].strip())
    return None


def parse_plugin_log(text: str, source: str = "device plugin log") -> list[PluginEvent]:
    """Every event in the log, in line order."""
    return [e for n, line in enumerate(text.splitlines(), start=1) if (e := read_line(n, line)) is not None]
