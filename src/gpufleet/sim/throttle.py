"""NVML clock-event (throttle) reason bits, as nvmlDeviceGetCurrentClocksEventReasons returns them."""

from __future__ import annotations

from enum import IntFlag


class ClockEvent(IntFlag):
    GPU_IDLE = 0x1
    APPLICATIONS_CLOCKS_SETTING = 0x2
    SW_POWER_CAP = 0x4
    HW_SLOWDOWN = 0x8
    SYNC_BOOST = 0x10
    SW_THERMAL_SLOWDOWN = 0x20
    HW_THERMAL_SLOWDOWN = 0x40
    HW_POWER_BRAKE_SLOWDOWN = 0x80
    DISPLAY_CLOCK_SETTING = 0x100


# dcgm-exporter's `clock_event` label values for DCGM_EXP_CLOCK_EVENTS_COUNT.
CLOCK_EVENT_LABELS = {
    ClockEvent.GPU_IDLE: "gpu_idle",
    ClockEvent.APPLICATIONS_CLOCKS_SETTING: "clocks_setting",
    ClockEvent.SW_POWER_CAP: "power_cap",
    ClockEvent.HW_SLOWDOWN: "hw_slowdown",
    ClockEvent.SYNC_BOOST: "sync_boost",
    ClockEvent.SW_THERMAL_SLOWDOWN: "sw_thermal",
    ClockEvent.HW_THERMAL_SLOWDOWN: "hw_thermal",
    ClockEvent.HW_POWER_BRAKE_SLOWDOWN: "hw_power_brake",
}


def describe(bits: int) -> list[str]:
    return [label for flag, label in CLOCK_EVENT_LABELS.items() if bits & flag]
