"""AMD (amdgpu) and Intel Gaudi (habanalabs) fault reports in the kernel log: RAS error counts, hangs, resets.

The lines are the drivers' own (Linux drivers/gpu/drm/amd/amdgpu and drivers/accel/habanalabs):

- amdgpu_ras.c: `[socket: S, die: D, ]N [new ]correctable|uncorrectable|deferred hardware errors detected in
  [total in ]<block> block[, no user action is needed]` (the `{id}` RAS event number in front on kernels that have
  it; the `... in total in ...` line repeats the running total after every new count, so it is no new fault),
  `N new poison consumption detected in <block> block`, `Poison is created` (deferred: poisoned data in memory that
  nothing has read yet), `[GPU reset for ]<block> RAS poison consumption is issued!`, `uncorrectable hardware
  error(ERREVENT_ATHUB_INTERRUPT) detected!` (the global fatal error: the driver resets the GPU), `[Hardware Error]:
  aca|mca entry[NN].STATUS=` (one machine-check bank; its severity is in the AMD64 MCA_STATUS bits),
  amdgpu_ras_eeprom.c's bad-page threshold;
- amdgpu_job.c: `ring <name> timeout, signaled seq=S, emitted seq=E` (`, but soft recovered` when no reset was
  needed), printed through DRM_ERROR as `[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ...` on older kernels;
  `GPU Recovery Failed: E`; amdgpu_mes.c `MES failed to respond to msg=<msg>`;
- amdgpu_device.c: `GPU reset begin![. Source: N]`, the method (`MODE1|MODE2|BACO|PCI reset`), `GPU reset
  succeeded, trying to resume`, `VRAM is lost due to GPU reset!`, `GPU reset(N) succeeded!|failed`, `GPU reset end
  with ret = E`, `ASIC reset failed with error, E for drm dev, <bdf>`, `device lost from bus!`, `Fatal error during
  GPU init`;
- habanalabs common/device.c: `Going to reset device`, `Successfully finished resetting the <bdf> device`, `<bdf>
  Failed to reset! Device is NOT usable`, `<bdf> Consecutive fatal errors, stopping hard reset` (older: `Consecutive
  FW fatal errors received, ...`), `<bdf> device is not idle after reset (mask ...)`, `Device heartbeat failed!`,
  `Failed to initialize hlN. Device is NOT usable !` / `Failed to initialize accelN. Device <bdf> is NOT usable!`;
  command_submission.c `[Signal |Wait ]Command submission N has not finished in S seconds!` (the TDR); the ASIC
  files' `Received H/W interrupt N ["NAME"]`, `MMU page fault on va 0x...`, `RAZWI ...` and Gaudi 2's
  `NAME: ECC error detected. ... critical N.`

The notifier events a Gaudi process receives (CS_TIMEOUT, RAZWI, PAGE_FAULT, CRITICL_FW_ERR, ...) are never printed;
`detail` names the one the driver raises on the code path that printed the line.

The out-of-tree habanalabs driver names a device `hlN`; its boot line `hlN: Successfully added device <bdf> to
habanalabs driver` ties the name to the PCI address, which later reports then carry. Before that line an `hlN` report
keeps `pci` None and names the device in `detail`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from gpufleet.model.kernel import EventKind, RasSeverity
from gpufleet.model.pci import normalise_pci

# lines without one of these hold no amdgpu or habanalabs report (a cheap test before any regex)
TRIGGER_WORDS = ("amdgpu", "habanalabs", "VRAM is lost", "IP block:")
CANDIDATE_WORDS = tuple(word.encode() for word in TRIGGER_WORDS)


def holds_any(line: str, words: tuple[str, ...]) -> bool:
    """Whether the line holds one of the words: a plain `in` per word, a few times faster on a line than one regex
    alternating them (which tries every word at every offset that starts one) or `any()` over a generator."""
    for word in words:  # noqa: SIM110 (any() over a generator is the slower form this replaces)
        if word in line:
            return True
    return False


_BDF = r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]"
_AMD_DEVICE = re.compile(rf"^amdgpu (?P<dev>{_BDF}): ")
_HL_DEVICE = re.compile(rf"^habanalabs (?P<dev>hl\d+|{_BDF}): ")
_BARE = re.compile(r"^(?P<drv>amdgpu|habanalabs): ")
_DRM = re.compile(r"^\[drm(?::[\w.]+ \[(?P<module>\w+)\])?\] (?:\*ERROR\* )?")  # `func.constprop.0`
_EVENT_ID = re.compile(r"^\{\d+\}\s*")

_RAS_COUNT = re.compile(
    r"^(?:socket: \d+, die: \d+,? )?(?P<count>\d+) (?:new )?(?P<sev>correctable|uncorrectable|deferred) hardware "
    r"errors detected in (?P<total>total in )?(?P<block>\w+) [Bb]lock"
)
_POISON = re.compile(r"^(?:socket: \d+, die: \d+,? )?(?P<count>\d+) new poison consumption detected in (?P<block>\w+)")
_POISON_CREATED = re.compile(r"^Poison is created")  # the UMC poison-creation interrupt
_POISON_ISSUED = re.compile(r"^(?:GPU reset for )?(?P<block>\w+) RAS poison consumption is issued!")
_RAS_FATAL = re.compile(r"^[Uu]ncorrectable hardware error\((?P<event>\w+)\) detected!")
_ACA = re.compile(r"^\[Hardware Error\]: (?P<bank>aca|mca) entry\[(?P<idx>\d+)\]\.STATUS=(?P<status>0x[0-9a-fA-F]+)")
_BAD_PAGES = re.compile(
    r"(?:RAS records:(?P<n>\d+) exceed threshold:(?P<t>\d+)|Saved bad pages (?P<n2>\d+) reaches threshold value "
    r"(?P<t2>\d+))"
)
# older kernels (4.x) print `last signaled seq=..., last emitted seq=...`; a log cut or wrapped after `timeout` is
# still the timeout
_RING_TIMEOUT = re.compile(
    r"^ring (?P<ring>\S+) timeout\b(?:,\s*(?:(?:last )?signaled seq=\d+|(?P<soft>but soft recovered)))?"
)
# mes_v11_0.c before 6.10: DRM_ERROR("MES failed to response msg=%d"), an opcode number; later the op's name
_MES = re.compile(r"^MES(?:\(\d+\))? failed to respon(?:d to|se) msg=(?P<msg>\w+)")
# amdgpu_device.c amdgpu_device_ip_check_soft_reset, on the way into a GPU reset (DRM_INFO on 4.x, dev_info later)
_IP_HUNG = re.compile(r"^IP block:\s*(?P<block>\S+) is hung!")
# amdgpu_psp.c psp_hw_start / psp_load_fw / psp_resume, then amdgpu_device.c's IP-block init or resume failure:
# the GPU does not come up (at load) or back (after a reset)
_PSP_FAILED = re.compile(
    r"^(?:PSP (?P<psp>create ring|load \w+(?: drv)?|firmware loading|resume|tmr init|load tmr) failed"
    r"|Failed to wait for (?:trust OS|sOS) ready for ring creation"
    r"|(?P<phase>hw_init|resume) of IP block <(?P<block>\w+)> failed (?P<e>-?\d+)"
    r"|amdgpu_device_ip_(?P<step>init|resume) failed)"
)
# the driver core's probe failure (`amdgpu: probe of <bdf> failed with error -22`; 6.x: `amdgpu <bdf>: probe with
# driver amdgpu failed with error -22`)
_PROBE_FAILED = re.compile(rf"^probe (?:of (?P<bdf>{_BDF}) |with driver amdgpu )failed with error (?P<e>-?\d+)")
_RESET_BEGIN = re.compile(r"^GPU reset begin!(?:\.?\s*Source:\s*(?P<src>\d+))?")
_RESET_METHOD = re.compile(r"^(?P<method>MODE1|MODE2|BACO|PCI) reset$")
_RESET_OK = re.compile(r"^(?:GPU reset(?:\((?P<n>\d+)\))? succeeded|Ring (?P<ring>\S+) reset succeeded)")
_VRAM_LOST = re.compile(r"^VRAM is lost due to GPU reset!")
_RESET_FAILED = re.compile(
    r"^(?:GPU reset\((?P<n>\d+)\) failed(?: with error (?P<e1>-?\d+))?|GPU reset end with ret = (?P<e2>-?\d+)"
    r"|GPU Recovery Failed: (?P<e3>-?\d+)|ASIC reset failed with error, (?P<e4>-?\d+) for drm dev, (?P<bdf>\S+)"
    r"|GPU (?:psp |smu )?mode1 reset failed)"
)
_INIT_FAILED = re.compile(r"^Fatal error during GPU init")
_LOST = re.compile(r"^device lost from bus!")

_HL_ADDED = re.compile(rf"^Successfully added device (?P<bdf>{_BDF}) to habanalabs driver")
_HL_INIT_FAILED = re.compile(
    rf"^Failed to initialize (?:(?P<hl>hl\d+)\. Device is NOT usable|accel\d+\. Device (?P<bdf>{_BDF}) is NOT usable)"
)
_HL_RESET_BEGIN = re.compile(r"^Going to reset device$")
_HL_RESET_OK = re.compile(rf"^Successfully finished resetting the (?P<bdf>{_BDF}) device")
_HL_RESET_FAILED = re.compile(
    rf"^(?:(?P<bdf>{_BDF}) )?(?P<what>Failed to reset! Device is NOT usable|Consecutive (?:FW )?fatal errors"
    r"(?: received)?, stopping hard reset|Failed to kill all open processes, stopping hard reset|device is not idle "
    r"after reset|kernel ctx was alive during hard reset)"
)
_HL_CS_TIMEOUT = re.compile(
    r"^(?:Signal |Wait |Collective Wait )?[Cc]ommand submission (?P<seq>\d+) has not finished in (?:time|\d+ seconds)!"
)
_HL_HEARTBEAT = re.compile(r"^Device heartbeat failed!")
_HL_IRQ = re.compile(r'^Received H/W interrupt (?P<id>\d+) \["(?P<name>[^"]*)"\]')
_HL_PAGE_FAULT = re.compile(r"^(?:MMU|PMMU|HMMU) page fault on va (?:range )?0x[0-9a-fA-F]+")
_HL_ECC = re.compile(r"^(?:(?P<event>[A-Z][A-Z0-9_]*): )?ECC error detected\..*?critical (?P<crit>\d)")

# AMD64 MCA_STATUS bits (arch/x86/include/asm/mce.h): valid, uncorrected, processor context corrupt, deferred, poison
_MCA_VAL, _MCA_UC, _MCA_PCC, _MCA_DEFERRED, _MCA_POISON = 1 << 63, 1 << 61, 1 << 57, 1 << 44, 1 << 43


def mca_severity(status: int) -> RasSeverity | None:
    """What one MCA_STATUS word says of its error; None when the bank holds no valid error."""
    if not status & _MCA_VAL:
        return None
    if status & _MCA_UC:
        return "fatal" if status & _MCA_PCC else "uncorrectable"
    if status & (_MCA_DEFERRED | _MCA_POISON):
        return "deferred"
    return "correctable"


@dataclass(frozen=True, slots=True)
class VendorReport:
    """What one driver line reports: the fields of a `KernelEvent` besides where the line is and when."""

    kind: EventKind
    message: str
    vendor: str
    pci: str | None = None
    ras_block: str | None = None
    ras_severity: RasSeverity | None = None
    error_count: int | None = None
    detail: str | None = None

    def fields(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "message": self.message,
            "vendor": self.vendor,
            "pci": self.pci,
            "ras_block": self.ras_block,
            "ras_severity": self.ras_severity,
            "error_count": self.error_count,
            "detail": self.detail,
        }


def _ras(body: str, pci: str | None) -> VendorReport | None:
    match = _RAS_COUNT.match(body)
    if match is not None:
        count = int(match.group("count"))
        if match.group("total") or count == 0:  # the running total, printed after each new count
            return None
        sev: RasSeverity = match.group("sev")  # type: ignore[assignment]
        block = match.group("block").lower()
        return VendorReport("ras", body, "amd", pci, block, sev, count, f"{block} {sev}")
    match = _POISON.match(body)
    if match is not None:
        block = match.group("block").lower()
        count = int(match.group("count"))
        return VendorReport("ras", body, "amd", pci, block, "uncorrectable", count, f"{block} poison consumption")
    if _POISON_CREATED.match(body):
        return VendorReport("ras", body, "amd", pci, "umc", "deferred", 1, "umc poison created")
    match = _POISON_ISSUED.match(body)
    if match is not None:
        block = match.group("block").lower()
        return VendorReport("ras", body, "amd", pci, block, "uncorrectable", 1, f"{block} poison consumption")
    match = _RAS_FATAL.match(body)
    if match is not None:
        event = match.group("event")
        block = event.removeprefix("ERREVENT_").split("_", 1)[0].lower()
        return VendorReport("ras", body, "amd", pci, block, "fatal", 1, event)
    match = _ACA.match(body)
    if match is not None:
        severity = mca_severity(int(match.group("status"), 16))
        if severity is None:
            return None
        bank = match.group("bank").upper()
        detail = f"{bank} entry {int(match.group('idx'))} {severity}"
        return VendorReport("hw_error", body, "amd", pci, None, severity, 1, detail)
    match = _BAD_PAGES.search(body)
    if match is not None:
        count = int(match.group("n") or match.group("n2"))
        limit = match.group("t") or match.group("t2")
        return VendorReport("hw_error", body, "amd", pci, "umc", "uncorrectable", count, f"bad page threshold {limit}")
    return None


def _amd_fault(body: str, pci: str | None) -> VendorReport | None:
    ras = _ras(body, pci)
    if ras is not None:
        return ras
    match = _RING_TIMEOUT.match(body)
    if match is not None:
        ring = match.group("ring")
        detail = f"ring {ring} soft recovered" if match.group("soft") else f"ring {ring}"
        return VendorReport("hang", body, "amd", pci, detail=detail)
    match = _MES.match(body)
    if match is not None:
        return VendorReport("hang", body, "amd", pci, detail=f"MES msg={match.group('msg')}")
    match = _IP_HUNG.match(body)
    if match is not None:
        return VendorReport("hang", body, "amd", pci, detail=f"IP block {match.group('block')} hung")
    if _RESET_BEGIN.match(body):
        return VendorReport("reset", body, "amd", pci, detail="reset begin")
    match = _RESET_METHOD.match(body)
    if match is not None:
        return VendorReport("reset", body, "amd", pci, detail=f"{match.group('method')} reset")
    match = _RESET_OK.match(body)
    if match is not None:
        ring = match.group("ring")
        return VendorReport("reset", body, "amd", pci, detail=f"ring {ring} reset succeeded" if ring else "succeeded")
    if _VRAM_LOST.match(body):
        return VendorReport("reset", body, "amd", pci, detail="VRAM lost")
    match = _RESET_FAILED.match(body)
    if match is not None:
        error = next((int(e) for e in match.group("e1", "e2", "e3", "e4") if e is not None), None)
        if error == 0:
            return None
        named = normalise_pci(match.group("bdf")) if match.group("bdf") else None
        return VendorReport("reset_failed", body, "amd", pci or named, detail="reset failed")
    if _INIT_FAILED.match(body):
        return VendorReport("reset_failed", body, "amd", pci, detail="GPU init failed")
    match = _PSP_FAILED.match(body)
    if match is not None:
        if match.group("psp"):
            detail = f"PSP {match.group('psp')} failed"
        elif match.group("block"):
            detail = f"{match.group('phase')} of IP block {match.group('block')} failed"
        else:
            detail = f"GPU {match.group('step') or 'PSP ring creation'} failed"
        return VendorReport("reset_failed", body, "amd", pci, detail=detail)
    match = _PROBE_FAILED.match(body)
    if match is not None:
        named = normalise_pci(match.group("bdf")) if match.group("bdf") else None
        return VendorReport("reset_failed", body, "amd", pci or named, detail="GPU init failed (probe)")
    if _LOST.match(body):
        return VendorReport("fallen_off_bus", body, "amd", pci, detail="lost from bus")
    return None


class VendorLines:
    """Reads amdgpu and habanalabs lines; remembers which PCI address each habanalabs `hlN` device stands for."""

    def __init__(self) -> None:
        self.hl_pci: dict[str, str] = {}
        # the GPU whose reset went on to resume last: older kernels print `[drm] VRAM is lost due to GPU reset!`
        # without a device, right after that GPU's `GPU reset succeeded, trying to resume`
        self._resuming: str | None = None

    def read(self, message: str) -> VendorReport | None:
        """The report one kernel message makes, if it is an amdgpu or habanalabs fault line."""
        if not holds_any(message, TRIGGER_WORDS):
            return None
        head = _AMD_DEVICE.match(message)
        if head is not None:
            report = _amd_fault(_body(message[head.end() :]), normalise_pci(head.group("dev")))
            if report is not None and report.message.endswith("trying to resume"):
                self._resuming = report.pci
            return report
        head = _HL_DEVICE.match(message)
        if head is not None:
            return self._habanalabs(head.group("dev"), _body(message[head.end() :]))
        bare = _BARE.match(message)
        if bare is not None:
            body = _body(message[bare.end() :])
            return _amd_fault(body, None) if bare.group("drv") == "amdgpu" else self._habanalabs(None, body)
        drm = _DRM.match(message)
        if drm is not None and (drm.group("module") in (None, "amdgpu")):
            report = _amd_fault(_body(message[drm.end() :]), None)
            resumed = report is not None and (report.detail == "VRAM lost" or report.kind == "reset_failed")
            if report is not None and resumed and report.pci is None and self._resuming is not None:
                report = replace(report, pci=self._resuming)  # the PSP or an IP block failing that GPU's resume
            return report
        return None

    def _habanalabs(self, device: str | None, body: str) -> VendorReport | None:
        name = device if device is not None and device.startswith("hl") else None
        pci = normalise_pci(device) if device is not None and name is None else self.hl_pci.get(name or "")
        added = _HL_ADDED.match(body) or _HL_RESET_OK.match(body)
        if added is not None and name is not None:
            named = normalise_pci(added.group("bdf"))
            if named is not None:
                self.hl_pci[name] = pci = named
        report = _habanalabs_fault(body)
        if report is None:
            return None
        kind, detail, severity = report
        init = _HL_INIT_FAILED.match(body)
        named = _named_bdf(body)
        if init is not None and init.group("hl") and pci is not None:  # `habanalabs <bdf>: ... initialize hlN`
            self.hl_pci[init.group("hl")] = pci
        pci = pci or named
        if pci is None and name is not None:
            detail = f"{detail} ({name})"
        return VendorReport(kind, body, "intel", pci, None, severity, 1 if severity else None, detail)


def _named_bdf(body: str) -> str | None:
    """The PCI address a habanalabs message names in its text (`<bdf> Failed to reset!`, `the <bdf> device`)."""
    for pattern in (_HL_RESET_FAILED, _HL_RESET_OK, _HL_INIT_FAILED):
        match = pattern.match(body)
        if match is not None and match.group("bdf"):
            return normalise_pci(match.group("bdf"))
    return None


def _habanalabs_fault(body: str) -> tuple[EventKind, str, RasSeverity | None] | None:
    """(kind, detail, severity) of a habanalabs fault line; None for any other line."""
    if _HL_INIT_FAILED.match(body):
        return "reset_failed", "init failed: device NOT usable", None
    if _HL_RESET_BEGIN.match(body):
        return "reset", "DEVICE_RESET: reset begin", None
    if _HL_RESET_OK.match(body):
        return "reset", "DEVICE_RESET: succeeded", None
    match = _HL_RESET_FAILED.match(body)
    if match is not None:
        what = match.group("what")
        detail = "device NOT usable after reset" if what.startswith("Failed to reset") else what.split(",")[0].lower()
        return "reset_failed", detail, None
    if _HL_CS_TIMEOUT.match(body):
        return "hang", "CS_TIMEOUT", None
    if _HL_HEARTBEAT.match(body):
        return "hw_error", "CRITICL_FW_ERR: heartbeat failed", "fatal"
    match = _HL_IRQ.match(body)
    if match is not None:
        name = match.group("name")
        if "RAZWI" in name or "PAGE_FAULT" in name:
            return "hw_error", name, None
        severity: RasSeverity | None = (
            "uncorrectable" if name.endswith("_DERR") else "correctable" if name.endswith("_SERR") else None
        )
        return "hw_error", name, severity
    if _HL_PAGE_FAULT.match(body):
        return "hw_error", "PAGE_FAULT", None
    if "RAZWI" in body:
        return "hw_error", "RAZWI", None
    match = _HL_ECC.match(body)
    if match is not None:
        event = match.group("event") or "ECC"
        return "hw_error", event, "uncorrectable" if match.group("crit") != "0" else "correctable"
    return None


def _body(text: str) -> str:
    """The driver's own words: without the `amdgpu: ` prefix, the DRM print prefix and the `{N}` RAS event number."""
    text = text.removeprefix("amdgpu: ")
    drm = _DRM.match(text)
    if drm is not None:
        text = text[drm.end() :]
    event_id = _EVENT_ID.match(text)
    if event_id is not None:
        text = text[event_id.end() :]
    return text.strip()
