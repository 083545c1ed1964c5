"""DCGM's health watches and policy violations, judged once: for `gpufleet triage` on a `dcgmi health -c` report and
for the agent on what its DCGM source read (dcgmHealthCheck's incidents, dcgmPolicyRegister's violations).

- A watched system DCGM rates Failure is critical, Warning a warning. The fix is DCGM's own suggestion for the
  incident's DCGM_FR_* code (data/dcgm_diag_messages.csv: dcgm_errors.h's <code>_NEXT), found by the message's text
  (a `dcgmi health` report) or by the code itself (the agent's series); else a general one.
- An Internal error, or an incident whose code or text is the diagnostic's own failure, says nothing of the GPU:
  not judged (info).
- A policy violation DCGM called back for: double-bit ECC and retired pages past DCGM's limit are critical (drain and
  reset), PCIe replays, NVLink errors, thermal and power past the GPU's limits warnings (dcgm_structs.h
  DCGM_POLICY_COND_*; the causes as health/gpu_memory.py, the PCIe, NVLink and thermal detectors name them).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpufleet.health.dcgm_diag import MessageRule, classify_message, message_rules
from gpufleet.model import Severity
from gpufleet.model.incident import RootCause
from gpufleet.parsers.nvidia.dcgmi_health import HealthReport

# the agent's DCGM series these judgements read (sources/gpu/dcgm.py writes them; the catalog describes them)
HEALTH_INCIDENT_SERIES = "gpufleet_dcgm_health_incident"  # {gpu, UUID, system, code}: DCGM's result
POLICY_VIOLATIONS_SERIES = "gpufleet_dcgm_policy_violations_total"  # {gpu, UUID, condition}: a count
HEALTH_FIX = {
    Severity.critical: "drain the node; run `dcgmi diag -r 3` on it and follow the failure it names",
    Severity.warning: "watch it: rerun `dcgmi health -c`, and run `dcgmi diag -r 2` at the next drain",
}
DCGM_PASS, DCGM_WARN, DCGM_FAIL = 0, 10, 20  # dcgmHealthWatchResults_t
# the agent's system names (sources/gpu/dcgm.py HEALTH_SYSTEMS) as dcgmi prints them, and the cause they stand for
SYSTEMS: dict[str, tuple[str, RootCause]] = {
    "pcie": ("PCIe system", RootCause.pcie),
    "nvlink": ("NVLINK system", RootCause.nvlink),
    "pmu": ("PMU system", RootCause.diag_failure),
    "mcu": ("MCU system", RootCause.diag_failure),
    "memory": ("Memory system", RootCause.ecc_dbe),
    "sm": ("SM system", RootCause.diag_failure),
    "inforom": ("InfoROM system", RootCause.diag_failure),
    "thermal": ("Thermal system", RootCause.thermal),
    "power": ("Power system", RootCause.power_brake),
    "driver": ("Driver", RootCause.diag_failure),
    "nvswitch_nonfatal": ("NVSwitch non-fatal errors", RootCause.nvlink),
    "nvswitch_fatal": ("NVSwitch fatal errors", RootCause.nvlink),
    "connectx": ("ConnectX system", RootCause.diag_failure),
}
# the memory codes that name a more specific cause than an uncorrectable error
_MEMORY_CAUSES = {
    "DCGM_FR_VOLATILE_SBE_DETECTED": RootCause.ecc_sbe_rate,
    "DCGM_FR_PENDING_PAGE_RETIREMENTS": RootCause.retired_pages,
    "DCGM_FR_RETIRED_PAGES_LIMIT": RootCause.retired_pages,
    "DCGM_FR_RETIRED_PAGES_DBE_LIMIT": RootCause.retired_pages,
    "DCGM_FR_ROW_REMAP_FAILURE": RootCause.row_remap_failure,
}
# DCGM_POLICY_COND_* (as sources/gpu/dcgm.py names them): cause, severity, what it means, what to do
VIOLATIONS: dict[str, tuple[RootCause, Severity, str, str]] = {
    "dbe": (RootCause.ecc_dbe, Severity.critical, "a double-bit (uncorrectable) ECC error",
            "drain the GPU and reset it (or reboot the node); replace it if it repeats"),
    "retired_pages": (RootCause.retired_pages, Severity.critical, "retired pages past DCGM's limit",
                      "drain the node and run `dcgmi diag -r 3`; past the limit the GPU is replaced"),
    "pcie": (RootCause.pcie, Severity.warning, "PCIe replays",
             "reseat the GPU or its riser at the next drain; check the slot's PCIe errors (lspci -vvv)"),
    "nvlink": (RootCause.nvlink, Severity.warning, "NVLink errors",
               "watch the link's error counters; reset the GPU at the next drain if they keep climbing"),
    "thermal": (RootCause.thermal, Severity.warning, "a temperature past the GPU's slowdown limit",
                "check the node's cooling (fans, inlet temperature, airflow)"),
    "power": (RootCause.power_brake, Severity.warning, "power past the GPU's limit",
              "check the node's power supplies and the GPU's power cap"),
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class HealthIssue:
    """One watched system (or entity, or the whole report) as DCGM's health watches rated it, judged."""

    entity: str
    severity: Severity  # info: DCGM could not evaluate it (not judged)
    message: str
    code: str  # the system, or the entity's health
    fix: str
    evidence: list[str] = field(default_factory=list)
    judged: bool = True


@dataclass(slots=True)
class HealthJudgement:
    issues: list[HealthIssue] = field(default_factory=list)
    judged: bool = True  # False: some of it could not be evaluated, or there was nothing to judge
    notes: list[str] = field(default_factory=list)


def _severity(health: str) -> Severity | None:
    return {"Failure": Severity.critical, "Warning": Severity.warning}.get(health)


def rule_by_code(code: str) -> MessageRule | None:
    """DCGM's rule for a DCGM_FR_* code (its message format, category and suggestion)."""
    return next((r for r in message_rules() if r.id == code), None)


def judge_health(health: HealthReport) -> HealthJudgement:
    """A `dcgmi health -c` report (or the same tree the agent builds from dcgmHealthCheck): Failure is critical,
    Warning a warning; a watch DCGM could not evaluate leaves the report unknown."""
    out = HealthJudgement()
    shown = False
    for entity in health.entities:
        for system in entity.systems or []:
            severity = _severity(system.health)
            rule = classify_message(system.message) if system.message else None
            if system.health == "Internal error" or (rule is not None and rule.kind == "diagnostic"):
                out.judged = False  # the watch could not be evaluated: it says nothing of the entity
                out.issues.append(
                    HealthIssue(entity.name, Severity.info, f"DCGM could not evaluate the {system.name} of "
                                f"{entity.name}: {system.message or system.health}", system.name,
                                rule.fix if rule and rule.fix else "check nv-hostengine's log", system.lines,
                                judged=False)
                )  # fmt: skip
                shown = True
                continue
            if severity is None:
                continue
            shown = True
            out.issues.append(
                HealthIssue(entity.name, severity, f"{system.name}: {system.message or system.health}", system.name,
                            rule.fix if rule and rule.fix else HEALTH_FIX[severity], system.lines)
            )  # fmt: skip
        severity = _severity(entity.health)
        if severity is not None and not entity.systems:
            shown = True
            out.issues.append(HealthIssue(entity.name, severity, f"{entity.name} is {entity.health}", entity.health,
                                          HEALTH_FIX[severity], entity.lines))  # fmt: skip
    overall = _severity(health.overall or "")
    if overall is not None and not any(i.severity == overall for i in out.issues):
        out.issues.append(HealthIssue("node", overall, f"overall health is {health.overall}", "Overall Health",
                                      HEALTH_FIX[overall], [health.overall_line]))  # fmt: skip
        shown = True
    if health.overall == "Internal error":
        out.judged = False
        out.notes.append("DCGM reports an internal error for the overall health: it could not evaluate it")
    elif health.overall is None and not shown:
        out.judged = False
        out.notes.append("no `Overall Health` row: nothing to judge")
    return out


@dataclass(frozen=True, slots=True)
class IncidentVerdict:
    cause: RootCause
    severity: Severity
    summary: str
    fix: str


def judge_incident(system: str, health: float, code: str) -> IncidentVerdict | None:
    """One incident of the agent's DCGM source (system, DCGM's result, the DCGM_FR_* code): None when it passes or
    is the watch's own failure (the diagnostic kind says nothing of the GPU)."""
    severity = {DCGM_WARN: Severity.warning, DCGM_FAIL: Severity.critical}.get(int(health))
    if severity is None:
        return None
    rule = rule_by_code(code)
    if rule is not None and rule.kind == "diagnostic":
        return None
    name, cause = SYSTEMS.get(system, (system, RootCause.diag_failure))
    cause = _MEMORY_CAUSES.get(code, cause)
    word = "Failure" if severity is Severity.critical else "Warning"
    return IncidentVerdict(cause, severity, f"DCGM's {name} health watch: {word} ({code})",
                           rule.fix if rule and rule.fix else HEALTH_FIX[severity])  # fmt: skip


def judge_violation(condition: str, count: float) -> IncidentVerdict | None:
    """A policy condition DCGM reported violated `count` more times since the last look."""
    if count <= 0 or condition not in VIOLATIONS:
        return None
    cause, severity, what, fix = VIOLATIONS[condition]
    times = "once" if count == 1 else f"{count:g} times"
    return IncidentVerdict(cause, severity, f"DCGM policy violated {times}: {what}", fix)
