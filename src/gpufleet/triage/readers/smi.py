"""nvidia-smi outputs, read by the parsers the agent uses on the same tool."""

from __future__ import annotations

from collections.abc import Iterable

from gpufleet.sources.nvidia_smi import GpuRecord, NvidiaSmiReport, parse_query
from gpufleet.sources.nvidia_smi_table import parse_table
from gpufleet.triage.readers.common import bounded_text
from gpufleet.triage.report import Severity, TriageFinding, TriageReport


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
    _judge_nvidia_smi(parse_query(bounded_text(lines, report), source=source), report)
    return report


def read_nvidia_smi_table(lines: Iterable[str], source: str) -> TriageReport:
    report = TriageReport("nvidia-smi-table", source)
    _judge_nvidia_smi(parse_table(bounded_text(lines, report), source=source), report)
    return report
