"""What `dcgmi dmon` samples and a `dcgmi discovery -l` listing say about the GPUs: each value judged by the one home
of its fault family, so a dmon sample and the same value in nvidia-smi or a dcgm-exporter scrape agree.

- dmon: per entity, over its samples: XIDER (the last Xid, DCGM_FI_DEV_XID_ERRORS) as the Xid policy rates a report
  carrying only its code (health.xid_rating.code_reading); EDVTL (volatile double-bit ECC), RRF/RRP (row remap
  failed/pending), RPDBE/RPSBE/RPPEN (retired pages, pending) by health.gpu_memory; DVCCTR (the clocks-event bitmask,
  nvml.h's nvmlClocksEventReason* bits) by health.clock_events.
- discovery: a GPU whose status is LOST or INACCESSIBLE (DcgmEntityStatus_t) is lost to DCGM: critical, the GPU-lost
  remedy; DETACHED or DISABLED: out of use, a warning; DCGM unable to read a GPU's attributes: critical; some GPUs
  not active (DCGM 4.x's `Note: Use -a flag`): a warning to list them; an attribute DCGM read as blank
  (`<<<NULL>>>`, dcgm_structs.h DCGM_STR_BLANK) for a GPU it lists: a warning that this DCGM does not fully read the
  GPU (an older DCGM than the driver or GPU).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.health.clock_events import judge_clock_reasons
from gpufleet.health.gpu_memory import MemoryReading, judge_memory
from gpufleet.health.xid_rating import code_reading
from gpufleet.model import Severity
from gpufleet.parsers.nvidia.dcgmi_tools import DiscoveryReport, DmonReport

# nvml.h nvmlClocksEventReason* bits (catalog/data/clock_events.csv), in the names the parsers give the reasons
_REASON_BITS = {0x8: "hw_slowdown", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
                0x80: "hw_power_brake_slowdown"}  # fmt: skip
LOST_FIX = (
    "drain the node and reboot it; read `dmesg` for Xid 79 / `fallen off the bus`, and replace the GPU if it is "
    "lost again"
)


@dataclass(frozen=True, slots=True)
class DcgmIssue:
    entity: str
    severity: Severity
    code: str
    message: str
    fix: str


def _number(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _most(rows: list[dict[str, str]], name: str) -> float | None:
    values = [v for row in rows if (v := _number(row.get(name))) is not None]
    return max(values) if values else None


def judge_dmon(report: DmonReport) -> list[DcgmIssue]:
    out: list[DcgmIssue] = []
    for entity, rows in report.samples.items():
        xids = [int(v) for row in rows if (v := _number(row.get("XIDER"))) is not None and v > 0]
        for xid in dict.fromkeys(xids):
            code = code_reading(xid)
            out.append(DcgmIssue(entity, code.severity, f"Xid {xid}", f"DCGM's last Xid on {entity} is {xid}",
                                 f"{code.verdict.action.value}: {code.verdict.reason}"))  # fmt: skip
        failed, pending, rpen = _most(rows, "RRF"), _most(rows, "RRP"), _most(rows, "RPPEN")
        retired = [v for v in (_most(rows, "RPDBE"), _most(rows, "RPSBE")) if v is not None]
        reading = MemoryReading(
            uncorrectable=_most(rows, "EDVTL"),
            remap_failure=None if failed is None else failed > 0,
            retired_pages=sum(retired) if retired else None,
            retired_pending=None if rpen is None else rpen > 0,
            remap_pending=None if pending is None else pending > 0,
        )
        for issue in judge_memory(reading):
            out.append(DcgmIssue(entity, issue.severity, issue.code, issue.message, issue.fix))
        masks = [int(v) for row in rows if (v := _number(row.get("DVCCTR"))) is not None]
        active = [name for bit, name in _REASON_BITS.items() if any(m & bit for m in masks)]
        for clock in judge_clock_reasons(active):
            out.append(DcgmIssue(entity, Severity.warning, clock.reason, clock.message, clock.fix))
    return out


def judge_discovery(report: DiscoveryReport) -> list[DcgmIssue]:
    out: list[DcgmIssue] = []
    for gpu in report.gpus:
        name = f"GPU {gpu.id}"
        bus = gpu.value("PCI Bus ID")
        where = f"{name} ({bus})" if bus else name
        status = (gpu.value("Status") or "OK").upper()
        if any(line.startswith("Error: Cannot get device attributes") for line in gpu.info):
            out.append(DcgmIssue(name, Severity.critical, "attributes unreadable",
                                 f"DCGM cannot read the attributes of {where}", LOST_FIX))  # fmt: skip
        elif status in ("LOST", "INACCESSIBLE"):
            out.append(DcgmIssue(name, Severity.critical, f"GPU {status.lower()}",
                                 f"DCGM reports {where} {status}", LOST_FIX))  # fmt: skip
        elif status in ("DETACHED", "DISABLED"):
            out.append(DcgmIssue(name, Severity.warning, f"GPU {status.lower()}",
                                 f"DCGM reports {where} {status}: it takes no work",
                                 "reattach or re-enable it if it should be in service (`nvidia-smi -q` for its "
                                 "state)"))  # fmt: skip
        blank = [line.split(":", 1)[0] for line in gpu.info if "<<<NULL>>>" in line]
        if blank:
            out.append(DcgmIssue(name, Severity.warning, "blank attributes",
                                 f"DCGM reads {', '.join(blank)} of {where} as blank (<<<NULL>>>): it does not fully "
                                 "read this GPU", "compare DCGM's version (`dcgmi -v`) with the driver's and the "
                                 "GPU's support matrix; upgrade DCGM, then restart nv-hostengine"))  # fmt: skip
    if report.not_all_active:
        shown = len(report.gpus)
        out.append(DcgmIssue("node", Severity.warning, "GPUs not active",
                             f"DCGM lists {shown} active GPU(s); others are not active",
                             "list them with `dcgmi discovery -l -a` and read each one's status"))  # fmt: skip
    return out
