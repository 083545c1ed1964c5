"""NVIDIA GPU and NVSwitch fault events from the kernel log: Xid, SXid, fallen off the bus, reset required.

The driver prints (open-gpu-kernel-modules `krcReportXid`)::

    NVRM: Xid (PCI:%04x:%02x:%02x[ GPU-I:%02u[ GPU-CI:%02u]]): %d, pid=%s, name=%s, <message><root>
    NVRM: Xid (PCI:%04x:%02x:%02x): %d, <message><root>        (no process context, and older drivers)

where <root> is ` caused by previous Xid %d` on an Xid 45 whose cause the driver knows. Older drivers print
`NVRM: Xid (0000:03:00): 13, ...`. NVSwitch errors come as `nvidia-nvswitchN: SXid (PCI:0000:05:00.0): 20034,
Fatal, Link 63 ...`, the lost-GPU case at probe time as the three-line `NVRM: The NVIDIA GPU 0000:b3:00.0 /
(PCI ID: 10de:26b5) installed in this system has / fallen off the bus and is not responding to commands.`,
which carries no Xid at all. A GPU the driver cannot initialise (at load, or after a reset) is the pair
`NVRM: GPU 0000:41:00.0: RmInitAdapter failed! (0x62:0x40:2404)` / `NVRM: GPU 0000:41:00.0: rm_init_adapter failed,
device minor number 1` (drivers before ~470 without the GPU: `NVRM: RmInitAdapter failed! (0x30:0xffff:660)` /
`NVRM: rm_init_adapter failed for device bearing minor number 0`; nv.c and osinit.c of open-gpu-kernel-modules):
one `init_failed` event per pair, no Xid either. An Xid line whose address the reporter redacted (`(PCI:...)`,
`(PCI:XXXX:XX:XX)`) is still read, with the GPU unknown (`pci` None). AMD (amdgpu) and Intel Gaudi (habanalabs)
reports are read by `kmsg_vendors`.

`scan_kmsg` returns the events plus the lines that looked like a fault report but could not be read
(`rejected`), so a garbled capture is visible rather than silently empty. A well-formed Xid line with a code
the catalog does not know is an event with `known=False`, never dropped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TypedDict

from gpufleet.catalog import load_xid_catalog
from gpufleet.model.kernel import NVL5_XIDS, RECOVERY_XID, KernelEvent, Nvl5Detail, RecoveryChange, SxidDetail
from gpufleet.model.pci import normalise_pci
from gpufleet.parsers.kernel.framing import Frame, split_frame
from gpufleet.parsers.kernel.vendors import TRIGGER_WORDS, VendorLines, holds_any

_PCI_TEXT = r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?"
_XID_HEAD = re.compile(r"NVRM: Xid\b")
_XID = re.compile(r"NVRM: Xid \((?P<attr>[^()]*)\): (?P<code>\d{1,5}), ?(?P<rest>.*)$")
_XID_ATTR = re.compile(rf"^(?:PCI:)?(?P<pci>{_PCI_TEXT})(?: GPU-I:(?P<gi>\d+))?(?: GPU-CI:(?P<ci>\d+))?$")
# an address a reporter blanked out: `PCI:...`, `PCI:XXXX:XX:XX`, `PCI:<redacted>`, `PCI:` alone
_XID_REDACTED = re.compile(
    r"^(?:PCI:)?\s*(?:\.{2,}|…|<[^<>]{0,40}>|\[[^\]]{0,40}\]|(?=[0-9A-Fa-f:.]*[Xx])[0-9A-Fa-fXx]{2,8}:[0-9A-Fa-fXx]{2}"
    r"(?::[0-9A-Fa-fXx]{2})?(?:\.[0-7Xx])?|[Xx]+|redacted)?\s*(?: GPU-I:\d+)?(?: GPU-CI:\d+)?$",
    re.IGNORECASE,
)
_INIT_FAILED = re.compile(
    rf"NVRM: (?:GPU (?P<pci>{_PCI_TEXT}): )?(?:(?P<head>RmInitAdapter failed!?)\s*(?P<status>\([^()]*\))?"
    r"|(?P<tail>rm_init_adapter failed)\b)"
)
_INIT_PAIR_LINES = 3  # the `rm_init_adapter failed` line follows its `RmInitAdapter failed!` within this many lines
_PID_NAME = re.compile(r"^pid=(?P<pid>'?<unknown>'?|\d*),(?: name=(?P<name>[^,]*),)? ?(?P<msg>.*)$")
_ROOT = re.compile(r"\s*caused by previous Xid (?P<root>\d+)\s*$")
_SXID = re.compile(
    rf"(?P<dev>nvidia-nvswitch\d+): SXid \(PCI:(?P<pci>{_PCI_TEXT})\): (?P<code>\d{{1,6}}), ?(?P<rest>.*)$"
)
_SXID_HEAD = re.compile(r"\bSXid\b")
_FALLEN_ONE = re.compile(rf"NVRM: GPU (?:at PCI:)?(?P<pci>{_PCI_TEXT}):? (?:GPU )?has fallen off the bus")
_FALLEN_START = re.compile(rf"NVRM: The NVIDIA GPU (?P<pci>{_PCI_TEXT})")
_PCI_ID = re.compile(r"\(PCI ID: (?P<id>[0-9a-fA-F]{4}:[0-9a-fA-F]{4})\)")
_RESET_REQUIRED = re.compile(r"NV_ERR_RESET_REQUIRED")
_ANY_PCI = re.compile(rf"(?:PCI:|GPU |GPU at PCI:)(?P<pci>{_PCI_TEXT})")
_UUID_LINE = re.compile(rf"NVRM: GPU at PCI:(?P<pci>{_PCI_TEXT}): (?P<uuid>GPU-[0-9a-fA-F-]{{36}})")

# NVLink5 Xids 144-150: `RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008 ...)`
_NVL5 = re.compile(
    r"^(?P<unit>[A-Z][A-Z0-9_]*)\s+(?P<sev>Fatal|Nonfatal|Non-fatal|NonFatal)\s+XC(?P<xc>\d+)\s+i(?P<inst>\d+)\s+"
    r"Link\s+(?P<link>-?\d+)\s+\((?P<words>(?:0x[0-9a-fA-F]+\s*)+)\)"
)
# Xid 154: `GPU recovery action changed from 0x4 (Drain and Reset) to 0x1 (GPU Reset Required)`. The new state's
# code is whole once its name's bracket (or a kept space) follows it: a line cut inside the name still names the state.
_RECOVERY = re.compile(
    r"recovery action changed from (?P<f>0x[0-9a-fA-F]+|\d+) \((?P<fn>[^)]*)\) to (?P<t>0x[0-9a-fA-F]+|\d+)"
    r"(?: \((?P<tn>[^)]*)(?:\)|$)|\s+$)"
)
_SXID_LINK = re.compile(r"\bLink (?P<link>\d+)\b")
# Xid 13 names the failing unit: `Graphics SM Warp Exception on (GPC 9, TPC 1, SM 1): Out Of Range Address`
_GPC_TPC_SM = re.compile(r"\(GPC (?P<gpc>\d+), TPC (?P<tpc>\d+), SM (?P<sm>\d+)\)")
FALLEN_OFF_BUS_XID = 79
# lines a multi-line fallen-off-the-bus report may span before we give up on it
_FALLEN_SPAN = 4
# An SXid detail line (`Severity ...`, `Data {...}`) can reach the log before its `Fatal, Link N` head when
# several switches print at once or a collector reorders lines; it waits this long for its head before it is
# read on its own (as an unmarked record).
_SXID_WAIT_LINES = 16
_SXID_WAIT_S = 1.0


@dataclass
class _FallenReport:
    """The lines of one fallen-off-the-bus report as they arrive."""

    line: int
    frame: Frame
    pci: str
    device_id: str | None = None
    raws: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)

    def add(self, raw: str, message: str) -> None:
        if not self.raws or self.raws[-1] != raw:  # a journal entry carries several lines in one raw line
            self.raws.append(raw)
        self.messages.append(message)
        id_match = _PCI_ID.search(message)
        if id_match is not None:
            self.device_id = id_match.group("id")


@dataclass
class _HeldDetail:
    """An SXid detail line seen before any head of its switch and code: it joins the head when that comes."""

    line: int
    raw: str
    frame: Frame
    pci: str
    rest: str
    link: int | None


class _Stamp(TypedDict):
    wall_time: datetime | None
    uptime_s: float | None
    host: str | None


@dataclass(frozen=True, slots=True)
class RejectedLine:
    line: int
    raw: str
    reason: str


@dataclass(slots=True)
class KmsgScan:
    events: list[KernelEvent] = field(default_factory=list)
    rejected: list[RejectedLine] = field(default_factory=list)


_UNPRINTABLE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\ufffd]")
# a line without any of these cannot start or be a report, so it is skipped without further reading
_TRIGGER_WORDS = ("NVRM", "SXid", "nvswitch", *TRIGGER_WORDS)
# every report this module reads has one of these in its message
_REPORT_WORDS = re.compile(
    r"Xid|fallen off the bus|The NVIDIA GPU|NV_ERR_RESET_REQUIRED|GPU at PCI:|nvswitch|API mismatch"
    r"|RmInitAdapter failed|rm_init_adapter failed"
)
# nv.c prints it over four NVRM lines: "API mismatch: the client has the version %s, but" / "this kernel module has
# the version %s.  Please" / ...; the head names the user-space side, the kernel module's is read when on the line
_API_MISMATCH = re.compile(
    r"NVRM: API mismatch: the client has the version (?P<client>[\w.~+-]+), but"
    r"(?:\s+(?:NVRM:\s+)?this kernel module has the version (?P<kmod>[\w.~+-]+?)\.?(?:\s|$))?"
)


def _printable(text: str) -> bool:
    return _UNPRINTABLE.search(text) is None


def _parse_nvl5(message: str) -> Nvl5Detail | None:
    match = _NVL5.match(message.strip())
    if match is None:
        return None
    words = tuple(int(w, 16) for w in match.group("words").split())
    return Nvl5Detail(
        unit=match.group("unit"),
        fatal=match.group("sev") == "Fatal",
        xc=int(match.group("xc")),
        instance=int(match.group("inst")),
        link=int(match.group("link")),
        words=words,
    )


def _parse_location(message: str) -> tuple[int, int, int] | None:
    match = _GPC_TPC_SM.search(message) if "(GPC " in message else None
    if match is None:
        return None
    return int(match.group("gpc")), int(match.group("tpc")), int(match.group("sm"))


def _parse_recovery(message: str) -> RecoveryChange | None:
    match = _RECOVERY.search(message)
    if match is None:
        return None
    return RecoveryChange(
        from_code=int(match.group("f"), 0),
        from_name=match.group("fn"),
        to_code=int(match.group("t"), 0),
        to_name=match.group("tn") or "",
    )


class KmsgParser:
    """Line-at-a-time parser; keeps the little state multi-line reports and GPU identities need.

    Feed it lines in order (`feed_line`), then `finish()`; `scan_kmsg` does that for a whole text, and the
    live follower in `sources/node/kernel_log.py` does it as lines arrive.
    """

    def __init__(
        self,
        *,
        host: str | None = None,
        year: int | None = None,
        keep_events: bool = True,
        max_rejected: int | None = None,
    ) -> None:
        """`keep_events=False` hands each event on without keeping it in `scan.events`, and `max_rejected` keeps
        only the first unreadable lines (counting the rest in `rejected_unlisted`): a log of any length then
        parses in bounded memory."""
        self.host = host
        self.year = year
        self.keep_events = keep_events
        self.max_rejected = max_rejected
        self.catalog = load_xid_catalog()
        self.scan = KmsgScan()
        self.rejected_unlisted = 0
        self._lineno = 0
        self._uuids: dict[str, str] = {}
        self._last_xid: dict[str, int] = {}
        self._sxid_heads: dict[tuple[str, int], tuple[int, bool, int | None]] = {}  # (switch, code) -> head
        self._pending: _FallenReport | None = None  # a multi-line fallen-off-the-bus report in progress
        self._held: dict[tuple[str, int], list[_HeldDetail]] = {}  # SXid details waiting for their head
        self._vendors = VendorLines()  # amdgpu and habanalabs reports
        self._last_init: tuple[int, str | None] | None = None  # the last `RmInitAdapter failed!`: line, GPU

    def skip_to(self, lineno: int) -> None:
        """The next line fed is line `lineno`: the ones before it were left out (they hold nothing this parser
        reads), and SXid details waiting for a head that many lines back are read on their own."""
        if lineno - 1 > self._lineno:
            self._lineno = lineno - 1
            if self._held:
                self._release_stale()

    def feed_line(self, raw: str) -> list[KernelEvent]:
        """Parse the next line; returns the events it completed (usually zero or one)."""
        if self._pending is None and not self._held and raw[:1] != "{" and not holds_any(raw, _TRIGGER_WORDS):
            self._lineno += 1  # most lines of a log: nothing to read, nothing waiting on the lines that follow
            return []
        before = len(self.scan.events)
        self._feed(raw)
        return self._completed(before)

    def finish(self) -> list[KernelEvent]:
        """End of input: a fallen-off-the-bus report cut short is still a report of a lost GPU."""
        before = len(self.scan.events)
        if self._pending is not None:
            self._emit_fallen(self._pending, complete=False)
        for key in list(self._held):
            self._release(key, None)
        return self._completed(before)

    # -- helpers ---------------------------------------------------------------------------------------------
    def _completed(self, before: int) -> list[KernelEvent]:
        new = self.scan.events[before:]
        if not self.keep_events:
            del self.scan.events[before:]
        return new

    def _feed(self, raw: str) -> None:
        self._lineno += 1
        raw = raw.rstrip("\r\n")
        if self._held:
            self._release_stale()
        # journald JSON may spell the message as a byte array, so those lines are always read
        if self._pending is None and not holds_any(raw, _TRIGGER_WORDS) and not raw.startswith("{"):
            return
        if not _printable(raw):
            if "NVRM" in raw or "Xid" in raw:
                self._reject(raw, "line holds control or undecodable bytes")
            return
        frame = split_frame(raw, year=self.year)
        if "\n" in frame.message:  # a journal entry holding a multi-line printk: its lines, in order
            for part in frame.message.split("\n"):
                piece = frame._replace(message=part.strip(), continuation=False)
                self._feed_pending(raw, piece)
                self._parse_message(raw, piece)
            return
        self._feed_pending(raw, frame)
        if not frame.continuation:
            self._parse_message(raw, frame)

    def _reject(self, raw: str, reason: str) -> None:
        if self.max_rejected is not None and len(self.scan.rejected) >= self.max_rejected:
            self.rejected_unlisted += 1
            return
        self.scan.rejected.append(RejectedLine(self._lineno, raw, reason))

    def _base(self, frame: Frame) -> _Stamp:
        return {
            "wall_time": frame.wall_time,
            "uptime_s": frame.uptime_s,
            "host": frame.host or self.host,
        }

    def _feed_pending(self, raw: str, frame: Frame) -> None:
        report = self._pending
        if report is None:
            return
        message = frame.message
        if _FALLEN_START.search(message):  # another GPU's report begins: this one was cut short
            self._emit_fallen(report, complete=False)
            return
        report.add(raw, message)
        if "fallen off the bus" in message:
            self._emit_fallen(report, complete=True)
        elif len(report.messages) >= _FALLEN_SPAN:
            self._emit_fallen(report, complete=False)

    def _emit_fallen(self, report: _FallenReport, *, complete: bool) -> None:
        if report is self._pending:
            self._pending = None
        text = " ".join(part.split("NVRM:", 1)[-1].strip() for part in report.messages)
        if not complete:
            text += " [report cut short]"
        self.scan.events.append(
            KernelEvent(
                kind="fallen_off_bus",
                line=report.line,
                raw="\n".join(report.raws),
                message=text,
                pci=report.pci,
                pci_device_id=report.device_id,
                gpu_uuid=self._uuids.get(report.pci),
                root_xid=FALLEN_OFF_BUS_XID if self._last_xid.get(report.pci) == FALLEN_OFF_BUS_XID else None,
                **self._base(report.frame),
            )
        )

    def _parse_message(self, raw: str, frame: Frame) -> None:
        message = frame.message
        vendor = self._vendors.read(message)
        if vendor is not None:
            self.scan.events.append(KernelEvent(line=self._lineno, raw=raw, **vendor.fields(), **self._base(frame)))
            return
        # most NVRM lines (RPC tables, banners) report nothing; an Xid or SXid line (most of the rest) needs no regex
        if "Xid" not in message and _REPORT_WORDS.search(message) is None:
            return
        uuid_match = _UUID_LINE.search(message) if "GPU at PCI:" in message else None
        if uuid_match is not None:
            pci = normalise_pci(uuid_match.group("pci"))
            if pci is not None:
                self._uuids[pci] = uuid_match.group("uuid")
            return
        if _XID_HEAD.search(message):
            self._parse_xid(raw, frame)
            return
        if _SXID_HEAD.search(message):
            self._parse_sxid(raw, frame)
            return
        start = _FALLEN_START.search(message)
        if start is not None:
            pci = normalise_pci(start.group("pci"))
            if pci is None:
                self._reject(raw, "fallen-off-the-bus report with an unreadable PCI address")
                return
            report = _FallenReport(line=self._lineno, frame=frame, pci=pci)
            report.add(raw, message)
            if "fallen off the bus" in message:
                self._emit_fallen(report, complete=True)
            else:
                self._pending = report
            return
        one = _FALLEN_ONE.search(message)
        if one is not None:
            pci = normalise_pci(one.group("pci"))
            if pci is not None:
                report = _FallenReport(line=self._lineno, frame=frame, pci=pci)
                report.add(raw, message)
                self._emit_fallen(report, complete=True)
            return
        init = _INIT_FAILED.search(message)
        if init is not None and _RESET_REQUIRED.search(message) is None:  # that status names what it needs
            self._parse_init_failed(raw, frame, init)
            return
        mismatch = _API_MISMATCH.search(message)
        if mismatch is not None:
            kmod = mismatch.group("kmod")
            self.scan.events.append(
                KernelEvent(
                    kind="api_mismatch",
                    line=self._lineno,
                    raw=raw,
                    message=f"driver API mismatch: user-space driver {mismatch.group('client')}"
                    + (f", kernel module {kmod}" if kmod else ""),
                    **self._base(frame),
                )
            )
            return
        if _RESET_REQUIRED.search(message) and "NVRM" in message:
            pci_match = _ANY_PCI.search(message)
            pci = normalise_pci(pci_match.group("pci")) if pci_match else None
            self.scan.events.append(
                KernelEvent(
                    kind="reset_required",
                    line=self._lineno,
                    raw=raw,
                    message=message.split("NVRM:", 1)[-1].strip(),
                    pci=pci,
                    gpu_uuid=self._uuids.get(pci) if pci else None,
                    **self._base(frame),
                )
            )

    def _parse_init_failed(self, raw: str, frame: Frame, init: re.Match[str]) -> None:
        """`RmInitAdapter failed!` and the `rm_init_adapter failed` line after it are one report."""
        pci = normalise_pci(init.group("pci")) if init.group("pci") else None
        if init.group("tail"):
            last = self._last_init
            if last is not None and self._lineno - last[0] <= _INIT_PAIR_LINES and last[1] == pci:
                return  # the second line of the report its head already made
        else:
            self._last_init = (self._lineno, pci)
        self.scan.events.append(
            KernelEvent(
                kind="init_failed",
                line=self._lineno,
                raw=raw,
                message=frame.message.split("NVRM:", 1)[-1].strip(),
                pci=pci,
                gpu_uuid=self._uuids.get(pci) if pci else None,
                detail=init.group("status").strip("()") if init.group("status") else None,
                **self._base(frame),
            )
        )

    def _parse_xid(self, raw: str, frame: Frame) -> None:
        match = _XID.search(frame.message)
        if match is None:
            self._reject(raw, "Xid line without the `Xid (PCI:dddd:bb:dd): N, ` head")
            return
        attr = _XID_ATTR.match(match.group("attr").strip())
        redacted = attr is None and _XID_REDACTED.match(match.group("attr").strip()) is not None
        if attr is None and not redacted:
            self._reject(raw, f"Xid line with an unreadable device {match.group('attr')!r}")
            return
        pci = normalise_pci(attr.group("pci")) if attr is not None else None
        rest = match.group("rest")
        if (pci is None and not redacted) or not rest.strip():
            self._reject(raw, "Xid line cut short after its code")
            return
        code = int(match.group("code"))
        pid: int | None = None
        process: str | None = None
        pid_name = _PID_NAME.match(rest)
        if pid_name is not None:
            pid_text = pid_name.group("pid")
            pid = int(pid_text) if pid_text.isdigit() else None
            name = (pid_name.group("name") or "").strip()
            process = None if name in ("", "<unknown>") else name
            rest = pid_name.group("msg")
            if not rest.strip():
                self._reject(raw, "Xid line cut short after its pid/name")
                return
        elif rest.startswith("pid="):
            self._reject(raw, "Xid line with a damaged pid/name field")
            return
        root = _ROOT.search(rest) if "caused by previous Xid" in rest else None
        root_xid = int(root.group("root")) if root else None
        message = rest[: root.start()] if root else rest
        message = message.strip()
        if pci is not None:
            self._last_xid[pci] = code
        self.scan.events.append(
            KernelEvent(
                kind="xid",
                line=self._lineno,
                raw=raw,
                message=message,
                xid=code,
                pci=pci,
                pid=pid,
                process=process,
                gpu_instance=int(attr.group("gi")) if attr is not None and attr.group("gi") else None,
                compute_instance=int(attr.group("ci")) if attr is not None and attr.group("ci") else None,
                root_xid=root_xid,
                known=code in self.catalog,
                gpu_uuid=self._uuids.get(pci) if pci is not None else None,
                nvl5=_parse_nvl5(message) if code in NVL5_XIDS else None,
                recovery=_parse_recovery(message) if code == RECOVERY_XID else None,
                gpc_tpc_sm=_parse_location(message),
                **self._base(frame),
            )
        )

    def _parse_sxid(self, raw: str, frame: Frame) -> None:
        match = _SXID.search(frame.message)
        if match is None:
            if "nvswitch" in frame.message:
                self._reject(raw, "SXid line without the `SXid (PCI:...): N, ` head")
            return
        pci = normalise_pci(match.group("pci"))
        rest = match.group("rest").strip()
        if pci is None or not rest:
            self._reject(raw, "SXid line cut short after its code")
            return
        head = rest.split(",", 1)[0].strip().lower()
        fatal = True if head == "fatal" else False if head in ("non-fatal", "nonfatal") else None
        link_match = _SXID_LINK.search(rest)
        link = int(link_match.group("link")) if link_match else None
        code = int(match.group("code"))
        key = (match.group("dev"), code)
        last_head = self._sxid_heads.get(key)
        if fatal is None and (last_head is None or self._lineno - last_head[0] > _SXID_WAIT_LINES):
            # a detail line ahead of its head (or long after the last one): it is part of the record whose
            # head comes next, not a record of its own
            self._held.setdefault(key, []).append(_HeldDetail(self._lineno, raw, frame, pci, rest, link))
            return
        continues = None
        if fatal is not None:
            self._sxid_heads[key] = (self._lineno, fatal, link)
        elif last_head is not None:
            continues, fatal, link = last_head
        self._emit_sxid(self._lineno, raw, frame, pci, rest, key, SxidDetail(key[0], fatal, link, continues))
        if fatal is not None and key in self._held:
            self._release(key, (self._lineno, fatal, link), frame)

    def _emit_sxid(
        self, line: int, raw: str, frame: Frame, pci: str, rest: str, key: tuple[str, int], detail: SxidDetail
    ) -> None:
        self.scan.events.append(
            KernelEvent(
                kind="sxid",
                line=line,
                raw=raw,
                message=rest,
                sxid=key[1],
                pci=pci,
                sxid_detail=detail,
                **self._base(frame),
            )
        )

    def _release(
        self, key: tuple[str, int], head: tuple[int, bool, int | None] | None, frame: Frame | None = None
    ) -> None:
        """Emit the detail lines held for `key`: joined to `head`, or unmarked when no head came in time."""
        for held in self._held.pop(key, []):
            if head is None or frame is None or not self._head_in_time(held, frame):
                detail = SxidDetail(key[0], None, held.link)
            else:
                head_line, fatal, link = head
                detail = SxidDetail(key[0], fatal, link if link is not None else held.link, head_line)
            self._emit_sxid(held.line, held.raw, held.frame, held.pci, held.rest, key, detail)

    def _release_stale(self) -> None:
        """Held detail lines whose head did not follow within the wait are read on their own."""
        for key, held in list(self._held.items()):
            if self._lineno - held[0].line > _SXID_WAIT_LINES:
                self._release(key, None)

    def _head_in_time(self, held: _HeldDetail, frame: Frame) -> bool:
        if held.frame.uptime_s is not None and frame.uptime_s is not None:
            return abs(frame.uptime_s - held.frame.uptime_s) <= _SXID_WAIT_S
        return self._lineno - held.line <= _SXID_WAIT_LINES


def scan_kmsg(text: str | Iterable[str], *, host: str | None = None, year: int | None = None) -> KmsgScan:
    """Parse kernel log text (any framing, mixed freely) into events, in line order, and rejected lines."""
    parser = KmsgParser(host=host, year=year)
    lines = text.splitlines() if isinstance(text, str) else text
    for raw in lines:
        parser.feed_line(raw)
    parser.finish()
    # a detail line held for its head completes after lines that follow it: a whole text reads in line order
    parser.scan.events.sort(key=lambda e: e.line)
    return parser.scan


def parse_kmsg(text: str | Iterable[str], *, host: str | None = None, year: int | None = None) -> list[KernelEvent]:
    """The events in kernel log text; see `scan_kmsg` for the lines that were rejected."""
    return scan_kmsg(text, host=host, year=year).events
