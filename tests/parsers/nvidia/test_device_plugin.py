"""The NVIDIA device plugin's log lines, in the wording of each version (NVIDIA/k8s-device-plugin: v0.6-v0.13
nvidia.go's log.Printf, v0.14+ internal/rm/health.go's klog and server.go's ListAndWatch).

Fixtures (tests/captures/device_plugin/): xid69_old_wording_k8sdp189.log is a real capture (its .source.txt);
klog_xid79_and_skipped.log is written from v0.17's health.go format strings (klog's `I0312 ...] ` prefix, NVML's
event struct as `%+v` prints it), no real capture of that wording being stored yet."""

from __future__ import annotations

import pytest

from gpufleet.parsers.nvidia.device_plugin import parse_plugin_log, read_line
from tests.conftest import CAPTURES

DATA = CAPTURES / "device_plugin"


@pytest.mark.parametrize(
    ("line", "kind", "device", "xid"),
    [
        ("2020/08/10 19:09:42 XidCriticalError: Xid=69 on Device=GPU-7540a9b3, the device will go unhealthy.",
         "xid", "GPU-7540a9b3", 69),
        ("XidCriticalError: Xid=48 on GPU=GPU-1, the device will go unhealthy.", "xid", "GPU-1", 48),
        ("XidCriticalError: Xid=79, All devices will go unhealthy.", "xid", None, 79),
        ("I0312 1 health.go:293] XidCriticalError: Xid=79 on Device=MIG-5e3b; marking device as unhealthy.",
         "xid", "MIG-5e3b", 79),
        ("E0101 x] XidCriticalError: Xid=94 on Device=0, uuid=GPU-9f, the device will go unhealthy.", "xid", "GPU-9f",
         94),
        ("Skipping event {Device:{Handle:0x1} EventType:8 EventData:13 GpuInstanceId:1 ComputeInstanceId:1}", "xid",
         None, 13),
        ("Skipping non-nvmlEventTypeXidCriticalError event: {Device:{Handle:0x1} EventType:2 EventData:0 "
         "GpuInstanceId:4294967295 ComputeInstanceId:4294967295}", "ecc_dbe", None, None),
        ("Skipping non-nvmlEventTypeXidCriticalError event: {Device:{Handle:0x1} EventType:1 EventData:0}", "ecc_sbe",
         None, None),
        ("'nvidia.com/gpu' device marked unhealthy: GPU-2f6d", "unhealthy", "GPU-2f6d", None),
        ("Marking device GPU-2f6d as unhealthy: ERROR_UNKNOWN", "unhealthy", "GPU-2f6d", None),
        ("Error waiting for event: ERROR_GPU_IS_LOST; marking all devices as unhealthy", "all_unhealthy", None, None),
        ("Failed to determine uuid for event {}: ERROR_UNKNOWN; Marking all devices as unhealthy.", "all_unhealthy",
         None, None),
        ("NVML init failed: ERROR_LIBRARY_NOT_FOUND; health checks disabled", "checks_disabled", None, None),
    ],
)  # fmt: skip
def test_each_wording(line: str, kind: str, device: str | None, xid: int | None) -> None:
    event = read_line(1, line)
    assert event is not None and (event.kind, event.device, event.xid) == (kind, device, xid)


def test_a_processing_event_is_left_to_the_line_naming_its_device_and_noise_is_nothing() -> None:
    assert read_line(1, "Processing event {Device:{Handle:0x1} EventType:8 EventData:79 GpuInstanceId:1}") is None
    assert read_line(1, "I0312 health.go:140] Health monitoring started for 8 devices") is None


def test_both_captures() -> None:
    old = parse_plugin_log((DATA / "xid69_old_wording_k8sdp189.log").read_text())
    assert [(e.kind, e.xid) for e in old] == [("xid", 69), ("unhealthy", None)]
    new = parse_plugin_log((DATA / "klog_xid79_and_skipped.log").read_text())
    assert [(e.kind, e.xid) for e in new] == [("ecc_sbe", None), ("xid", 13), ("xid", 79), ("unhealthy", None)]
