"""Follow this node's kernel log and hand each GPU fault report to the agent the moment it is parsed.

Two inputs: `/dev/kmsg` (the kernel's ring buffer; one `prio,seq,usec,flags;message` record per read) or a file that
is appended to (`--kmsg-file`: kern.log, a syslog file, a journal export). How far the log has been read is kept
in the agent's spool, so a restarted agent neither misses nor re-reports a line; a first start reads what is
already there (faults since boot count). A missing file is waited for; an unreadable one is one log line and
`gpufleet_source_up{source="kmsg"} 0`, and the agent goes on without it.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable
from pathlib import Path

from gpufleet.agent.spool import RecordSpool
from gpufleet.background import Background
from gpufleet.model.kernel import KernelEvent
from gpufleet.parsers.kernel.kmsg import KmsgParser
from gpufleet.parsers.kernel.stream import KmsgFeed

log = logging.getLogger("gpufleet.agent")
POLL_S = 0.2
CHUNK = 1 << 16

Status = Callable[[bool, str], None]  # (up, why) for gpufleet_source_up


class KernelLog(Background):
    thread_name = "kmsg"
    join_s = 5.0

    def __init__(
        self,
        on_events: Callable[[list[KernelEvent]], None],
        spool: RecordSpool,
        *,
        path: Path | None = None,
        host: str | None = None,
        status: Status | None = None,
        poll_s: float = POLL_S,
    ) -> None:
        """`path=None` follows /dev/kmsg."""
        self.on_events = on_events
        self.spool = spool
        self.path = path
        self.host = host
        self.status = status or (lambda ok, why: None)
        self.poll_s = poll_s
        self.lines = 0
        super().__init__()

    @property
    def name(self) -> str:
        return "kmsg"

    def run(self) -> None:
        try:
            if self.path is None:
                self._follow_dev_kmsg()
            else:
                self._follow_file()
        except Exception as exc:  # the agent keeps collecting and pushing without its kernel log
            self.status(False, f"{type(exc).__name__}: {exc}")
            log.exception("kernel-log follower stopped")

    def _emit(self, events: list[KernelEvent]) -> None:
        if events:
            self.on_events(events)

    # --- a file that is appended to ------------------------------------------------------------------------------

    def _follow_file(self) -> None:
        assert self.path is not None
        stored = self.spool.get("kmsg_file")
        inode, offset = (int(x) for x in stored.split(":")) if stored else (None, 0)
        feed = KmsgFeed(host=self.host)
        handle = None
        waiting_said = False
        while not self.stopping.is_set():
            if handle is None:
                try:
                    handle = self.path.open("rb")
                except FileNotFoundError:
                    if not waiting_said:
                        log.info("waiting for %s to appear", self.path)
                        waiting_said = True
                    self.status(False, f"{self.path} does not exist yet")
                    self.stopping.wait(self.poll_s)
                    continue
                except OSError as exc:
                    self.status(False, f"cannot read {self.path}: {exc.strerror}")
                    self.stopping.wait(5.0)
                    continue
                stat = os.fstat(handle.fileno())
                if inode != stat.st_ino or offset > stat.st_size:
                    inode, offset = stat.st_ino, 0  # a new file (or a rotated one): from its start
                handle.seek(offset)
                self.status(True, "")
            chunk = handle.read(CHUNK)
            if chunk:
                text = chunk.decode("utf-8", errors="replace")
                self._emit(feed.feed(text))
                self.lines += text.count("\n")
                offset = handle.tell()
                self.spool.set("kmsg_file", f"{inode}:{offset}")
                continue
            try:
                stat = self.path.stat()
                rotated = stat.st_ino != inode or stat.st_size < offset
            except FileNotFoundError:
                rotated = True
            if rotated:
                self._emit(feed.end_of_file())
                handle.close()
                handle = None
                continue
            self.stopping.wait(self.poll_s)
        if handle is not None:
            handle.close()

    # --- /dev/kmsg -----------------------------------------------------------------------------------------------

    def _follow_dev_kmsg(self) -> None:
        path = "/dev/kmsg"
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except PermissionError:
            self.status(False, "not permitted to read /dev/kmsg: run as root or give the agent CAP_SYSLOG")
            return
        except OSError as exc:
            self.status(False, f"cannot open /dev/kmsg: {exc.strerror}")
            return
        self.status(True, "")
        last = int(self.spool.get("kmsg_seq") or -1)
        parser = KmsgParser(host=self.host)
        try:
            while not self.stopping.is_set():
                try:
                    record = os.read(fd, 8192)
                except BlockingIOError:
                    self.stopping.wait(self.poll_s)
                    continue
                except OSError as exc:
                    if exc.errno == errno.EPIPE:  # overwritten while we read: the kernel says skip ahead
                        continue
                    raise
                text = record.decode("utf-8", errors="replace")
                head = text.split(";", 1)[0].split(",")
                seq = int(head[1]) if len(head) > 1 and head[1].isdigit() else None
                if seq is not None and seq <= last:
                    continue  # read before this agent restarted
                events: list[KernelEvent] = []
                for line in text.splitlines():
                    events += parser.feed_line(line)
                self._emit(events)
                self.lines += 1
                if seq is not None:
                    last = seq
                    self.spool.set("kmsg_seq", str(seq))
        finally:
            os.close(fd)
