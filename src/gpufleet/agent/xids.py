"""The kernel log's Xids on /metrics, in the two series dcgm-exporter exports for them, so the shipped Xid alerts
(GpuXidFatal, GpuXid) and the dashboards' Xid panels read a real node as they read the twin.

What dcgm-exporter does, as read in NVIDIA/dcgm-exporter 4.5.3-4.8.2 (internal/pkg/collector/xid_collector.go and
expcollector.go, the `--xid-count-window-size` flag in pkg/cmd/app.go, DCGM_FI_DEV_XID_ERRORS in gpu_collector.go):

- `DCGM_EXP_XID_ERRORS_COUNT{..., window_size_in_ms="W", xid="N"}`: for each GPU DCGM monitors, how many samples of
  DCGM_FI_DEV_XID_ERRORS with value N DCGM holds from the last W ms (`GetValuesSince(now - W)`). DCGM records one
  sample per Xid event, so it is the number of Xid N events on that GPU within the window. W is
  `--xid-count-window-size` (`-x`, DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE), 5 minutes = 300000 ms by default. The values
  are keyed by the GPU, so each MIG instance's series counts its GPU's Xids.
- `DCGM_FI_DEV_XID_ERRORS` (gauge, "Value of the last XID error encountered."): the last Xid DCGM recorded for the
  GPU, 0 before any; a GPU that fell off the bus after DCGM listed it keeps showing 79.
- Only the GPUs DCGM monitors have series: an Xid for a GPU DCGM does not list is never seen, so never exported.

Here the kernel log is the source: each parsed Xid report (parsers/kernel/kmsg.py) names its GPU by PCI address,
which is joined to the frame's entities by their `pci_bus_id` (both normalised by gpufleet.model.pci). An Xid for
a PCI address no entity has (a GPU NVML did not list, fallen off the bus before the agent started) is not dropped,
as dcgm-exporter's would be: it is counted in DCGM_EXP_XID_ERRORS_COUNT under the only labels known of that GPU,
`pci_bus_id` (NVML's spelling, function 0) and the hostname, so GpuXidFatal still fires for it; it has no last-Xid
gauge, which is a field of a listed GPU.

An Xid counts from when the line says it was logged: the wall time the line carries, else (from /dev/kmsg) its time
since boot on this boot's clock, else when it was read; never later than now. An agent reading a log from its start
does not count old Xids as recent, and `DCGM_FI_DEV_XID_ERRORS` is the last Xid read whatever its age. Like
dcgm-exporter with its embedded DCGM (its default), what was counted does not outlive the agent's process.

The series are filled only once the log has been read (before, neither a count nor a 0 can be vouched for); the
source's `gpufleet_source_up{source="kmsg"}` is the follower's: whether the log can be read now.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable

import numpy as np

from gpufleet.agent.collector import SourceDown
from gpufleet.model.kernel import KernelEvent
from gpufleet.model.pci import normalise_pci
from gpufleet.telemetry.frame import DEFAULT_WINDOW_MS, MetricFrame

XID_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"
LAST_XID = "DCGM_FI_DEV_XID_ERRORS"
FIELDS = (XID_COUNT, LAST_XID)  # the catalog fields the kernel-log source fills


def nvml_bus_id(pci: str) -> str:
    """A normalised `dddd:bb:dd` as NVML spells a GPU's bus id (what dcgm-exporter's pci_bus_id label carries):
    `0000:3b:00` -> `00000000:3B:00.0`. A GPU is function 0 of its device."""
    domain, bus, device = pci.split(":")
    return f"{int(domain, 16):08X}:{bus.upper()}:{device.upper()}.0"


def gpu_columns(frame: MetricFrame) -> dict[str, list[int]]:
    """Each NVIDIA entity's normalised PCI address -> its columns (a MIG GPU's instances share their GPU's)."""
    out: dict[str, list[int]] = {}
    for i, entity in enumerate(frame.entities):
        pci = normalise_pci(entity.pci_bus_id) if entity.vendor == "nvidia" and entity.pci_bus_id else None
        if pci is not None:
            out.setdefault(pci, []).append(i)
    return out


class XidWindow:
    """The node's Xids within the window, per GPU, and each GPU's last Xid: fed by the kernel-log follower's thread
    (`observe`, `status`), read into the frame on the collector's (`collect`)."""

    name = "kmsg"  # its state is the kernel log's
    fields = FIELDS

    def __init__(
        self,
        hostname: str,
        *,
        window_ms: int = DEFAULT_WINDOW_MS,
        clock: Callable[[], float] = time.time,
        boot_clock: Callable[[], float] | None = None,
    ) -> None:
        """`boot_clock`: seconds since boot on the clock the log's uptime stamps use (time.monotonic for
        /dev/kmsg); None when those stamps may be of another boot (a file)."""
        self.hostname = hostname
        self.window_ms = window_ms  # how long an Xid is kept: the window of the frame it last filled
        self.clock = clock
        self.boot_clock = boot_clock
        self._lock = threading.Lock()
        self._seen: list[tuple[float, int, str, int]] = []  # a heap of (time, arrival, pci, xid)
        self._arrivals = 0
        self._counts: Counter[tuple[str, int]] = Counter()  # (pci, xid) -> Xids in _seen
        self._last: dict[str, int] = {}  # pci -> its last Xid read
        self._read = False  # the log was read (opened) at least once
        self._up: bool | None = None  # the follower's last word: None before it said any
        self._why = ""

    # -- the follower's thread ----------------------------------------------------------------------------------
    def status(self, ok: bool, why: str) -> None:
        """The follower's status callback: whether the log can be read now, and why not."""
        with self._lock:
            self._up, self._why = ok, why
            self._read = self._read or ok

    def observe(self, events: Iterable[KernelEvent]) -> None:
        """Take the Xid reports of one read (other kernel reports are not Xids and are left alone)."""
        now = self.clock()
        with self._lock:
            for event in events:
                if event.kind != "xid" or event.xid is None or event.pci is None:
                    continue
                self._last[event.pci] = event.xid
                when = self.logged_at(event, now)
                if when < now - self.window_ms / 1000:
                    continue  # already out of any window
                heapq.heappush(self._seen, (when, self._arrivals, event.pci, event.xid))
                self._arrivals += 1
                self._counts[(event.pci, event.xid)] += 1
            self._expire(now - self.window_ms / 1000)

    def logged_at(self, event: KernelEvent, now: float) -> float:
        """When the line says the Xid happened (see the module's note), never after `now`."""
        when = event.logged
        if when is None and event.uptime_s is not None and self.boot_clock is not None:
            when = now - (self.boot_clock() - event.uptime_s)
        return now if when is None else min(when, now)

    def _expire(self, before: float) -> None:
        seen = self._seen
        while seen and seen[0][0] < before:
            _, _, pci, xid = heapq.heappop(seen)
            key = (pci, xid)
            self._counts[key] -= 1
            if self._counts[key] <= 0:
                del self._counts[key]

    # -- the collector's thread ---------------------------------------------------------------------------------
    def counts(self, now: float, window_ms: int) -> tuple[dict[tuple[str, int], int], dict[str, int]]:
        """(pci, xid) -> Xids from the last `window_ms` before `now` (the frame's window, which is kept from then
        on), and each PCI address's last Xid."""
        with self._lock:
            self.window_ms = window_ms
            self._expire(now - window_ms / 1000)
            return dict(self._counts), dict(self._last)

    def collect(self, frame: MetricFrame) -> None:
        with self._lock:
            read, up, why = self._read, self._up, self._why
        if read:
            self.fill(frame, frame.timestamp or self.clock())
        if up is None:
            raise SourceDown(None)  # the follower has not opened the log yet
        if not up:
            raise SourceDown(why)  # what was read before stays on /metrics; source_up says the log is down

    def fill(self, frame: MetricFrame, now: float) -> None:
        counts, last = self.counts(now, frame.window_ms)
        columns = gpu_columns(frame)
        if frame.has_gpu_field(LAST_XID):
            row = frame.gpu(LAST_XID)
            for listed in columns.values():
                row[listed] = 0.0  # no Xid read for it: DCGM's value before any
            for pci, xid in last.items():
                if pci in columns:
                    row[columns[pci]] = float(xid)
        rows: dict[int, np.ndarray] = {}
        for (pci, xid), count in counts.items():
            cols = columns.get(pci)
            if cols is None:
                frame.set_unlisted_xid_count(nvml_bus_id(pci), self.hostname, xid, count)
                continue
            if xid not in rows:
                rows[xid] = np.zeros(len(frame.entities))
            rows[xid][cols] = count
        for xid, counts_row in rows.items():
            frame.set_xid_count(xid, counts_row)
