"""Per-device readings that fail: each is logged once when it starts failing and forgotten when it reads again, so
an agent that polls every second does not repeat the same warning every second. NVML, AMD SMI and HLML share it."""

from __future__ import annotations

import logging


class FailingReadings:
    def __init__(self, log: logging.Logger, device_word: str = "GPU") -> None:
        self.log = log
        self.device_word = device_word
        self._failing: set[tuple[int, str]] = set()

    def failed(self, device: int, field: str, error: object) -> None:
        if (device, field) not in self._failing:
            self._failing.add((device, field))
            self.log.warning("%s %d: %s unavailable: %s", self.device_word, device, field, error)

    def read(self, device: int, field: str) -> None:
        self._failing.discard((device, field))
