"""dcgm-exporter `/metrics`: one scrape of the Prometheus text, judged per GPU.

Series are grouped by GPU (`gpu`, `UUID`/`uuid`, `pci_bus_id`, `hostname`/`Hostname`); a MIG instance's copy of a
GPU-level field (`GPU_I_PROFILE`, `GPU_I_ID`) counts once for its GPU. Field names are dcgm-exporter's (the
counters files in catalog/data/dcgm_exporter/), with DCGM 4.6's new names (dcgm_fields.h) and the 1.x `dcgm_*`
names as aliases. What one scrape can show is judged: the Xids (their codes alone, read as the shipped Xid alerts
read them: health.xid_rating), uncorrectable memory errors, row remaps and page retirements (health.gpu_memory, as
the agent's GPU detector judges them), clock-event reasons, temperatures against the GPU's limits, DCGM's health
watches. Error counters (PCIe replays, NVLink CRC, replay and recovery errors) are totals since the driver loaded: a
rate needs two scrapes, so they are only reported. DCGM's blank values (9223372036854775794 and the like) mean "no
value" and are dropped.

The Prometheus text has no end marker, so a scrape cut between two families is found by what it lacks: a GPU
without the Xid field (on in every dcgm-exporter counters file) is never called healthy, nor is a scrape that stops
before the last memory-health field of the default counters (DCGM_FI_DEV_ROW_REMAP_FAILURE, id 395): dcgm-exporter
writes a GPU's families in DCGM field-id order (`catalog.dcgm_fields.field_ids`), so a cut loses the highest ids first.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache

from gpufleet.catalog import load_dcgm_fields, model_for_product_name
from gpufleet.catalog.clock_events import clock_events_of
from gpufleet.catalog.dcgm_fields import field_ids
from gpufleet.catalog.xid import load_xid_catalog
from gpufleet.health.gpu_memory import MemoryReading, judge_memory
from gpufleet.health.temperature import TemperatureLimits, catalog_limits, judge_temperature, valid_limit
from gpufleet.health.xid_rating import code_reading
from gpufleet.model import Severity
from gpufleet.parsers.prometheus_text import BadLine, Metadata, Sample, exact_int, parse_line
from gpufleet.triage.readers.common import MAX_FINDINGS, bounded_lines
from gpufleet.triage.report import TriageFinding, TriageReport

MAX_GPUS = 4096
MAX_FIELDS = 2048  # distinct fields kept per GPU
MAX_FAMILIES = 10_000
MAX_KEPT = 16 * 1024 * 1024  # characters of sample lines kept as evidence, whatever the scrape's size

# field -> the names that carry it (dcgm-exporter counters files; DCGM 4.6 dcgm_fields.h renames; 1.x names)
XID = frozenset({"DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_XID_ERROR", "dcgm_xid_errors"})
XID_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"  # labels xid, window_size_in_ms
CLOCK_REASONS = frozenset({"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"})
CLOCK_EVENTS_COUNT = "DCGM_EXP_CLOCK_EVENTS_COUNT"  # labels clock_event, window_size_in_ms
HEALTH_STATUS = "DCGM_EXP_GPU_HEALTH_STATUS"  # labels health_watch, health_error_code; value 0/10/20
GPU_TEMP = frozenset({"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_GPU_TEMP_CELSIUS", "dcgm_gpu_temp"})
MEM_TEMP = frozenset({"DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_MEMORY_TEMP_CELSIUS", "dcgm_memory_temp"})
SLOWDOWN_TEMP = frozenset({"DCGM_FI_DEV_SLOWDOWN_TEMP", "DCGM_FI_DEV_GPU_TEMP_SLOWDOWN_CELSIUS"})
SHUTDOWN_TEMP = frozenset({"DCGM_FI_DEV_SHUTDOWN_TEMP", "DCGM_FI_DEV_GPU_TEMP_SHUTDOWN_CELSIUS"})
GPU_MAX_OP_TEMP = frozenset({"DCGM_FI_DEV_GPU_MAX_OP_TEMP", "DCGM_FI_DEV_GPU_MAX_OP_TEMP_CELSIUS"})
MEM_MAX_OP_TEMP = frozenset({"DCGM_FI_DEV_MEM_MAX_OP_TEMP", "DCGM_FI_DEV_MEMORY_MAX_OP_TEMP_CELSIUS"})
DBE_VOLATILE = frozenset({"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"})
DBE_AGGREGATE = frozenset({"DCGM_FI_DEV_ECC_DBE_AGG_TOTAL"})
REMAP_UNCORRECTABLE = frozenset(
    {"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL"}
)
REMAP_FAILURE = frozenset({"DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_ROW_REMAP_FAILED"})
REMAP_PENDING = frozenset({"DCGM_FI_DEV_ROW_REMAP_PENDING"})
RETIRED_PENDING = frozenset({"DCGM_FI_DEV_RETIRED_PENDING", "DCGM_FI_DEV_PAGE_RETIRED_PENDING"})
RETIRED = frozenset(
    {"DCGM_FI_DEV_RETIRED_SBE", "DCGM_FI_DEV_PAGE_RETIRED_SBE_TOTAL", "DCGM_FI_DEV_RETIRED_DBE",
     "DCGM_FI_DEV_PAGE_RETIRED_DBE_TOTAL"}
)  # fmt: skip
# error totals a single scrape cannot turn into a rate
COUNTERS = re.compile(
    r"^(?:DCGM_FI_DEV_PCIE_REPLAY_(?:COUNTER|TOTAL)|dcgm_pcie_replay_counter"
    r"|DCGM_FI_DEV_NVLINK_(?:CRC_FLIT|CRC_DATA|REPLAY|RECOVERY)_ERROR(?:_COUNT)?_(?:TOTAL|L\d+)"
    r"|DCGM_FI_DEV_NVLINK_(?:CRC_FLIT|CRC_DATA|REPLAY|RECOVERY)_ERROR_L\d+_TOTAL)$"
)
_HARMFUL_CLOCK_EVENTS = {"hw_slowdown", "hw_thermal", "hw_power_brake", "sw_thermal"}
_INT64_BLANK = 0x7FFFFFFFFFFFFFF0  # dcgm_structs.h DCGM_INT64_BLANK; NOT_FOUND, NOT_SUPPORTED, ... follow it
_INT32_BLANK = 0x7FFFFFF0
_FP64_BLANK = 140737488355328.0


@cache
def reach_field_id() -> int:
    """The highest field id among the health fields dcgm-exporter's default counters file switches on
    (DCGM_FI_DEV_ROW_REMAP_FAILURE, 395): a scrape that stops before it may have lost them."""
    judged = XID | REMAP_FAILURE | REMAP_UNCORRECTABLE | REMAP_PENDING | DBE_VOLATILE | RETIRED | RETIRED_PENDING
    ids = field_ids()
    return max(ids[f.name] for f in load_dcgm_fields() if f.enabled_by_default and f.name in judged and f.name in ids)


def is_blank(sample: Sample) -> bool:
    """A DCGM blank (no value, not found, not supported, not permissioned) that leaked into the scrape."""
    whole = exact_int(sample)
    if whole is not None:
        return whole >= _INT64_BLANK or _INT32_BLANK <= whole <= _INT32_BLANK + 15
    return _FP64_BLANK <= sample.value <= _FP64_BLANK + 15 or sample.value >= 9.2e18


@dataclass
class _Gpu:
    """What one scrape says about one GPU."""

    gpu: str
    uuid: str
    host: str
    pci: str = ""
    model: str = ""
    mig: set[str] = field(default_factory=set)
    families: set[str] = field(default_factory=set)
    values: dict[str, Sample] = field(default_factory=dict)  # field name -> its first sample
    xid_counts: list[Sample] = field(default_factory=list)
    clock_counts: list[Sample] = field(default_factory=list)
    health: list[Sample] = field(default_factory=list)
    counters: dict[str, list[Sample]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        where = self.pci or self.uuid
        text = f"GPU {self.gpu}" + (f" ({where})" if where else "")
        return f"{self.host} {text}" if self.host else text

    def first(self, names: frozenset[str]) -> Sample | None:
        for name in names:
            if name in self.values:
                return self.values[name]
        return None


class _Scrape:
    def __init__(self) -> None:
        self.gpus: dict[tuple[str, str, str], _Gpu] = {}
        self.families: dict[str, int] = {}  # family with a HELP/TYPE line -> its samples
        self.last_family = ""
        self.bad: list[BadLine] = []
        self.last_bad = False
        self.blanks = 0
        self.samples = 0
        self.dropped_gpus = 0
        self.non_gpu = 0
        self.max_field_id = -1  # the highest DCGM field id with a sample
        self.kept = 0
        self.overflow = False  # samples past MAX_KEPT, MAX_FIELDS or MAX_FAMILIES were not kept
        self.dcgm_names = False  # any DCGM_FI_* family (the 1.x `dcgm_*` names carry no order)

    def feed(self, text: str, number: int) -> None:
        item = parse_line(text, number)
        if item is None:
            return
        self.last_bad = isinstance(item, BadLine)
        if isinstance(item, BadLine):
            if len(self.bad) < 20:
                self.bad.append(item)
            return
        if isinstance(item, Metadata):
            if item.name in self.families or len(self.families) < MAX_FAMILIES:
                self.families.setdefault(item.name, 0)
            else:
                self.overflow = True
            self.last_family = item.name
            return
        self.samples += 1
        if item.name in self.families:
            self.families[item.name] += 1
        if item.name.startswith("DCGM_FI_"):
            self.dcgm_names = True
            self.max_field_id = max(self.max_field_id, field_ids().get(item.name, -1))
        self._sample(item)

    def _sample(self, sample: Sample) -> None:
        labels = sample.label_map
        gpu = labels.get("gpu")
        if gpu is None:
            self.non_gpu += 1
            return
        uuid = labels.get("UUID") or labels.get("uuid") or labels.get("gpu_uuid") or ""
        host = labels.get("hostname") or labels.get("Hostname") or ""
        key = (host[:100], gpu[:40], uuid[:80])
        state = self.gpus.get(key)
        if state is None:
            if len(self.gpus) >= MAX_GPUS:
                self.dropped_gpus += 1
                return
            state = self.gpus[key] = _Gpu(gpu[:40], uuid[:80], host[:100])
        state.pci = state.pci or labels.get("pci_bus_id", "")[:40]
        state.model = state.model or (labels.get("modelName") or labels.get("model_name") or "")[:100]
        if "GPU_I_ID" in labels and len(state.mig) < 64:
            state.mig.add(labels["GPU_I_ID"][:20])
        if len(state.families) < MAX_FIELDS:
            state.families.add(sample.name)
        if is_blank(sample) or math.isnan(sample.value):
            self.blanks += 1
            return
        if "xid" in labels and ("window_size_in_ms" in labels or sample.name == XID_COUNT):
            self._append(state.xid_counts, sample)
        elif "clock_event" in labels:
            self._append(state.clock_counts, sample)
        elif sample.name == HEALTH_STATUS:
            self._append(state.health, sample)
        elif COUNTERS.match(sample.name):
            if sample.name in state.counters or len(state.counters) < MAX_FIELDS:
                self._append(state.counters.setdefault(sample.name, []), sample)
        elif sample.name not in state.values:  # once: a MIG instance's copy of a GPU-level field adds nothing
            self.overflow |= len(state.values) >= MAX_FIELDS
            if len(state.values) < MAX_FIELDS and self._keep(sample):
                state.values[sample.name] = sample

    def _keep(self, sample: Sample) -> bool:
        self.kept += len(sample.text)
        self.overflow |= self.kept > MAX_KEPT
        return self.kept <= MAX_KEPT

    def _append(self, samples: list[Sample], sample: Sample) -> None:
        if len(samples) < 256 and self._keep(sample):
            samples.append(sample)


@dataclass
class _Judge:
    report: TriageReport
    gpu: _Gpu

    def add(self, check: str, severity: Severity, code: str, message: str, fix: str, *samples: Sample) -> None:
        if len(self.report.findings) < MAX_FINDINGS:
            self.report.findings.append(
                TriageFinding(check, severity, message, self.gpu.name, code, fix, [s.text for s in samples])
            )


def _whole(sample: Sample | None) -> int | None:
    if sample is None:
        return None
    whole = exact_int(sample)
    return whole if whole is not None and 0 <= whole < 2**63 else None


def _xid_severity(code: int) -> tuple[Severity, str]:
    """A series carries only the Xid's code: judged as the shipped Xid alerts judge the same series
    (health.xid_rating's `code_reading`), never by text made up for it. A code whose kernel line decides is a warning
    that says so."""
    reading = code_reading(code)
    if reading.by_line:
        return reading.severity, (
            "fatal or not by what the driver printed with it (an NVLink5 Xid's unit and status, an Xid 64's failure "
            "text, the state an Xid 154 announces), which this series does not carry: judge the kernel line itself "
            "(`gpufleet triage` on the node's `dmesg`, or `gpufleet xid classify`)"
        )
    verdict = reading.verdict
    return reading.severity, f"{verdict.action.value}: {verdict.reason}" if verdict.reason else verdict.action.value


def _judge_xid(judge: _Judge) -> None:
    last = judge.gpu.first(XID)
    code = _whole(last)
    if last is not None and code:
        info = load_xid_catalog().get(code)
        text = last.label("err_msg") or (info.description if info else "")
        message = f"the last Xid DCGM recorded is {code}" + (f" ({text})" if text else "")
        severity, fix = _xid_severity(code)
        judge.add("xid", severity, f"Xid {code}", message + "; the gauge keeps it until DCGM restarts, so it may "
                  "be old", f"{fix} (confirm its time in the kernel log: `dmesg -T | grep Xid`)", last)  # fmt: skip
    for sample in judge.gpu.xid_counts:
        code = _whole_label(sample.label("xid"))
        count = _whole(sample)
        if code is None or not count:
            continue
        window = _whole_label(sample.label("window_size_in_ms"))
        span = f" in the last {window / 60000:g} min" if window else ""
        message = f"Xid {code} {count} time(s){span}"
        severity, fix = _xid_severity(code)
        judge.add("xid", severity, f"Xid {code}", message, fix, sample)


def _whole_label(text: str) -> int | None:
    return int(text) if re.fullmatch(r"\d{1,12}", text) else None


def _flag(sample: Sample | None) -> bool | None:
    return None if sample is None else bool(_whole(sample))


def _judge_memory(judge: _Judge) -> None:
    """The memory-health fields, judged by health.gpu_memory as the agent's GPU detector judges them."""
    gpu = judge.gpu
    dbe, failure = gpu.first(DBE_VOLATILE), gpu.first(REMAP_FAILURE)
    rows, remap_pending = gpu.first(REMAP_UNCORRECTABLE), gpu.first(REMAP_PENDING)
    retired_pending = gpu.first(RETIRED_PENDING)
    retired = [s for name in sorted(RETIRED) if (s := gpu.values.get(name)) is not None]
    reading = MemoryReading(
        uncorrectable=_whole(dbe),
        remap_failure=_flag(failure),
        remapped_uncorrectable=_whole(rows),
        retired_pages=sum(_whole(s) or 0 for s in retired) if retired else None,
        retired_pending=_flag(retired_pending),
        remap_pending=_flag(remap_pending),
    )
    shown: dict[str, list[Sample | None]] = {
        "volatile uncorrectable ECC": [dbe],
        "row remap failure": [failure],
        "remapped rows over limit": [rows],
        "remapped rows": [rows],
        "row remap pending": [remap_pending],
        "retired pages over limit": [*retired],
        "page retirement pending": [retired_pending],
    }
    for issue in judge_memory(reading):
        samples = shown.get(issue.code, [])
        judge.add(issue.check, issue.severity, issue.code, issue.message, issue.fix, *(s for s in samples if s))
    aggregate = gpu.first(DBE_AGGREGATE)
    if aggregate is not None and (count := _whole(aggregate)):
        judge.add("ecc", Severity.info, "aggregate uncorrectable ECC", f"{count} uncorrectable ECC error(s) "
                  "over the GPU's life", "history only; the volatile count says whether it is current",
                  aggregate)  # fmt: skip


def _judge_clocks(judge: _Judge) -> None:
    reasons = judge.gpu.first(CLOCK_REASONS)
    mask = _whole(reasons)
    if reasons is not None and mask:
        harmful = [name for name in clock_events_of(mask) if name in _HARMFUL_CLOCK_EVENTS]
        if harmful:
            judge.add("clocks", Severity.warning, ", ".join(harmful), f"clocks held down now: {', '.join(harmful)} "
                      f"(reasons {mask:#x})", "check cooling and power delivery (`nvidia-smi -q -d "
                      "PERFORMANCE,TEMPERATURE,POWER`)", reasons)  # fmt: skip
    for sample in judge.gpu.clock_counts:
        event, count = sample.label("clock_event"), _whole(sample)
        if event in _HARMFUL_CLOCK_EVENTS and count:
            judge.add("clocks", Severity.warning, event,
                      f"{event} held the clocks down {count} time(s) in the last window",
                      "check cooling and power delivery", sample)  # fmt: skip


def _judge_temperature(judge: _Judge) -> bool:
    """Temperatures against the GPU's own limits (its fields in the scrape, else the catalog's for its model), as
    health.temperature judges them; False when the GPU's temperature cannot be judged."""
    gpu = judge.gpu
    temp = gpu.first(GPU_TEMP)
    if temp is None or not math.isfinite(temp.value):
        return temp is None
    spec = model_for_product_name(gpu.model) if gpu.model else None
    own = TemperatureLimits(
        _limit(gpu.first(SHUTDOWN_TEMP)), _limit(gpu.first(SLOWDOWN_TEMP)), _limit(gpu.first(GPU_MAX_OP_TEMP))
    )
    limits = own.over(catalog_limits(spec))
    issue = judge_temperature(temp.value, limits)
    if issue is not None:
        judge.add(issue.check, issue.severity, issue.code, issue.message, issue.fix, temp)
    memory, memory_limit = gpu.first(MEM_TEMP), _limit(gpu.first(MEM_MAX_OP_TEMP))
    if memory is not None and memory_limit is not None:
        over = judge_temperature(memory.value, TemperatureLimits(max_operating=memory_limit), "memory")
        if over is not None:
            judge.add(over.check, over.severity, over.code, f"memory at {over.message}", "check the GPU's cooling",
                      memory)  # fmt: skip
    return limits.known()


def _limit(sample: Sample | None) -> float | None:
    if sample is None or not math.isfinite(sample.value):
        return None
    return valid_limit(sample.value)


def _judge_health(judge: _Judge) -> None:
    for sample in judge.gpu.health:
        value = _whole(sample)
        severity: Severity | None = Severity.critical if value == 20 else Severity.warning if value == 10 else None
        if severity is not None:
            watch, code = sample.label("health_watch", "?"), sample.label("health_error_code")
            judge.add("dcgm health", severity, code or watch, f"DCGM's {watch} health watch reports "
                      f"{'a failure' if value == 20 else 'a warning'}" + (f": {code}" if code else ""),
                      "run `dcgmi health -c` on the node for the message, then `dcgmi diag -r 2`",
                      sample)  # fmt: skip


def _report_counters(judge: _Judge) -> bool:
    found = False
    for name, samples in sorted(judge.gpu.counters.items()):
        total = sum(_whole(s) or 0 for s in samples)
        if total:
            found = True
            judge.add("error counters", Severity.info, name, f"{total} since the driver loaded ({name})",
                      "a rate needs two "
                      "scrapes: compare with a later scrape, or run `dcgmi health -c`", *samples[:4])  # fmt: skip
    return found


def read_dcgm_exporter_metrics(lines: Iterable[str], source: str) -> TriageReport:
    """Each GPU of one scrape: Xids, memory errors, clock events, temperatures, DCGM health; counters reported."""
    report = TriageReport("dcgm-exporter-metrics", source)
    scrape = _Scrape()
    for number, line in enumerate(bounded_lines(lines, report), start=1):
        scrape.feed(line, number)
    for bad in scrape.bad[:5]:
        report.notes.append(f"line {bad.line} is not Prometheus text ({bad.reason}): {bad.text[:80]!r}")
    if scrape.last_bad and scrape.bad:
        report.complete = False
        report.notes.append("the scrape ends in a line it cannot read: it was cut")
    if scrape.blanks:
        report.notes.append(f"{scrape.blanks} DCGM blank value(s) (no data, not supported) left out")
    if not scrape.gpus:
        report.judged = False
        report.notes.append("no per-GPU DCGM series (with a `gpu` label) in this input")
        return report
    if scrape.dropped_gpus:
        report.complete = False
        report.notes.append(f"more than {MAX_GPUS} GPUs: {scrape.dropped_gpus} series not read")
    if scrape.overflow:
        report.complete = False
        report.notes.append("the scrape holds more series than are kept: some were not judged")
    xid_family = XID_COUNT in scrape.families
    counters = False
    no_limits: dict[str, list[str]] = {}
    no_xid: list[str] = []
    for gpu in scrape.gpus.values():
        judge = _Judge(report, gpu)
        _judge_xid(judge)
        _judge_memory(judge)
        _judge_clocks(judge)
        _judge_health(judge)
        if not _judge_temperature(judge):
            no_limits.setdefault(gpu.model or "its model", []).append(f"GPU {gpu.gpu}")
        counters |= _report_counters(judge)
        if not (xid_family or gpu.first(XID) is not None or gpu.xid_counts):
            no_xid.append(gpu.name)
    if no_xid:
        report.complete = False
        report.notes.append(
            f"no Xid field (DCGM_FI_DEV_XID_ERRORS, on in every dcgm-exporter counters file) for "
            f"{', '.join(no_xid[:8])}{' and more' if len(no_xid) > 8 else ''}: a partial scrape, or a counters file "
            "that leaves it out; cannot say those GPUs are healthy"
        )
    for model, gpus in no_limits.items():
        report.notes.append(f"no temperature limits known for {model} ({', '.join(gpus[:8])}): temperature not judged")
    if counters:
        report.notes.append("error counters are totals since the driver loaded: judging a rate needs two scrapes")
    if scrape.dcgm_names and 0 <= scrape.max_field_id < reach_field_id():
        report.complete = False
        report.notes.append(
            f"the scrape has no field past DCGM field {scrape.max_field_id}: dcgm-exporter writes fields in id order, "
            f"so the memory-health fields (row remap, ECC, retired pages; ids 310-{reach_field_id()}) may have been "
            "cut off"
        )
    _completeness(scrape, report)
    return report


def _completeness(scrape: _Scrape, report: TriageReport) -> None:
    """A scrape cut inside a family leaves it on some GPUs of a model and not on others."""
    by_model: dict[str, list[_Gpu]] = {}
    for gpu in scrape.gpus.values():
        by_model.setdefault(gpu.model, []).append(gpu)
    for gpus in by_model.values():
        every = set().union(*(g.families for g in gpus))
        for gpu in gpus:
            missing = sorted(every - gpu.families)
            if missing:
                report.complete = False
                report.notes.append(f"{gpu.name} has no {', '.join(missing[:3])}, which other GPUs of its model "
                                    "have: the scrape is partial")  # fmt: skip
                break
    last = scrape.last_family
    if last and scrape.families.get(last) == 0 and last not in (XID_COUNT, CLOCK_EVENTS_COUNT):
        report.complete = False
        report.notes.append(f"the scrape ends after the HELP/TYPE of {last} with none of its samples: it was cut")
    if len(report.notes) > 60:
        del report.notes[60:]
