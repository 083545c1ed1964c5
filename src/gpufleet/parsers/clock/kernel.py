"""The kernel's clock discipline state, as adjtimex(2) / ntp_adjtime(3) return it (read-only, modes 0).

Grounded in the Linux man page adjtimex(2) and include/uapi/linux/timex.h: `status` bit STA_UNSYNC (0x0040) says
the clock is not synchronised (set by the kernel when maxerror passes 16 s, cleared by the NTP daemon that
disciplines it); `maxerror` and `esterror` are in microseconds; `offset` is in microseconds, or nanoseconds when
STA_NANO (0x2000) is set; the return value is the clock state, TIME_ERROR (5) when the clock is not synchronised.
The kernel does not know the clock's true offset (its `offset` is what the daemon still has it slew), so none is
reported from it: `maxerror` is the bound, `esterror` the estimate.
"""

from __future__ import annotations

from gpufleet.model.observe import ClockFact

STA_UNSYNC = 0x0040
STA_NANO = 0x2000
TIME_ERROR = 5
MAXERROR_UNSYNC_US = 16_000_000  # NTP_PHASE_LIMIT: the kernel sets STA_UNSYNC past it
STATES = {0: "TIME_OK", 1: "TIME_INS", 2: "TIME_DEL", 3: "TIME_OOP", 4: "TIME_WAIT", 5: "TIME_ERROR"}


def clock_from_timex(state: int, status: int, maxerror_us: int, esterror_us: int, time: float) -> ClockFact:
    """The kernel's view: synchronised unless STA_UNSYNC or TIME_ERROR; maxerror as the error bound."""
    unsync = bool(status & STA_UNSYNC) or state == TIME_ERROR
    flags = [name for bit, name in ((STA_UNSYNC, "STA_UNSYNC"), (STA_NANO, "STA_NANO")) if status & bit]
    return ClockFact(
        time=time,
        source="kernel",
        synchronised=not unsync,
        error_s=max(0, maxerror_us) * 1e-6,
        leap=" ".join([STATES.get(state, f"state {state}"), *flags, f"esterror {max(0, esterror_us)} us"])[:256],
    )
