"""The kernel's clock discipline state, as adjtimex(2) / ntp_adjtime(3) return it (read-only, modes 0).

Grounded in the Linux man page adjtimex(2), include/uapi/linux/timex.h and kernel/time/ntp.c, and in chrony's
sys_timex.c: `maxerror` and `esterror` are in microseconds; the kernel adds 500 us to `maxerror` every second on its
own and sets STA_UNSYNC (0x0040) once it passes NTP_PHASE_LIMIT (16 s), while a daemon that disciplines the clock
writes its own bound there at every update (chrony's set_sync_status: MOD_MAXERROR and MOD_ESTERROR at each clock
update). STA_UNSYNC itself is no verdict: chrony on Linux clears it only with its `rtcsync` directive, so a clock
chrony keeps to microseconds may still carry it (and the state TIME_ERROR that follows from it). So the clock is
synchronised while `maxerror` stays under 16 s, and not once it reaches it. The kernel does not know the clock's
true offset (its `offset` is what the daemon still has it slew): none is reported from it.
"""

from __future__ import annotations

from gpufleet.model.observe import ClockFact

STA_UNSYNC = 0x0040
STA_NANO = 0x2000
TIME_ERROR = 5
MAXERROR_UNSYNC_US = 16_000_000  # NTP_PHASE_LIMIT: the kernel sets STA_UNSYNC past it
STATES = {0: "TIME_OK", 1: "TIME_INS", 2: "TIME_DEL", 3: "TIME_OOP", 4: "TIME_WAIT", 5: "TIME_ERROR"}


def clock_from_timex(state: int, status: int, maxerror_us: int, esterror_us: int, time: float) -> ClockFact:
    """The kernel's view: synchronised while a daemon keeps `maxerror` under 16 s; maxerror as the error bound."""
    unsync = maxerror_us >= MAXERROR_UNSYNC_US
    flags = [name for bit, name in ((STA_UNSYNC, "STA_UNSYNC"), (STA_NANO, "STA_NANO")) if status & bit]
    return ClockFact(
        time=time,
        source="kernel",
        synchronised=not unsync,
        error_s=max(0, maxerror_us) * 1e-6,
        leap=" ".join([STATES.get(state, f"state {state}"), *flags, f"esterror {max(0, esterror_us)} us"])[:256],
    )
