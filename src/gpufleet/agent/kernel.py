"""Follow this node's kernel log and hand each GPU fault report to the agent the moment it is parsed.

Two inputs: `/dev/kmsg` (the kernel's ring buffer) or a file that is appended to (`--kmsg-file`: kern.log, a syslog
file, a journal export); the following is `KernelLogFollower`'s. How far the log has been read (the file's device,
inode and offset, or the last /dev/kmsg record's sequence number and boot) is kept in the agent's spool after each
read's reports are handed on, so a restarted agent neither misses nor re-reports a line, even when the file was
rotated while it was down; a first start reads what is already there (faults since boot count). A missing file is
waited for; an unreadable log is `gpufleet_source_up{source="kmsg"} 0` with the reason, tried again every few
seconds, and the agent goes on without it.

An agent without a control plane has no spool: it follows the log for its Xid series alone (agent/xids.py), keeps the
position in memory, and begins a file at its end (/dev/kmsg from its oldest record, whose times are this boot's).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from gpufleet.background import Background
from gpufleet.errors import GpufleetError
from gpufleet.model.kernel import KernelEvent
from gpufleet.sources.node.kernel_log import DEV_KMSG, FilePosition, KernelLogFollower, KmsgPosition, Position, Status

log = logging.getLogger("gpufleet.agent")
POLL_S = 0.2
RETRY_S = 5.0


class Positions(Protocol):
    """Where how far the log was read is kept: the agent's spool (RecordSpool), or memory."""

    def get(self, key: str) -> str | None: ...

    def set(self, key: str, value: str) -> None: ...


class MemoryPositions:
    """Positions kept for this process only (an agent without a control plane has no spool)."""

    def __init__(self) -> None:
        self._values: dict[str, str] = {}

    def get(self, key: str) -> str | None:
        return self._values.get(key)

    def set(self, key: str, value: str) -> None:
        self._values[key] = value


class KernelLog(Background):
    thread_name = "kmsg"
    join_s = 5.0

    def __init__(
        self,
        on_events: Callable[[list[KernelEvent]], None],
        spool: Positions,
        *,
        path: Path | None = None,
        host: str | None = None,
        status: Status | None = None,
        poll_s: float = POLL_S,
        from_start: bool = True,
    ) -> None:
        """`path=None` follows /dev/kmsg. `from_start=False` begins a file at its end when `spool` has no position."""
        self.on_events = on_events
        self.spool = spool
        self.path = path
        self.host = host
        self.status = status or (lambda ok, why: None)
        self.poll_s = poll_s
        self.from_start = from_start
        self.key = "kmsg_seq" if path is None else "kmsg_file"  # where the spool keeps the position
        self._saved: Position | None = None
        super().__init__()

    @property
    def name(self) -> str:
        return "kmsg"

    def run(self) -> None:
        try:
            while not self._follow() and not self.stopping.wait(RETRY_S):
                pass  # unreadable for now: tried again from where it was
        except Exception as exc:  # the agent keeps collecting and pushing without its kernel log
            self.status(False, f"{type(exc).__name__}: {exc}")
            log.exception("kernel-log follower stopped")

    def _follow(self) -> bool:
        """Follow the log from the stored position until stopped (True) or it cannot be read (False)."""
        stored = self.spool.get(self.key)
        follower = KernelLogFollower(
            self.path or DEV_KMSG,
            kmsg=self.path is None,
            position=KmsgPosition.parse(stored) if self.path is None else FilePosition.parse(stored),
            from_start=self.from_start,
            host=self.host,
            poll_s=self.poll_s,
            status=self.status,
        )
        reads = follower.follow(self.stopping)
        try:
            for events in reads:
                self._deliver(events, follower.position)
                if self.stopping.is_set():
                    break
        except GpufleetError as exc:
            self.status(False, str(exc))
            return False
        finally:  # reports still waiting for lines; a line without its newline is read whole after a restart
            reads.close()
            self._deliver(follower.end(last_line=False), follower.position)
        return True

    def _deliver(self, events: list[KernelEvent], position: Position | None) -> None:
        """Hand the reports on, then keep the position past them: a restart in between re-reads, never skips."""
        if events:
            self.on_events(events)
        if position is not None and position != self._saved:
            self.spool.set(self.key, position.text())
            self._saved = position
