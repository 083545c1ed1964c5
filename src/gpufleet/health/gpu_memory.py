"""One GPU's memory health from one reading of its error counters and flags: the one judgement of an uncorrectable
ECC error, a failed or pending row remap, the remapped-row budget and retired pages, for every door that reads them:
the agent's GPU detector (health/detectors/gpu.py, on each collection's frame) and `gpufleet triage` of an
`nvidia-smi -q` and of a dcgm-exporter scrape (triage/readers/smi.py, dcgm_exporter.py). The limits are the `ecc`
section of the thresholds (health/data/thresholds.yaml, with their sources).

- Uncorrectable (double-bit) ECC errors since the last reset: critical, filed under ecc-dbe with Xid 48's action
  (WORKFLOW_XID_48), the one remedy of an uncorrectable ECC error however it is seen (runbook ecc-dbe, alert
  GpuEccDoubleBitError).
- A row remap that failed (NVML's flag, alert GpuRowRemapFailure), or rows remapped for uncorrectable errors at
  DCGM's limit: critical, row-remap-failure (the memory cannot be repaired in the field: RMA).
- Retired pages (single- and double-bit together) at DCGM's limit, or at its soft limit with another retirement
  pending (the pages still accumulating): critical, retired-pages (runbook retired-pages: RMA).
- A row remap or page retirement pending: a warning to reset the GPU at a convenient time, which applies it (NVIDIA
  GPU Memory Error Management; the Xid policy's row_remap.recorded rule says the same of the Xid 63 that records
  one). The agent does not file the flag itself: the uncorrectable error that queued it is the incident (its
  runbook resets the GPU), or the Xid 63 line that recorded it. A reading of the flag alone (`nvidia-smi -q`, a
  scrape) shows a state that lasts until the reset, where the kernel line is a record of when it was queued.
- Rows remapped for uncorrectable errors below the limit: information (repaired; watch the count), last.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.health.thresholds import Ecc, load_thresholds
from gpufleet.model import RootCause, Severity

RESET_WHEN_IDLE = "reset the GPU (or reboot) at a convenient time: the reset applies it"
REPLACE = "drain the node and replace the GPU (RMA)"


@dataclass(frozen=True, slots=True)
class MemoryReading:
    """What one reading shows of a GPU's memory health. None: the reading does not show it."""

    uncorrectable: float | None = None  # uncorrectable ECC errors not yet reported (since the last reset)
    remap_failure: bool | None = None
    remapped_uncorrectable: float | None = None  # rows remapped for uncorrectable errors
    retired_pages: float | None = None  # single- and double-bit retired pages together
    retired_pending: bool | None = None
    remap_pending: bool | None = None


@dataclass(frozen=True, slots=True)
class MemoryIssue:
    """One thing wrong (or worth knowing) about a GPU's memory."""

    check: str  # ecc, row-remap, page-retirement
    code: str  # "volatile uncorrectable ECC", "row remap failure", ...
    severity: Severity
    cause: RootCause
    action: str  # the finding's action term, which the runbooks match
    title: str  # what the agent's finding calls it: "uncorrectable ECC error"
    message: str
    fix: str
    filed: bool = True  # False: the agent files what caused it instead (a pending remap), or nothing (information)


def judge_memory(reading: MemoryReading, ecc: Ecc | None = None) -> list[MemoryIssue]:
    """Every issue the reading shows, in the order above."""
    limits = ecc or load_thresholds().ecc
    out: list[MemoryIssue] = []
    if reading.uncorrectable:
        out.append(
            MemoryIssue(
                "ecc", "volatile uncorrectable ECC", Severity.critical, RootCause.ecc_dbe, "WORKFLOW_XID_48",
                "uncorrectable ECC error", f"{reading.uncorrectable:.0f} uncorrectable (double-bit) ECC error(s) "
                "since the last reset", "drain, reset the GPU and run `dcgmi diag -r 3`; replace it if they return "
                "(the remedy of Xid 48: runbook ecc-dbe)",
            )
        )  # fmt: skip
    if reading.remap_failure:
        out.append(
            MemoryIssue(
                "row-remap", "row remap failure", Severity.critical, RootCause.row_remap_failure, "CONTACT_SUPPORT",
                "row remapping failed", "a row remap failed: the bad row stays in use and the memory cannot be "
                "repaired", REPLACE,
            )
        )  # fmt: skip
    rows = reading.remapped_uncorrectable or 0
    if rows >= limits.uncorrectable_remapped_rows_limit:
        out.append(
            MemoryIssue(
                "row-remap", "remapped rows over limit", Severity.critical, RootCause.row_remap_failure,
                "CONTACT_SUPPORT", "remapped-row budget spent", f"{rows:.0f} rows remapped for uncorrectable errors, "
                f"at or over DCGM's limit of {limits.uncorrectable_remapped_rows_limit}",
                REPLACE,
            )
        )  # fmt: skip
    if reading.remap_pending:
        out.append(
            MemoryIssue(
                "row-remap", "row remap pending", Severity.warning, RootCause.retired_pages, "IGNORE",
                "row remap pending", "a row remap is pending and takes effect at the next reset", RESET_WHEN_IDLE,
                filed=False,
            )
        )  # fmt: skip
    pages = reading.retired_pages or 0
    if pages >= limits.retired_pages_limit:
        out.append(
            MemoryIssue(
                "page-retirement", "retired pages over limit", Severity.critical, RootCause.retired_pages,
                "CONTACT_SUPPORT", "too many retired pages", f"{pages:.0f} pages retired, at or over DCGM's limit of "
                f"{limits.retired_pages_limit}", REPLACE,
            )
        )  # fmt: skip
    elif pages >= limits.retired_pages_soft and reading.retired_pending:
        out.append(
            MemoryIssue(
                "page-retirement", "retired pages over limit", Severity.critical, RootCause.retired_pages,
                "CONTACT_SUPPORT", "too many retired pages", f"{pages:.0f} pages retired with another one pending: "
                f"still retiring past DCGM's soft limit of {limits.retired_pages_soft}",
                REPLACE,
            )
        )  # fmt: skip
    if reading.retired_pending:
        out.append(
            MemoryIssue(
                "page-retirement", "page retirement pending", Severity.warning, RootCause.retired_pages, "IGNORE",
                "page retirement pending", "a retired page takes effect at the next reset", RESET_WHEN_IDLE,
                filed=False,
            )
        )  # fmt: skip
    if 0 < rows < limits.uncorrectable_remapped_rows_limit:
        out.append(
            MemoryIssue(
                "row-remap", "remapped rows", Severity.info, RootCause.retired_pages, "IGNORE", "remapped rows",
                f"{rows:.0f} row(s) remapped for uncorrectable errors (repaired)", "none now; watch the count",
                filed=False,
            )
        )  # fmt: skip
    return out
