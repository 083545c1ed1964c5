"""The device plugin's events judged: an Xid as the Xid policy judges its code, a double-bit ECC event as
health.gpu_memory judges an uncorrectable error, a device out of the allocatable a warning, NVML failing for all a
critical."""

from __future__ import annotations

from gpufleet.health.device_plugin import judge_plugin_event
from gpufleet.health.xid_rating import code_reading
from gpufleet.model import Severity
from gpufleet.parsers.nvidia.device_plugin import PluginEvent


def _judge(kind: str, **fields: object) -> tuple[Severity, str] | None:
    issue = judge_plugin_event(PluginEvent(kind, 1, "", **fields))  # type: ignore[arg-type]
    return None if issue is None else (issue.severity, issue.code)


def test_an_xid_is_rated_as_its_code_alone_is() -> None:
    for xid in (13, 48, 79, 154):
        assert _judge("xid", xid=xid) == (code_reading(xid).severity, f"Xid {xid}")


def test_the_plugins_own_events() -> None:
    assert _judge("ecc_dbe") == (Severity.critical, "volatile uncorrectable ECC")
    assert _judge("ecc_sbe") is None
    assert _judge("unhealthy", device="GPU-1") == (Severity.warning, "marked unhealthy")
    assert _judge("all_unhealthy", detail="ERROR_GPU_IS_LOST") == (Severity.critical, "all devices unhealthy")
    assert _judge("checks_disabled", detail="x") == (Severity.warning, "health checks disabled")
