"""nvidia-smi outputs (`-q`, the table, `nvlink -s`, `topo -m`), read by the parsers the agent uses on the same
tool and judged against the GPU catalog where the output names the model; memory health (ECC, row remaps, retired
pages) by health.gpu_memory, as the agent's GPU detector judges the same values."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from functools import lru_cache

from gpufleet.catalog.gpus import GpuModelSpec, model_for_product_name
from gpufleet.health.clock_events import judge_clock_reasons
from gpufleet.health.gpu_memory import MemoryReading, judge_memory
from gpufleet.health.nvlink import EXPECTS_NVLINK, NVLINK_FIX, judge_nvlink, nvlink_design
from gpufleet.health.nvml_access import judge_failure, judge_unreachable
from gpufleet.health.xid_policy import recovery_state, recovery_state_verdict
from gpufleet.health.xid_rating import finding_severity
from gpufleet.model import Severity
from gpufleet.parsers.nvidia.smi import GpuRecord, NvidiaSmiReport, UnreadableValue, parse_query
from gpufleet.parsers.nvidia.smi_csv import parse_query_gpu
from gpufleet.parsers.nvidia.smi_table import parse_table
from gpufleet.parsers.nvidia.smi_values import MEANS, Unreadable
from gpufleet.parsers.nvidia.topo import PCIE_TYPES, TopoMatrix, parse_topo_matrix, read_nvlink_status
from gpufleet.triage.readers.common import MAX_FINDINGS, bounded_text
from gpufleet.triage.report import TriageFinding, TriageReport

MAX_LISTED = 8  # names listed in one message before "and N more"


def _listed(names: list[str]) -> str:
    more = len(names) - MAX_LISTED
    return ", ".join(names[:MAX_LISTED]) + (f" and {more} more" if more > 0 else "")


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _settle(report: TriageReport, cut_short: str | None, partial: str | None, problems: list[str]) -> None:
    """Say how much of the input could be judged.

    A text that surely ends inside a record cannot be judged healthy. One that may lack GPUs or sections (an
    excerpt, or a cut at a record's end) or holds values that did not read is still judged on what it shows when
    that already found something; shown nothing wrong, it could be hiding the fault, so the verdict is unknown."""
    if len(report.findings) > MAX_FINDINGS:
        kept = sorted(range(len(report.findings)), key=lambda i: (-report.findings[i].severity.rank, i))
        dropped = len(report.findings) - MAX_FINDINGS
        report.findings = [report.findings[i] for i in sorted(kept[:MAX_FINDINGS])]
        report.notes.append(f"{dropped} more findings not listed (the {MAX_FINDINGS} most severe are)")
    if cut_short:
        report.complete = False
        report.notes.append(f"the input ends mid-record: {cut_short}")
    found = any(f.severity in (Severity.critical, Severity.warning) for f in report.findings)
    if problems:
        report.notes.append(f"{len(problems)} line(s) or value(s) did not read, e.g. {problems[0]}")
    if partial or problems:
        why = partial or "some values did not read"
        if found:
            report.notes.append(f"judged on what it shows: {why}")
        else:
            report.complete = False
            report.notes.append(f"nothing wrong in what it shows, but {why}")


@lru_cache(maxsize=256)
def _data_centre(name: str | None) -> bool | None:
    """A data-centre GPU (ECC expected on); None when the name does not say."""
    if not name:
        return None
    if re.search(r"geforce|titan|quadro|workstation|rtx (?:a?\d{4}|6000 ada)", name, re.IGNORECASE):
        return False
    if model_for_product_name(name) is not None or re.search(r"\btesla\b", name, re.IGNORECASE):
        return True
    return None


# -- nvidia-smi -q and the table -------------------------------------------------------------------------------
def memory_reading(gpu: GpuRecord) -> MemoryReading:
    """What nvidia-smi shows of a GPU's memory health, for the one judgement of it (health.gpu_memory): the volatile
    uncorrectable ECC count (SRAM and DRAM, or the table's one column), the remap flags and rows remapped for
    uncorrectable errors, the retired pages (single- and double-bit) and their pending flag."""
    vol = gpu.ecc_volatile
    counted = [v for v in (vol.sram_uncorrectable, vol.dram_uncorrectable, vol.dbe_total) if v is not None]
    retired = [v for v in (gpu.retired_sbe, gpu.retired_dbe) if v is not None]
    return MemoryReading(
        uncorrectable=sum(counted) if counted else gpu.ecc_volatile_uncorrected_total,
        remap_failure=gpu.remap_failure,
        remapped_uncorrectable=gpu.remap_uncorrectable,
        retired_pages=sum(retired) if retired else None,
        retired_pending=gpu.retired_pending,
        remap_pending=gpu.remap_pending,
    )


def _gpu_name(gpu: GpuRecord) -> str:
    parts = [f"GPU {gpu.index}" if gpu.index is not None else "", gpu.pci or ""]
    return " ".join(p for p in parts if p) or (gpu.uuid or "GPU")


# -q sections holding the GPU's own state; an error elsewhere (inforom, applications clocks) weighs less
_STATE_SECTIONS = (
    "Product Name", "Performance State", "Fan Speed", "FB Memory Usage", "Utilization", "ECC Mode", "ECC Errors",
    "Retired Pages", "Remapped Rows", "Temperature", "GPU Power Readings", "Power Readings", "Clocks", "PCI",
    "MIG Mode", "Clocks Event Reasons", "Clocks Throttle Reasons",
)  # fmt: skip
_XML_STATE = (
    "product_name", "performance_state", "fan_speed", "fb_memory_usage", "utilization", "ecc_mode", "ecc_errors",
    "retired_pages", "remapped_rows", "temperature", "gpu_power_readings", "power_readings", "clocks", "pci",
    "mig_mode", "clocks_event_reasons", "clocks_throttle_reasons",
)  # fmt: skip
_TABLE_COLUMNS = (
    "Name", "Disp.A", "Volatile Uncorr. ECC", "Fan", "Temp", "Perf", "Pwr:Usage", "Pwr:Cap", "Fan/Temp/Perf/Pwr",
    "Memory-Usage", "GPU-Util", "Compute M.", "MIG M.",
)  # fmt: skip


def _fields(names: list[str]) -> str:
    """A few values by name; many by the sections they are in (`ECC Errors, Temperature (19 values)`)."""
    if len(names) <= 3:
        return ", ".join(names)
    return f"{_listed(_unique(name.split('/', 1)[0] for name in names))} ({len(names)} values)"


def _is_state(value: UnreadableValue) -> bool:
    top = value.name.split("/", 1)[0]
    return value.name in _TABLE_COLUMNS or top in _STATE_SECTIONS or top in _XML_STATE


def _judge_unreadable(gpu: GpuRecord, entity: str, report: TriageReport) -> None:
    """Values nvidia-smi printed as errors: a GPU gone or needing a reset is critical; one unreadable value is a
    warning naming it; two or more of the GPU's own readings unreadable means the GPU is not answering."""
    gone = [v for v in gpu.unreadable if v.kind in ("reset-required", "gpu-lost")]
    if gone:
        kind: Unreadable = "gpu-lost" if any(v.kind == "gpu-lost" for v in gone) else "reset-required"
        code = "GPU is lost" if kind == "gpu-lost" else "GPU requires reset"
        fix = (
            "drain the node and reboot it; check `dmesg` for Xid 79 (fallen off the bus), and replace the GPU if it is "
            "lost again"
            if kind == "gpu-lost"
            else "drain the node, then reset the GPU (`nvidia-smi -r -i <id>`) or reboot; check `dmesg` for the Xid "
            "that led here (119, 154), and replace the GPU if it comes back like this"
        )
        names = _unique(v.name for v in gone)
        report.findings.append(
            TriageFinding(
                "gpu-state",
                Severity.critical,
                f"nvidia-smi prints {gone[0].printed} for {_fields(names)}: {MEANS[kind]}",
                entity,
                code,
                fix,
                _unique(v.line for v in gone if v.line),
            )
        )
    errors = [v for v in gpu.unreadable if v.kind == "read-error"]
    if not errors:
        return
    names = _unique(v.name for v in errors)
    state = _unique(v.name for v in errors if _is_state(v))
    printed = _unique(v.printed for v in errors)
    severity: Severity = Severity.critical if len(state) >= 2 else Severity.warning
    if severity is Severity.critical:
        message = (
            f"nvidia-smi could not read {_fields(names)} ({', '.join(printed[:3])}): the GPU is not answering for "
            "its own state"
        )
        fix = (
            "drain the node; check `dmesg` for Xid errors (79, 119, 154 mean the GPU needs a reset), reset the GPU "
            "or reboot, and replace it if the values stay unreadable"
        )
    else:
        message = f"nvidia-smi could not read {_fields(names)} ({', '.join(printed[:3])})"
        fix = (
            "watch it: read it again with `nvidia-smi -q`; a value that stays unreadable, or more of them, means the "
            "GPU needs a reset (check `dmesg` for Xid errors)"
        )
    code = "ERR!" if printed == ["ERR!"] else "unreadable value"
    report.findings.append(
        TriageFinding("gpu-state", severity, message, entity, code, fix, _unique(v.line for v in errors if v.line))
    )


def _judge_ecc_mode(gpu: GpuRecord, entity: str, report: TriageReport) -> None:
    current, pending = gpu.ecc_mode_current, gpu.ecc_mode_pending
    data_centre = _data_centre(gpu.product_name)
    if current is False and pending is True:
        report.findings.append(
            TriageFinding(
                "ecc",
                Severity.warning,
                "ECC is off and turns on at the next reboot",
                entity,
                "ECC mode pending",
                "drain the node and reboot it to apply the pending ECC mode",
            )
        )
    elif current is False and data_centre is not False:
        what = "a data-centre GPU" if data_centre else "this GPU (the input does not name a data-centre model)"
        report.findings.append(
            TriageFinding(
                "ecc",
                Severity.warning,
                f"ECC is disabled on {what}: memory errors go uncounted and no rows are remapped",
                entity,
                "ECC disabled",
                "enable it with `sudo nvidia-smi -e 1 -i <id>`, then reboot (an ECC mode change takes effect at "
                "the next reboot)",
            )
        )
    elif current is True and pending is False:
        report.findings.append(
            TriageFinding(
                "ecc",
                Severity.warning,
                "ECC is on but turns off at the next reboot",
                entity,
                "ECC mode pending",
                "keep it on with `sudo nvidia-smi -e 1 -i <id>` before the next reboot",
            )
        )


def _judge_gpu(gpu: GpuRecord, report: TriageReport) -> None:
    entity = _gpu_name(gpu)

    def add(check: str, severity: Severity, code: str, message: str, fix: str) -> None:
        report.findings.append(TriageFinding(check, severity, message, entity, code, fix))

    _judge_unreadable(gpu, entity, report)
    for issue in judge_memory(memory_reading(gpu)):
        add(issue.check, issue.severity, issue.code, issue.message, issue.fix)
    _judge_ecc_mode(gpu, entity, report)
    state = recovery_state(gpu.recovery_action) if gpu.recovery_action else None
    if state:  # the driver's recovery action, judged as the Xid 154 that announces it (health.xid_policy)
        verdict = recovery_state_verdict(state)
        add("recovery-action", finding_severity(verdict), f"recovery action {gpu.recovery_action}",
            f"the driver's GPU recovery action is {gpu.recovery_action} ({state:#x}): the GPU needs it before it "
            "takes work again", f"{verdict.action.value}: {verdict.reason}")  # fmt: skip
    elif state is None and gpu.recovery_action:
        report.notes.append(f"{entity}: recovery action {gpu.recovery_action!r} is not one NVML names")
    width, width_max = gpu.pcie_width_current, gpu.pcie_width_max
    if width is not None and width_max is not None and width < width_max:
        add("pcie", Severity.warning, "PCIe width", f"PCIe link at x{width}, capable of x{width_max}",
            "reseat the GPU or riser; check the slot")  # fmt: skip
    for clock in judge_clock_reasons(gpu.active_clock_event_reasons):
        sm = f" (SM clock {gpu.clock_sm_mhz:.0f} MHz)" if gpu.clock_sm_mhz is not None else ""
        add("clocks", Severity.warning, clock.reason, f"{clock.message}{sm}", clock.fix)


_IDENTITY = {"pci_bus_id", "pci", "index", "driver_version", "cuda_version"}


def _has_readings(gpu: GpuRecord) -> bool:
    """The record holds something read from the GPU, beyond which GPU it is."""
    empty = GpuRecord()
    return any(
        getattr(gpu, f.name) != getattr(empty, f.name) for f in dataclasses.fields(GpuRecord) if f.name not in _IDENTITY
    )


def _judge_nvidia_smi(smi: NvidiaSmiReport, report: TriageReport) -> None:
    for message in smi.errors:
        issue = judge_failure(message)
        report.findings.append(
            TriageFinding("nvidia-smi", issue.severity, issue.message, "node", issue.code, issue.fix, [message])
        )
    for pci, why in smi.unreachable.items():
        issue = judge_unreachable(pci, why)
        report.findings.append(TriageFinding("gpu-lost", issue.severity, issue.message, f"PCI {pci}", issue.code,
                                             issue.fix))  # fmt: skip
    for gpu in smi.gpus:
        _judge_gpu(gpu, report)
    report.notes.extend(smi.notes)
    read = [gpu for gpu in smi.gpus if _has_readings(gpu)]
    if not read and not smi.errors and not smi.unreachable:
        report.judged = False
        report.notes.append("no GPU section found" if not smi.gpus else "no value nvidia-smi prints was found")
    _settle(report, smi.cut_short, smi.partial, smi.problems)


def read_nvidia_smi_q(lines: Iterable[str], source: str) -> TriageReport:
    report = TriageReport("nvidia-smi-q", source)
    _judge_nvidia_smi(parse_query(bounded_text(lines, report), source=source, strict=False), report)
    return report


def read_nvidia_smi_query_gpu(lines: Iterable[str], source: str) -> TriageReport:
    """`nvidia-smi --query-gpu=... --format=csv`: its records judged as `-q`'s are."""
    report = TriageReport("nvidia-smi-query-gpu", source)
    _judge_nvidia_smi(parse_query_gpu(bounded_text(lines, report), source=source, strict=False), report)
    return report


def read_nvidia_smi_table(lines: Iterable[str], source: str) -> TriageReport:
    report = TriageReport("nvidia-smi-table", source)
    # a table that stops before the process table may be missing GPUs (it never says how many there are), so
    # it is not called healthy however well the GPUs it shows look
    smi = parse_table(bounded_text(lines, report), source=source, strict=False)
    _judge_nvidia_smi(smi, report)
    return report


# -- nvidia-smi nvlink -s --------------------------------------------------------------------------------------
def read_nvidia_smi_nvlink(lines: Iterable[str], source: str) -> TriageReport:
    """`nvidia-smi nvlink -s`, judged by health.nvlink (the judgement `gpufleet diag --nvlink-status` gives)."""
    report = TriageReport("nvidia-smi-nvlink", source)
    status = read_nvlink_status(bounded_text(lines, report), source=source, strict=False)
    judged = judge_nvlink(status)
    for issue in judged.issues:
        report.findings.append(
            TriageFinding(
                "nvlink", issue.severity, issue.message, issue.entity, issue.code, issue.fix, list(issue.evidence)
            )
        )
    report.notes += judged.notes
    report.judged = judged.judged
    _settle(report, judged.cut_short, judged.partial, judged.problems)
    return report


# -- nvidia-smi topo -m ----------------------------------------------------------------------------------------
_NIC_NEAR = ("PIX", "PXB")
_RANK = {kind: rank for rank, kind in enumerate(("X", "NV", *PCIE_TYPES))}


def _nv(kind: str | None) -> int:
    return int(kind[2:]) if kind and kind.startswith("NV") else 0


class _TopoJudge:
    def __init__(self, matrix: TopoMatrix, report: TriageReport) -> None:
        self.matrix = matrix
        self.report = report
        self.gpus = matrix.gpus
        self.pairs = {
            (a, b): kind
            for i, a in enumerate(self.gpus)
            for b in self.gpus[i + 1 :]
            if (kind := matrix.link_between(a, b)) is not None
        }
        models = {m.name: m for n in matrix.product_names if (m := model_for_product_name(n)) is not None}
        self.spec = next(iter(models.values())) if len(models) == 1 else None
        self.design = nvlink_design(self.spec, matrix.product_names[0]) if self.spec is not None else None
        self.nvlink_judged = False

    def add(self, severity: Severity, code: str, message: str, entity: str, fix: str, rows: list[str]) -> None:
        evidence = [self.matrix.rows[r] for r in rows if r in self.matrix.rows]
        self.report.findings.append(TriageFinding("topology", severity, message, entity, code, fix, evidence))

    def totals(self) -> dict[str, int]:
        return {g: sum(_nv(k) for pair, k in self.pairs.items() if g in pair) for g in self.gpus}

    def off_fabric(self, severity: Severity, fix: str) -> set[str]:
        """GPUs with no NVLink to any GPU while others are NVLinked to each other."""
        totals = self.totals()
        linked = [g for g in self.gpus if totals[g]]
        off = [
            g for g in self.gpus if not totals[g] and any((g, o) in self.pairs or (o, g) in self.pairs for o in linked)
        ]
        for gpu in off:
            kinds = _unique(k for pair, k in self.pairs.items() if gpu in pair)
            self.add(
                severity,
                "NVLink down",
                f"{gpu} reaches the other GPUs over PCIe only ({'/'.join(kinds)}) while "
                "they are NVLinked: its NVLinks are down",
                gpu,
                fix,
                [gpu],
            )
        return set(off) if linked else set()

    def judge_nvlink(self) -> None:
        if len(self.gpus) < 2 or not self.pairs:
            return
        nv = {pair: _nv(kind) for pair, kind in self.pairs.items()}
        top = max(nv.values())
        spec, design = self.spec, self.design
        if spec is not None and design is not None:
            self.nvlink_judged = True
            self.judge_with_model(spec, design, nv, top)
            return
        if not top:
            self.report.notes.append(
                "no GPU pair is NVLinked: right for PCIe cards, a fault on SXM/NVSwitch boards (fabric manager not "
                "running, NVLink down); topo -m does not name the GPU model, so this is not judged (pass "
                "`nvidia-smi nvlink -s` or `nvidia-smi -q` to judge it)"
            )
            return
        self.nvlink_judged = True
        fix = "check `nvidia-smi nvlink -s` for the inactive links; " + NVLINK_FIX["fabric"]
        totals = self.totals()
        linked = [g for g in self.gpus if totals[g]]
        alone = [g for g in self.gpus if not totals[g]]
        if len(linked) >= 3 and self.meshed(linked):
            lower = [pair for pair, n in nv.items() if 0 < n < top]
            if lower:
                self.warn_pairs(lower, nv, f"the NV{top} elsewhere in the mesh", fix)
            for gpu in alone:
                kinds = _unique(k for pair, k in self.pairs.items() if gpu in pair)
                self.add(
                    Severity.warning,
                    "NVLink down",
                    f"{gpu} reaches the other GPUs over PCIe only ({'/'.join(kinds)}) while they are NVLinked to each "
                    f"other (NV{top}): its NVLinks look down",
                    gpu,
                    fix,
                    [gpu],
                )
            if not lower and not alone:
                self.report.notes.append(
                    f"every GPU pair is NVLinked with NV{top}; topo -m does not name the GPU model, so {top} is not "
                    "checked against it"
                )
            return
        most = max(totals[g] for g in linked)
        low = [g for g in linked if totals[g] < most]
        for gpu in low:
            self.add(
                Severity.warning,
                "NVLink links missing",
                f"{gpu} has {totals[gpu]} NVLinks to other GPUs where the others have {most}",
                gpu,
                fix,
                [gpu],
            )
        if not low:
            self.report.notes.append(
                f"each NVLinked GPU has {most} NVLinks to the other GPUs; topo -m does not name the GPU model, so "
                f"{most} is not checked against it"
            )
        if alone:
            self.report.notes.append(
                f"{_listed(alone)} have no NVLink to any GPU (a card without a bridge, or its links down): without "
                "the GPU model this is not judged"
            )

    def meshed(self, gpus: list[str]) -> bool:
        """Every pair among `gpus` that the matrix shows is NVLinked."""
        return all(
            _nv(kind) > 0
            for i, a in enumerate(gpus)
            for b in gpus[i + 1 :]
            if (kind := self.matrix.link_between(a, b)) is not None
        )

    def warn_pairs(self, pairs: list[tuple[str, str]], nv: dict[tuple[str, str], int], than: str, fix: str) -> None:
        names = [f"{a}-{b} NV{nv[(a, b)]}" for a, b in pairs]
        rows = _unique(g for pair in pairs for g in pair)
        self.add(
            Severity.warning,
            "NVLink links missing",
            f"{len(pairs)} GPU pair(s) have fewer NVLinks than {than}: {_listed(names)}",
            _listed(rows),
            fix,
            rows,
        )

    def judge_with_model(self, spec: GpuModelSpec, design: str, nv: dict[tuple[str, str], int], top: int) -> None:
        links = spec.nvlink_links
        fix = NVLINK_FIX.get(design, NVLINK_FIX["fabric"])
        if design not in EXPECTS_NVLINK:
            if top:
                lower = [pair for pair, n in nv.items() if 0 < n < top]
                if lower:
                    self.warn_pairs(lower, nv, f"the NV{top} of the other bridged pairs", NVLINK_FIX["bridged"])
            self.report.notes.append(f"{spec.name}: NVLink is optional for this model (bridges), not required")
            return
        if design == "fabric" and top >= links:
            pcie = [pair for pair, n in nv.items() if n == 0]
            off = self.off_fabric(Severity.critical, fix)
            rest = [pair for pair in pcie if not (set(pair) & off)]
            if rest:
                names = [f"{a}-{b} {self.pairs[(a, b)]}" for a, b in rest]
                self.add(
                    Severity.critical,
                    "NVLink down",
                    f"GPU pairs that {spec.name}'s NVSwitch fabric links show PCIe: {_listed(names)}",
                    _listed(_unique(g for p in rest for g in p)),
                    fix,
                    _unique(g for p in rest for g in p),
                )
            lower = [pair for pair, n in nv.items() if 0 < n < links]
            if lower:
                self.warn_pairs(lower, nv, f"the {links} links of {spec.name}", fix)
            return
        severity: Severity = Severity.warning if design == "bridged" else Severity.critical
        off = self.off_fabric(severity, fix)
        totals = self.totals()
        for gpu in self.gpus:
            if gpu in off:
                continue
            if totals[gpu] == 0:
                self.add(
                    severity,
                    "NVLink down",
                    f"{gpu} has no NVLink to any GPU, though {spec.name} has {links}",
                    gpu,
                    fix,
                    [gpu],
                )
            elif totals[gpu] < links and design != "bridged":
                self.add(
                    Severity.warning,
                    "NVLink links missing",
                    f"{gpu} has {totals[gpu]} NVLinks to other GPUs, {spec.name} has {links}",
                    gpu,
                    fix,
                    [gpu],
                )

    def judge_nics(self) -> None:
        nics = self.matrix.nics
        if not nics or len(self.gpus) < 2:
            return
        nearest: dict[str, str] = {}
        for gpu in self.gpus:
            kinds = [k for nic in nics if (k := self.matrix.link_between(gpu, nic)) is not None]
            if kinds:
                nearest[gpu] = min(kinds, key=lambda k: _RANK.get(k, 99))
        near = [g for g, k in nearest.items() if k in _NIC_NEAR]
        far = [g for g, k in nearest.items() if k not in _NIC_NEAR]
        if near and far:
            names = [f"{g} ({nearest[g]})" for g in far]
            self.add(
                Severity.warning,
                "NIC affinity",
                f"{_listed(names)} have no NIC on PIX/PXB while {len(near)} other "
                "GPU(s) each have one: their GPUDirect RDMA traffic crosses the host bridge",
                _listed(far),
                "check that each GPU's NIC is present and up (`ibstat`, the NIC legend); a NIC missing from the "
                "matrix is usually a failed or unseated HCA",
                far,
            )


def read_nvidia_smi_topo(lines: Iterable[str], source: str) -> TriageReport:
    """`nvidia-smi topo -m`: which GPU pairs are NVLinked, against the model when the input names it, and which
    GPUs lack a NIC close by."""
    report = TriageReport("nvidia-smi-topo", source)
    matrix = parse_topo_matrix(bounded_text(lines, report), source=source, strict=False)
    judge = _TopoJudge(matrix, report)
    if judge.spec is None and matrix.product_names:
        report.notes.append("the GPU names in the input do not name one catalog model: NVLink judged by its pattern")
    judge.judge_nvlink()
    judge.judge_nics()
    if not judge.nvlink_judged and not report.findings:
        report.judged = False
        if len(judge.gpus) < 2:
            report.notes.append("one GPU: no GPU pair to judge")
    _settle(report, matrix.cut_short, None, matrix.problems)
    return report
