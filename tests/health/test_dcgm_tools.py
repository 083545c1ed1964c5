"""dmon samples and discovery listings judged by the homes of their fault families."""

from __future__ import annotations

from gpufleet.health.dcgm_tools import judge_discovery, judge_dmon
from gpufleet.model import Severity
from gpufleet.parsers.nvidia.dcgmi_tools import DiscoveredGpu, DiscoveryReport, DmonReport


def _dmon(**fields: str) -> list[tuple[str, Severity]]:
    report = DmonReport(fields=list(fields), samples={"GPU 0": [dict(fields)]})
    return [(i.code, i.severity) for i in judge_dmon(report)]


def test_dmon_values() -> None:
    assert _dmon(XIDER="0", EDVTL="0", RRF="0", RRP="0", DVCCTR="1") == []
    assert _dmon(XIDER="48") == [("Xid 48", Severity.critical)]
    assert _dmon(EDVTL="3") == [("volatile uncorrectable ECC", Severity.critical)]
    assert ("row remap failure", Severity.critical) in _dmon(RRF="1")
    assert _dmon(DVCCTR="128") == [("hw_power_brake_slowdown", Severity.warning)]
    assert _dmon(TMPTR="N/A", XIDER="N/A") == []


def test_discovery_statuses() -> None:
    def judged(*info: str) -> list[tuple[str, Severity]]:
        return [(i.code, i.severity) for i in judge_discovery(DiscoveryReport([DiscoveredGpu(1, list(info))], 1))]

    assert judged("Name: NVIDIA H100", "PCI Bus ID: 00000000:1B:00.0") == []
    assert judged("Status: LOST", "Name: NVIDIA H100 (last known)") == [("GPU lost", Severity.critical)]
    assert judged("Status: DETACHED") == [("GPU detached", Severity.warning)]
    assert judged("Error: Cannot get device attributes for GPU.", "Return: x") == [
        ("attributes unreadable", Severity.critical)
    ]
    assert judged("Name: <<<NULL>>>") == [("blank attributes", Severity.warning)]
    assert [i.code for i in judge_discovery(DiscoveryReport([], 2, not_all_active=True))] == ["GPUs not active"]
