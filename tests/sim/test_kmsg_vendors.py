"""What the twin writes for an AMD or Gaudi fault, the agent's parser reads back as the event it stands for."""

from __future__ import annotations

import pytest

from gpufleet.errors import UserError
from gpufleet.model.kernel import KernelEvent
from gpufleet.parsers.kernel.framing import split_frame
from gpufleet.parsers.kernel.kmsg import KmsgParser, parse_kmsg
from gpufleet.sim import kmsg

BDF = "0000:1c:00.0"
PCI = "0000:1c:00"


def kinds(events: list[KernelEvent]) -> list[tuple[str, str | None]]:
    return [(e.kind, e.detail) for e in events]


@pytest.mark.parametrize("severity", ["correctable", "uncorrectable", "deferred"])
@pytest.mark.parametrize("block", ["umc", "gfx", "xgmi_wafl"])
def test_ras_lines_round_trip(block: str, severity: str) -> None:
    lines = kmsg.amdgpu_ras_lines(812.5, BDF, block, severity, 3, socket=1, die=2)  # type: ignore[arg-type]
    assert all(line.startswith("[  812.5") and f"amdgpu {BDF}: {{1}}socket: 1, die: 2," in line for line in lines)
    [event] = parse_kmsg("\n".join(lines))  # the running total that follows is no second event
    assert (event.kind, event.vendor, event.pci) == ("ras", "amd", PCI)
    assert (event.ras_block, event.ras_severity, event.error_count) == (block, severity, 3)
    assert event.uptime_s == pytest.approx(812.5)


def test_fatal_ras_lines_carry_the_global_event_and_the_count() -> None:
    events = parse_kmsg("\n".join(kmsg.amdgpu_ras_lines(10.0, PCI, "gfx", "fatal", 1)))
    assert [(e.kind, e.ras_block, e.ras_severity) for e in events] == [
        ("ras", "athub", "fatal"),
        ("ras", "gfx", "uncorrectable"),
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("vram", "uncorrectable", 1), "unknown amdgpu RAS block"),
        (("umc", "double-bit", 1), "unknown RAS severity"),
        (("umc", "uncorrectable", 0), "at least one error"),
    ],
)
def test_ras_lines_refuse_what_the_driver_never_prints(args: tuple[str, str, int], message: str) -> None:
    with pytest.raises(UserError, match=message):
        kmsg.amdgpu_ras_lines(1.0, BDF, *args)  # type: ignore[arg-type]


def test_hang_lines_round_trip() -> None:
    lines = kmsg.amdgpu_hang_lines(300.0, BDF, ring="sdma0", method="BACO", reset_count=4)
    events = parse_kmsg("\n".join(lines))
    assert kinds(events) == [
        ("hang", "ring sdma0"),
        ("reset", "reset begin"),
        ("reset", "BACO reset"),
        ("reset", "succeeded"),
        ("reset", "VRAM lost"),
        ("reset", "succeeded"),
    ]
    assert {e.pci for e in events} == {PCI}
    assert events[-1].message == "GPU reset(4) succeeded!"
    times = [split_frame(line).uptime_s for line in lines]
    assert times == sorted(times)  # in the order the driver prints them
    quiet = parse_kmsg("\n".join(kmsg.amdgpu_hang_lines(300.0, BDF, vram_lost=False)))
    assert "VRAM lost" not in [e.detail for e in quiet]


def test_reset_failed_lines_round_trip() -> None:
    events = parse_kmsg("\n".join(kmsg.amdgpu_reset_failed_lines(50.0, BDF, error=-110, reset_count=2)))
    assert kinds(events) == [
        ("reset", "reset begin"),
        ("reset", "MODE1 reset"),
        ("reset_failed", "reset failed"),
        ("reset_failed", "reset failed"),
    ]
    assert [e.message for e in events[2:]] == ["GPU reset(2) failed", "GPU reset end with ret = -110"]
    lost = parse_kmsg("\n".join(kmsg.amdgpu_reset_failed_lines(50.0, BDF, lost_from_bus=True)))
    assert kinds(lost) == [
        ("reset", "reset begin"),
        ("fallen_off_bus", "lost from bus"),
        ("reset_failed", "reset failed"),
    ]
    with pytest.raises(UserError, match="negative errno"):
        kmsg.amdgpu_reset_failed_lines(50.0, BDF, error=0)


@pytest.mark.parametrize("hl_index", [None, 2])
def test_habanalabs_lines_round_trip(hl_index: int | None) -> None:
    parser = KmsgParser()
    events: list[KernelEvent] = []
    lines = [
        *kmsg.habanalabs_boot_lines(20.0, "0000:19:00.0", hl_index),
        *kmsg.habanalabs_cs_timeout_lines(900.0, "0000:19:00.0", hl_index),
        *kmsg.habanalabs_reset_lines(1000.0, "0000:19:00.0", hl_index),
        *kmsg.habanalabs_critical_lines(1100.0, "0000:19:00.0", hl_index),
        *kmsg.habanalabs_critical_lines(1200.0, "0000:19:00.0", hl_index, repeated=True),
        *kmsg.habanalabs_reset_failed_lines(1300.0, "0000:19:00.0", hl_index),
    ]
    for line in lines:
        events += parser.feed_line(line)
    # the boot lines tie hlN to its address, so every report lands on the device
    assert {(e.vendor, e.pci) for e in events} == {("intel", "0000:19:00")}
    assert kinds(events) == [
        ("hang", "CS_TIMEOUT"),
        ("reset", "DEVICE_RESET: reset begin"),
        ("reset", "DEVICE_RESET: succeeded"),
        ("reset", "DEVICE_RESET: reset begin"),
        ("reset", "DEVICE_RESET: succeeded"),
        ("hw_error", "CRITICL_FW_ERR: heartbeat failed"),
        ("reset", "DEVICE_RESET: reset begin"),
        ("reset", "DEVICE_RESET: succeeded"),
        ("hw_error", "CRITICL_FW_ERR: heartbeat failed"),
        ("reset", "DEVICE_RESET: reset begin"),
        ("reset_failed", "consecutive fatal errors"),
        ("reset_failed", "device NOT usable after reset"),
        ("reset", "DEVICE_RESET: reset begin"),
        ("reset_failed", "device is not idle after reset"),
        ("reset_failed", "device NOT usable after reset"),
    ]
    device = f"hl{hl_index}" if hl_index is not None else "0000:19:00.0"
    assert all(f"habanalabs {device}: " in line for line in lines)


def test_an_hl_device_without_its_boot_lines_is_named_in_the_detail() -> None:
    [begin, done] = parse_kmsg("\n".join(kmsg.habanalabs_reset_lines(5.0, "0000:19:00.0", 4)))
    assert (begin.pci, begin.detail) == (None, "DEVICE_RESET: reset begin (hl4)")
    assert done.pci == "0000:19:00"  # the line names its address, and the parser learns it


def test_generators_refuse_a_bad_address() -> None:
    with pytest.raises(UserError, match="not a PCI address"):
        kmsg.habanalabs_reset_lines(1.0, "accel0")
