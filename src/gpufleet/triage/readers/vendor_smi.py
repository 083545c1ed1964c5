"""AMD's amd-smi and rocm-smi and Intel Gaudi's hl-smi, read by their parsers and judged as an engineer reads them.

Memory health is health.gpu_memory's judgement, the one NVIDIA's nvidia-smi and a dcgm-exporter scrape get:
- amd-smi `metric` / `--json` ECC totals (amdsmi `amdsmi_get_gpu_total_ecc_count`: correctable, uncorrectable,
  deferred since the driver loaded); rocm-smi prints the same counts only in its `--showrasinfo` tables;
- hl-smi: `-q`'s "Replaced Rows" (rows replaced for double-bit errors, and a replacement pending until the next
  reset), `-Q ecc.errors.uncorrected...` CSV fields, and the table's third column: "Volatile Uncorr. ECC" before
  SynapseAI 1.20, "Volatile Uncor-Events" from 1.20 (the release that added the "Nic Driver Version" line), which
  counts every uncorrectable event the driver saw, not only memory ECC: a warning to look closer, not an RMA.
Clock throttling the tool itself reports as active (amd-smi `THROTTLE_STATUS: THROTTLED`, hl-smi -q's "Clocks
Throttle Reasons" Thermal or Power Slowdown "Active") is a warning. Temperatures are judged by health.temperature
against the limits the output itself carries (`amd-smi static`'s LIMIT section: SLOWDOWN_/SHUTDOWN_HOTSPOT and
_VRAM/_MEM temperatures), else the catalog's for the model: on AMD the hotspot (junction) reading, or the one
temperature the default view and an Edge-only table print (judging an edge reading by the hotspot's limits can only
under-call: the edge is the cooler sensor), and the memory (HBM) reading by the memory limits; on Gaudi the hottest
on-chip sensor. A model the catalog holds no limit for, with no limit in the output, has its temperatures listed but
not judged (Intel publishes none for Gaudi; hl-smi prints none).
A report that shows no health reading at all (`amd-smi list`, `static`, `partition`, the Concise table) is listed,
with no verdict: it cannot say a GPU is healthy."""

from __future__ import annotations

from collections.abc import Iterable

from gpufleet.catalog import load_gpu_models
from gpufleet.catalog.gpus import GpuModelSpec
from gpufleet.health.gpu_memory import MemoryReading, judge_memory
from gpufleet.health.temperature import TemperatureLimits, catalog_limits, judge_temperature, valid_limit
from gpufleet.model import Severity
from gpufleet.parsers.amd.amd_smi import AmdGpuRecord, AmdSmiReport
from gpufleet.parsers.amd.amd_smi_default import parse_amd_smi_output
from gpufleet.parsers.amd.rocm_smi import parse_rocm_smi
from gpufleet.parsers.gaudi.hl_smi import AipRecord, HlSmiReport, parse_hl_smi
from gpufleet.triage.readers.common import bounded_text
from gpufleet.triage.report import TriageFinding, TriageReport

_THROTTLE_FIX = "check cooling and power delivery; read the GPU's temperatures and power again under load"


def _amd_entity(gpu: AmdGpuRecord) -> str:
    return " ".join(p for p in (f"GPU {gpu.index}", gpu.bdf or "") if p)


def _amd_has_health(gpu: AmdGpuRecord) -> bool:
    return (
        gpu.ecc.uncorrectable is not None
        or any(b.uncorrectable is not None for b in gpu.ecc_blocks.values())
        or (gpu.throttle_status is not None)
    )


def _spec(model: str | None) -> GpuModelSpec | None:
    """The catalog's spec for a model the parser named (`mi300x`, `gaudi2`), or None."""
    return load_gpu_models().get(model) if model else None


def _temperature(temp: float | None, limits: TemperatureLimits, what: str, entity: str, report: TriageReport) -> bool:
    """One temperature against its limits; True when it was over one (a finding filed)."""
    issue = judge_temperature(temp, limits, what) if temp is not None else None
    if issue is not None:
        report.findings.append(TriageFinding(issue.check, issue.severity, issue.message, entity, issue.code, issue.fix))
    return issue is not None


def _judge_amd_temperatures(gpu: AmdGpuRecord, entity: str, report: TriageReport) -> bool:
    hotspot = TemperatureLimits(valid_limit(gpu.hotspot_shutdown_c), valid_limit(gpu.hotspot_slowdown_c))
    limits = hotspot.over(catalog_limits(_spec(gpu.model)))
    reading = next((t for t in (gpu.temp_hotspot_c, gpu.temp_c, gpu.temp_edge_c) if t is not None), None)
    over = _temperature(reading, limits, "GPU", entity, report)
    memory = max([t for t in (gpu.temp_mem_c, *gpu.temp_hbm_c) if t is not None], default=None)
    mem_limits = TemperatureLimits(valid_limit(gpu.mem_shutdown_c), valid_limit(gpu.mem_slowdown_c))
    return _temperature(memory, mem_limits, "memory", entity, report) or over


def _judge_amd(smi: AmdSmiReport, report: TriageReport) -> None:
    health = False
    for gpu in smi.gpus:
        entity = _amd_entity(gpu)
        health |= _amd_has_health(gpu)
        health |= _judge_amd_temperatures(gpu, entity, report)
        blocks = {name: b.uncorrectable for name, b in gpu.ecc_blocks.items() if b.uncorrectable}
        uncorrectable = gpu.ecc.uncorrectable if gpu.ecc.uncorrectable is not None else sum(blocks.values()) or None
        for issue in judge_memory(MemoryReading(uncorrectable=uncorrectable)):
            where = f" (in {', '.join(sorted(blocks))})" if blocks else ""
            report.findings.append(
                TriageFinding(issue.check, issue.severity, issue.message + where, entity, issue.code, issue.fix)
            )
        if gpu.ecc.deferred:
            report.findings.append(
                TriageFinding(
                    "ecc", Severity.warning, f"{gpu.ecc.deferred} deferred ECC error(s): poisoned data left in "
                    "memory, its page retired", entity, "deferred ECC", "watch the count; reset the GPU when idle",
                )
            )  # fmt: skip
        if (gpu.throttle_status or "").upper() == "THROTTLED":
            report.findings.append(
                TriageFinding(
                    "clocks", Severity.warning, "amd-smi reports the GPU THROTTLED", entity, "throttled", _THROTTLE_FIX
                )
            )
    if not health:
        report.judged = False
        report.notes.append(
            f"{smi.tool} {smi.format} shows no health reading (ECC counts, throttling): run `amd-smi metric` "
            "(or `rocm-smi --showrasinfo all`) to judge the GPUs"
        )
    report.notes.extend(f"did not read: {p}" for p in smi.problems[:5])


def read_amd_smi(lines: Iterable[str], source: str) -> TriageReport:
    report = TriageReport("amd-smi", source)
    _judge_amd(parse_amd_smi_output(bounded_text(lines, report), source=source), report)
    return report


def read_rocm_smi(lines: Iterable[str], source: str) -> TriageReport:
    report = TriageReport("rocm-smi", source)
    _judge_amd(parse_rocm_smi(bounded_text(lines, report), source=source), report)
    return report


# -- hl-smi ----------------------------------------------------------------------------------------------------
def _aip_entity(aip: AipRecord) -> str:
    parts = [f"AIP {aip.index}" if aip.index is not None else "", aip.bus_id or ""]
    return " ".join(p for p in parts if p) or "AIP"


def _judge_aip(aip: AipRecord, smi: HlSmiReport, report: TriageReport) -> bool:
    """Judge one AIP; True when it shows a health reading."""
    entity = _aip_entity(aip)
    events_only = smi.format == "table" and smi.nic_driver_version is not None
    uncorrected = [v for k, v in aip.ecc_errors.items() if "uncorrected" in k and v is not None]
    uncorrectable = sum(uncorrected) if uncorrected else (None if events_only else aip.uncorrected_events)
    reading = MemoryReading(
        uncorrectable=uncorrectable,
        remapped_uncorrectable=aip.replaced_rows_dbe,
        remap_pending=aip.replaced_rows_pending,
    )
    for issue in judge_memory(reading):
        report.findings.append(TriageFinding(issue.check, issue.severity, issue.message, entity, issue.code, issue.fix))
    if events_only and aip.uncorrected_events:
        report.findings.append(
            TriageFinding(
                "events", Severity.warning, f"{aip.uncorrected_events} uncorrectable event(s) since the driver "
                "loaded (hl-smi's Volatile Uncor-Events)", entity, "uncorrectable events",
                "read `hl-smi -q -i <bus id>` (ECC and Replaced Rows) and the habanalabs lines in `dmesg`; reset the "
                "device if the count grows",
            )
        )  # fmt: skip
    hot = _temperature(aip.temp_c, catalog_limits(_spec(aip.model)), "AIP", entity, report)
    active = [name for name, on in aip.throttle_reasons.items() if on and ("Thermal" in name or "Power" in name)]
    if active:
        report.findings.append(
            TriageFinding(
                "clocks",
                Severity.warning,
                f"clocks held down: {', '.join(active)} active",
                entity,
                "throttled",
                _THROTTLE_FIX,
            )
        )
    return (
        any(
            v is not None
            for v in (uncorrectable, aip.replaced_rows_dbe, aip.replaced_rows_pending, aip.uncorrected_events or None)
        )
        or bool(aip.throttle_reasons)
        or hot
    )


def _judge_lost_aips(smi: HlSmiReport, report: TriageReport) -> bool:
    """-q's `Attached AIPs : N` against the `[i] AIP` blocks it printed: an index missing below the highest one shown
    is a device the driver counts but hl-smi could not read (a cut paste loses the last blocks, not a middle one; a
    single block is `-i <bus id>`'s). True when it judged the count."""
    shown = {a.index for a in smi.aips if a.index is not None}
    if smi.attached is None or len(shown) < 2:
        return False
    missing = sorted(set(range(max(shown))) - shown)
    for index in missing:
        report.findings.append(
            TriageFinding(
                "device", Severity.critical, f"AIP {index} is attached ({smi.attached} AIPs) but hl-smi -q printed no "
                "block for it: the device is lost to the driver or cannot be opened", f"AIP {index}", "AIP missing",
                "read the habanalabs lines in `dmesg` for this device; reset it (`hl-smi -r`) or reboot the node, and "
                "replace it if it does not come back",
            )
        )  # fmt: skip
    tail = smi.attached - max(shown) - 1
    if tail > 0:
        report.notes.append(
            f"{smi.attached} AIPs attached, blocks shown up to AIP {max(shown)}: the rest were cut from the paste, or "
            "not printed"
        )
    return bool(missing)


def read_hl_smi(lines: Iterable[str], source: str) -> TriageReport:
    report = TriageReport("hl-smi", source)
    smi = parse_hl_smi(bounded_text(lines, report), source=source)
    health = False
    for aip in smi.aips:
        health |= _judge_aip(aip, smi, report)
    if (smi.format == "table" and smi.nic_driver_version is None) or smi.format == "table":
        health = health or any(a.uncorrected_events is not None for a in smi.aips)
    health |= _judge_lost_aips(smi, report)
    if not health:
        report.judged = False
        report.notes.append("this hl-smi output shows no health reading (ECC, replaced rows): run `hl-smi -q`")
    report.notes.extend(f"did not read: {p}" for p in smi.problems[:5])
    return report
