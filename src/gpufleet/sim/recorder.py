"""Telemetry the twin keeps about itself: a short per-GPU ring at full resolution and fleet aggregates per minute."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpufleet.sim.gpu_state import GpuArrays

RING_FIELDS = ("util", "temp_c", "power_w", "sm_clock")


@dataclass(slots=True)
class FleetMinute:
    time: float
    util_mean: float
    temp_max: float
    power_kw: float
    throttled: int  # GPUs with a thermal or power-brake slowdown
    lost: int
    hung_jobs: int
    running_jobs: int


@dataclass(slots=True)
class Recorder:
    n_gpus: int
    ring_seconds: int = 300
    ring: dict[str, np.ndarray] = field(default_factory=dict)
    ring_time: np.ndarray = field(default_factory=lambda: np.zeros(0))
    cursor: int = 0
    filled: int = 0
    minutes: list[FleetMinute] = field(default_factory=list)
    _acc: dict[str, float] = field(default_factory=dict)
    _acc_n: int = 0
    _minute: int = 0

    def __post_init__(self) -> None:
        # Filled now, not as the ring first wraps: a zeroed array's pages are mapped on first write, which made the
        # first ring_seconds of ticks several times slower than the rest at thousands of GPUs.
        self.ring = {f: np.empty((self.ring_seconds, self.n_gpus), dtype=np.float32) for f in RING_FIELDS}
        for rows in self.ring.values():
            rows.fill(0.0)
        self.ring_time = np.zeros(self.ring_seconds)
        self._acc = {"util": 0.0, "temp": 0.0, "power": 0.0, "throttled": 0.0}

    def record(self, now: float, gpus: GpuArrays, hung_jobs: int, running_jobs: int) -> None:
        c = self.cursor
        for name in RING_FIELDS:
            self.ring[name][c] = getattr(gpus, name)
        self.ring_time[c] = now
        self.cursor = (c + 1) % self.ring_seconds
        self.filled = min(self.filled + 1, self.ring_seconds)

        acc = self._acc
        acc["util"] += float(gpus.util.mean()) if gpus.n else 0.0
        acc["temp"] = max(acc["temp"], float(gpus.temp_c.max()) if gpus.n else 0.0)
        acc["power"] += float(gpus.power_w.sum())
        slow = np.count_nonzero(gpus.clock_events & np.uint32(0x40 | 0x80))
        acc["throttled"] = max(acc["throttled"], float(slow))
        self._acc_n += 1
        minute = int(now // 60)
        if minute != self._minute:
            n = max(self._acc_n, 1)
            self.minutes.append(
                FleetMinute(
                    time=float(minute * 60),
                    util_mean=acc["util"] / n,
                    temp_max=acc["temp"],
                    power_kw=acc["power"] / n / 1000.0,
                    throttled=int(acc["throttled"]),
                    lost=int((~gpus.alive).sum()),
                    hung_jobs=hung_jobs,
                    running_jobs=running_jobs,
                )
            )
            self._acc = {"util": 0.0, "temp": 0.0, "power": 0.0, "throttled": 0.0}
            self._acc_n = 0
            self._minute = minute

    def series(self, name: str, gpu: int) -> tuple[np.ndarray, np.ndarray]:
        """The last `filled` seconds of one field of one GPU, oldest first."""
        idx = (np.arange(self.filled) + self.cursor - self.filled) % self.ring_seconds
        return self.ring_time[idx], self.ring[name][idx, gpu]
