"""A daemon thread that runs a loop until it is stopped: the collector, the pusher, the kernel-log follower, the
control loop and the twin's clock all are one."""

from __future__ import annotations

import threading


class Background:
    """Subclasses implement `run()`, which loops until `stopping` is set (waiting on it between turns)."""

    thread_name = "background"
    join_s = 10.0

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name=self.thread_name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=self.join_s)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def run(self) -> None:
        raise NotImplementedError
