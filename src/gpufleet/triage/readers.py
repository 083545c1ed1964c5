"""One reader per format: cleaned lines in, a judged `TriageReport` out. Each reuses the parser the rest of gpufleet
runs on the same tool's output (the agent's kernel-log parser and Xid policy, the nvidia-smi and dcgmi parsers,
NCCL diagnosis), so triage and the fleet agree about what a line means."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from gpufleet.errors import GpufleetError
from gpufleet.health.xid_policy import Action, XidPolicy, XidSeverity, classify, load_policy
from gpufleet.model.kernel import KernelEvent
from gpufleet.sources.dcgmi import DiagTestResult, parse_diag
from gpufleet.sources.kmsg import KmsgParser
from gpufleet.sources.nvidia_smi import GpuRecord, NvidiaSmiReport, parse_query
from gpufleet.sources.nvidia_smi_table import parse_table
from gpufleet.triage.report import Severity, TriageFinding, TriageReport

MAX_TEXT = 64 * 1024 * 1024  # a whole-text parser never gets more than this (kernel logs stream instead)
MAX_FINDINGS = 500  # per input; a log with more says how many were left out

Reader = Callable[[Iterable[str], str], TriageReport]

_CRITICAL_ACTIONS = {Action.RESET_GPU, Action.RESTART_BM, Action.RESTART_VM, Action.CHECK_MECHANICALS}


def _bounded_text(lines: Iterable[str], report: TriageReport) -> str:
    """The lines as one text for a whole-text parser, up to MAX_TEXT (a note says when more was left unread)."""
    parts: list[str] = []
    size = 0
    for line in lines:
        size += len(line) + 1
        if size > MAX_TEXT:
            report.notes.append(f"only the first {MAX_TEXT // (1024 * 1024)} MiB were read")
            report.complete = False
            break
        parts.append(line)
    return "\n".join(parts)


# --- kernel log ---------------------------------------------------------------------------------------------------


def _kernel_severity(event: KernelEvent, policy: XidPolicy) -> tuple[Severity, str, str]:
    verdict = classify(event, policy)
    if event.kind in ("fallen_off_bus", "reset_required"):
        return "critical", verdict.action.value, verdict.reason
    if verdict.action is Action.IGNORE:
        return "info", verdict.action.value, verdict.reason
    if verdict.severity is XidSeverity.FATAL or verdict.action in _CRITICAL_ACTIONS:
        return "critical", verdict.action.value, verdict.reason
    return "warning", verdict.action.value, verdict.reason


def read_kernel_log(lines: Iterable[str], source: str) -> TriageReport:
    """Xid, SXid, fallen-off-the-bus and reset-required reports, judged by the Xid policy, line by line."""
    report = TriageReport("kernel-log", source)
    parser = KmsgParser()
    policy = load_policy()
    events: list[KernelEvent] = []
    dropped = 0
    for line in lines:
        for event in parser.feed_line(line):
            if len(events) < MAX_FINDINGS:
                events.append(event)
            else:
                dropped += 1
    tail = parser.finish()
    events += tail[: max(0, MAX_FINDINGS - len(events))]
    for event in events:
        severity, action, reason = _kernel_severity(event, policy)
        code = (
            f"Xid {event.xid}" if event.kind == "xid" else f"SXid {event.sxid}" if event.kind == "sxid" else event.kind
        )
        report.findings.append(
            TriageFinding(
                check=event.kind,
                severity=severity,
                entity=f"PCI {event.pci}" if event.pci else (event.sxid_detail.switch if event.sxid_detail else ""),
                code=code,
                message=event.message if event.known else f"{event.message} (a code NVIDIA's catalog does not list)",
                fix=f"{action}: {reason}" if reason else action,
                evidence=[event.raw],
            )
        )
    if dropped:
        report.notes.append(f"{dropped} more GPU fault reports not listed (first {MAX_FINDINGS} shown)")
    rejected = parser.scan.rejected
    for bad in rejected[:20]:
        report.findings.append(
            TriageFinding(
                "unreadable",
                "info",
                f"line {bad.line} looks like a GPU fault report but cannot be read: {bad.reason}",
                code="unreadable",
                evidence=[bad.raw],
            )
        )
    if not events:
        if rejected:  # the only GPU lines could not be read: saying healthy would be a guess
            report.judged = False
            report.notes.append("no readable GPU fault report; the lines that look like one are listed")
        else:
            report.notes.append("no GPU fault report (Xid, SXid, fallen off the bus) in this log")
    return report


# --- nvidia-smi ---------------------------------------------------------------------------------------------------


def _gpu_name(gpu: GpuRecord) -> str:
    parts = [f"GPU {gpu.index}" if gpu.index is not None else "", gpu.pci or ""]
    return " ".join(p for p in parts if p) or (gpu.uuid or "GPU")


def _judge_gpu(gpu: GpuRecord, report: TriageReport) -> None:
    entity = _gpu_name(gpu)

    def add(check: str, severity: Severity, code: str, message: str, fix: str) -> None:
        report.findings.append(TriageFinding(check, severity, message, entity, code, fix))

    if gpu.remap_failure:
        add("row-remap", "critical", "row remap failure", "a row remap failed: the memory cannot be repaired",
            "drain the node and replace the GPU (RMA)")  # fmt: skip
    elif gpu.remap_pending:
        add("row-remap", "warning", "row remap pending", "a row remap is pending and takes effect at the next reset",
            "reset the GPU (or reboot) at a convenient time")  # fmt: skip
    if gpu.retired_pending:
        add("page-retirement", "warning", "page retirement pending", "a retired page takes effect at the next reset",
            "reset the GPU at a convenient time")  # fmt: skip
    vol = gpu.ecc_volatile
    counted = [v for v in (vol.sram_uncorrectable, vol.dram_uncorrectable, vol.dbe_total) if v is not None]
    uncorrected = sum(counted) if counted else gpu.ecc_volatile_uncorrected_total
    if uncorrected:
        add("ecc", "critical", "volatile uncorrectable ECC", f"{uncorrected} uncorrectable ECC error(s) since the "
            "last reset", "drain, reset the GPU and run `dcgmi diag -r 3`; replace it if they return")  # fmt: skip
    width, width_max = gpu.pcie_width_current, gpu.pcie_width_max
    if width is not None and width_max is not None and width < width_max:
        add("pcie", "warning", "PCIe width", f"PCIe link at x{width}, capable of x{width_max}",
            "reseat the GPU or riser; check the slot")  # fmt: skip
    for reason in gpu.active_clock_event_reasons:
        if reason in ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown"):
            add("clocks", "warning", reason, f"clocks held down: {reason}",
                "check cooling and power delivery (`nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER`)")  # fmt: skip


def _judge_nvidia_smi(smi: NvidiaSmiReport, report: TriageReport) -> None:
    for message in smi.errors:
        report.findings.append(TriageFinding("nvidia-smi", "critical", message, fix="check the driver (`dmesg`)"))
    for pci, why in smi.unreachable.items():
        report.findings.append(
            TriageFinding(
                "gpu-lost",
                "critical",
                f"nvidia-smi cannot reach this GPU: {why}",
                f"PCI {pci}",
                "unreachable",
                "drain the node; reboot it, and replace the GPU if it stays lost",
            )
        )
    for gpu in smi.gpus:
        _judge_gpu(gpu, report)
    if not smi.gpus and not smi.errors and not smi.unreachable:
        report.judged = False
        report.notes.append("no GPU section found")


def read_nvidia_smi_q(lines: Iterable[str], source: str) -> TriageReport:
    report = TriageReport("nvidia-smi-q", source)
    _judge_nvidia_smi(parse_query(_bounded_text(lines, report), source=source), report)
    return report


def read_nvidia_smi_table(lines: Iterable[str], source: str) -> TriageReport:
    report = TriageReport("nvidia-smi-table", source)
    _judge_nvidia_smi(parse_table(_bounded_text(lines, report), source=source), report)
    return report


# --- dcgmi diag ---------------------------------------------------------------------------------------------------


def read_dcgmi_diag(lines: Iterable[str], source: str) -> TriageReport:
    report = TriageReport("dcgmi-diag", source)
    diag = parse_diag(_bounded_text(lines, report), source=source)
    for test in diag.tests:
        # a test with no per-GPU result lines (a Deployment error) stands for all GPUs with its own status
        results = test.results or [DiagTestResult(test.status, None)]
        for result in results:
            if result.status not in ("Fail", "Warn"):
                continue
            gpus = "all GPUs" if result.gpus is None else "GPU " + ", ".join(map(str, result.gpus))
            errors = [m.text for m in test.messages if m.severity == "error"] or [m.text for m in test.messages]
            report.findings.append(
                TriageFinding(
                    check=f"dcgmi: {test.name}",
                    severity="critical" if result.status == "Fail" else "warning",
                    message=f"{test.name} {result.status.lower()}ed on {gpus}" + (f": {errors[0]}" if errors else ""),
                    entity=gpus,
                    code=test.name,
                    fix="drain the node and rerun `dcgmi diag -r 3`; a repeated hardware failure means replacement",
                    evidence=errors,
                )
            )
    if not diag.tests:
        report.judged = False
        report.notes.append("no diagnostic results found")
    return report


# --- NCCL ---------------------------------------------------------------------------------------------------------


def read_nccl_log(lines: Iterable[str], source: str) -> TriageReport:
    from gpufleet.nccl.diagnose import diagnose_texts

    report = TriageReport("nccl-log", source)
    dx = diagnose_texts([(source, _bounded_text(lines, report))])
    if dx.cls == "unknown":
        report.judged = False
        report.notes.append(dx.summary)
        if dx.evidence:
            report.findings.append(TriageFinding("nccl", "info", dx.summary, code="unknown", fix=dx.fix,
                                                 evidence=dx.evidence))  # fmt: skip
        return report
    where = ", ".join([*(f"rank {r}" for r in dx.ranks), *dx.hosts])
    report.findings.append(TriageFinding("nccl", "critical", dx.summary, where, dx.cls, dx.fix, dx.evidence))
    if dx.also_seen:
        report.notes.append(f"also seen (symptoms of the cause, or secondary): {', '.join(dx.also_seen)}")
    return report


READERS: dict[str, Reader] = {
    "kernel-log": read_kernel_log,
    "nvidia-smi-q": read_nvidia_smi_q,
    "nvidia-smi-table": read_nvidia_smi_table,
    "dcgmi-diag": read_dcgmi_diag,
    "nccl-log": read_nccl_log,
}


def read(fmt: str, lines: Iterable[str], source: str) -> TriageReport:
    """Judge `lines` as `fmt`; a format without a reader yet, or a parser's refusal, is `unknown` saying why."""
    reader = READERS.get(fmt)
    if reader is None:
        report = TriageReport(fmt, source, judged=False)
        report.notes.append(f"recognised as {fmt}, which triage cannot judge yet")
        return report
    try:
        return reader(lines, source)
    except GpufleetError as exc:
        report = TriageReport(fmt, source, judged=False)
        report.notes.append(f"could not read it as {fmt}: {exc.message}")
        return report
