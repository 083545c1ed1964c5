"""A GPU's clocks held down, as one reading shows it (nvidia-smi `-q` "Clocks Event Reasons" / "Clocks Throttle
Reasons", `--query-gpu=clocks_event_reasons.*`, dcgmi dmon's DVCCTR bitmask): the one judgement of which active
reason is a fault and what to do, with the causes and actions the agent's GPU detector files when the same reasons
hold over time (health/detectors/gpu.py: thermal -> POWER_CAP_AND_TICKET, power brake -> CHECK_MECHANICALS).

The reasons are NVML's nvmlClocksEventReason* bits (catalog/data/clock_events.csv). Idle, applications clocks, the
software power cap, sync boost and display clocks are the GPU doing as configured: no fault. The hardware slowdowns
and the software thermal slowdown are: a warning (one reading cannot say how long it held; the agent's hold times
decide that on a live node). HW Power Brake Slowdown is the external PWR_BRAKE signal a server asserts (a PSU failed
or lost redundancy, or the BMC's power policy), HW Thermal Slowdown the GPU at its hardware temperature limit.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.model import RootCause


@dataclass(frozen=True, slots=True)
class ClockIssue:
    reason: str  # the reason's name as the parsers give it: hw_power_brake_slowdown, ...
    cause: RootCause
    message: str
    fix: str


_THERMAL_FIX = (
    "POWER_CAP_AND_TICKET: check the GPU's cooling (fans, airflow, inlet temperature: `nvidia-smi -q -d TEMPERATURE`), "
    "cap its power until it is fixed"
)
_ISSUES = {
    "hw_power_brake_slowdown": (
        RootCause.power_brake,
        "hardware power brake asserted by the system: clocks cut hard",
        "CHECK_MECHANICALS: the server asserts PWR_BRAKE (a failed or non-redundant PSU, the BMC's power policy, a "
        "GPU the platform does not support): check the PSUs and the BMC's event log",
    ),
    "hw_thermal_slowdown": (RootCause.thermal, "hardware thermal slowdown: the GPU is at its temperature limit",
                            _THERMAL_FIX),
    "sw_thermal_slowdown": (RootCause.thermal, "software thermal slowdown: GPU or memory temperature above its limit",
                            _THERMAL_FIX),
    "hw_slowdown": (
        RootCause.thermal,
        "hardware slowdown (thermal or power brake) engaged",
        "read which one (`nvidia-smi -q -d PERFORMANCE`): HW Thermal Slowdown is cooling, HW Power Brake Slowdown the "
        "server's power (PSUs, BMC)",
    ),
}  # fmt: skip


def judge_clock_reasons(active: list[str]) -> list[ClockIssue]:
    """The issues among the active reasons; the generic hw_slowdown only when no specific one explains it."""
    specific = {"hw_power_brake_slowdown", "hw_thermal_slowdown"} & set(active)
    out = []
    for reason in active:
        if reason not in _ISSUES or (reason == "hw_slowdown" and specific):
            continue
        cause, message, fix = _ISSUES[reason]
        out.append(ClockIssue(reason, cause, message, fix))
    return out
