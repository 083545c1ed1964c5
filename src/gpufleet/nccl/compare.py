"""Measured vs expected: line nccl-tests rows up with the model and say where and why a run falls short."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from gpufleet.model import Severity
from gpufleet.nccl.perf_parser import PerfTable
from gpufleet.nccl.predict import predict_one
from gpufleet.nccl.topology import Topology

# The expectation includes pipeline fill (data/expected.yaml); healthy public runs land at 0.78-1.7x of it
# between 1 MiB and 256 MiB and at 0.88-1.3x above. Flag below 65% and 85% of expected respectively.
BANDWIDTH_REGION_BYTES = 256 << 20
TOLERANCE_BANDWIDTH = 0.15
TOLERANCE_MID = 0.35
MID_REGION_BYTES = 1 << 20
LATENCY_REGION_BYTES = 64 << 10
# Small-message time this many times the model's is a latency problem, not noise.
LATENCY_FACTOR = 2.5


@dataclass(frozen=True)
class RowComparison:
    bytes: int
    measured_busbw: float
    predicted_busbw: float
    ratio: float
    algo: str
    proto: str
    flagged: bool


@dataclass(frozen=True)
class Cause:
    code: str
    message: str
    severity: Severity


@dataclass
class CompareResult:
    op: str
    topology: Topology
    rows: list[RowComparison]
    verdict: Literal["healthy", "underperforming", "failed", "no-data"]
    causes: list[Cause] = field(default_factory=list)
    flagged_sizes: list[int] = field(default_factory=list)
    median_ratio_bandwidth_region: float | None = None
    latency_factor: float | None = None  # median measured/predicted time for sizes <= 64 KiB
    hosts: list[str] = field(default_factory=list)


def _tolerance(nbytes: int) -> float:
    return TOLERANCE_BANDWIDTH if nbytes >= BANDWIDTH_REGION_BYTES else TOLERANCE_MID


def compare_table(table: PerfTable, topo: Topology, op: str | None = None) -> CompareResult:
    """Compare every row of ``table`` with the prediction for ``topo``."""
    coll = op or table.op or "allreduce"
    rows: list[RowComparison] = []
    for r in table.rows:
        if r.bytes < MID_REGION_BYTES and r.busbw < 0.5:
            continue  # tiny sizes print 0.00: nothing to compare
        p = predict_one(topo, coll, r.bytes)
        ratio = r.busbw / p.busbw_gbps if p.busbw_gbps > 0 else 0.0
        flagged = r.bytes >= MID_REGION_BYTES and ratio < 1.0 - _tolerance(r.bytes)
        rows.append(RowComparison(r.bytes, r.busbw, p.busbw_gbps, ratio, p.algo, p.proto, flagged))
    result = CompareResult(coll, topo, rows, "healthy", hosts=list(table.hosts))
    big = [x.ratio for x in rows if x.bytes >= BANDWIDTH_REGION_BYTES]
    result.median_ratio_bandwidth_region = statistics.median(big) if big else None
    result.flagged_sizes = [x.bytes for x in rows if x.flagged]
    small = [
        r.time_us / predict_one(topo, coll, r.bytes).time_us
        for r in table.rows
        if r.bytes <= LATENCY_REGION_BYTES and r.time_us
    ]
    result.latency_factor = statistics.median(small) if small else None
    result.causes = _causes(table, topo, rows, result.median_ratio_bandwidth_region)
    if result.latency_factor is not None and result.latency_factor > LATENCY_FACTOR:
        result.causes.append(
            Cause(
                "high_latency",
                f"messages up to 64 KiB take {result.latency_factor:.1f}x the expected time: per-operation "
                "latency is high (CPU/NUMA binding of the ranks, a proxy thread starved of CPU, traffic "
                "through the host instead of NVLink/GPUDirect, or a slow network path)",
                Severity.warning,
            )
        )
    if not rows:
        result.verdict = "failed" if table.errors else "no-data"
    elif table.truncated or table.wrong_rows:
        result.verdict = "failed"
    elif result.flagged_sizes or any(c.code == "high_latency" for c in result.causes):
        result.verdict = "underperforming"
    return result


def _fmt(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):g} {unit}"
    return f"{n} B"


def _causes(table: PerfTable, topo: Topology, rows: list[RowComparison], big_ratio: float | None) -> list[Cause]:
    causes: list[Cause] = []
    if table.wrong_rows:
        sizes = ", ".join(_fmt(r.bytes) for r in table.wrong_rows[:5])
        causes.append(
            Cause(
                "data_corruption",
                f"#wrong > 0 at {sizes}: results were corrupted (GPU, NVLink or "
                "NIC fault, or LL128 on an untested path)",
                Severity.critical,
            )
        )
    if table.truncated or (table.errors and not table.avg_busbw):
        last = _fmt(table.rows[-1].bytes) if table.rows else "the first size"
        hint = f": {table.errors[0][:160]}" if table.errors else ""
        causes.append(Cause("run_failed", f"the run stopped after {last}{hint}", Severity.critical))
    flagged = [r for r in rows if r.flagged]
    if not flagged:
        return causes
    worst = min(flagged, key=lambda r: r.ratio)
    where = f"{_fmt(flagged[0].bytes)}..{_fmt(flagged[-1].bytes)}"
    mid = [r for r in flagged if r.bytes < BANDWIDTH_REGION_BYTES]
    large = [r for r in flagged if r.bytes >= BANDWIDTH_REGION_BYTES]
    if big_ratio is not None and topo.nodes > 1 and 0.35 <= big_ratio <= 0.65:
        causes.append(
            Cause(
                "rail_missing",
                f"large messages reach {big_ratio:.0%} of expected on a multi-node run: "
                "about half the rails carry traffic (a NIC down or left out of NCCL_IB_HCA, a GPU without "
                "its local NIC, or cross-rail routing)",
                Severity.critical,
            )
        )
    elif big_ratio is not None and big_ratio < 0.2:
        transport = (
            "the socket transport (IB/RDMA unavailable or NCCL_IB_DISABLE=1)"
            if topo.nodes > 1
            else "PCIe/host memory instead of NVLink P2P (NCCL_P2P_DISABLE, ACS/IOMMU, or a missing NVLink)"
        )
        causes.append(
            Cause(
                "wrong_transport",
                f"bandwidth is {big_ratio:.0%} of expected at every large size: "
                f"traffic is likely going over {transport}",
                Severity.critical,
            )
        )
    elif large:
        causes.append(
            Cause(
                "low_peak",
                f"peak bandwidth {worst.ratio:.0%} of expected at {_fmt(worst.bytes)}: a slow "
                "link (NVLink/PCIe downtrained, NIC at lower speed, congestion) or thermal/power throttling",
                Severity.warning,
            )
        )
    if mid and not large:
        causes.append(
            Cause(
                "mid_size_dip",
                f"sizes {where} fall to {worst.ratio:.0%} of expected while large messages "
                "are fine: a protocol or channel problem (LL128 disabled, forced NCCL_PROTO/NCCL_ALGO, "
                "NCCL_MAX_NCHANNELS too low, or NVLS/CollNet not engaging)",
                Severity.warning,
            )
        )
    return causes


class CollectiveFinding(BaseModel):
    """A run slower than its fabric should give, as `nccl compare --report` sends it to the control plane (the
    API validates the same model)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str = Field(max_length=128)
    severity: Severity
    message: str = Field(max_length=4096)
    node: str | None = None
    host: str | None = None
    nbytes: int | None = None
    ratio: float | None = None


class CollectiveReport(BaseModel):
    """What `POST /api/v1/nccl-findings` takes: the findings of one results file."""

    model_config = ConfigDict(extra="forbid")

    source: str = Field(min_length=1, max_length=512)
    findings: list[CollectiveFinding] = Field(max_length=1000)


def compare_to_findings(result: CompareResult) -> list[CollectiveFinding]:
    """One finding per cause; the host is named when the run covered a single host."""
    host = result.hosts[0] if len(result.hosts) == 1 else None
    worst = min((r for r in result.rows if r.flagged), key=lambda r: r.ratio, default=None)
    findings = []
    for cause in result.causes:
        findings.append(
            CollectiveFinding(
                kind=f"nccl_{cause.code}",
                severity=cause.severity,
                message=cause.message,
                node=host,
                host=host,
                nbytes=worst.bytes if worst else None,
                ratio=worst.ratio if worst else None,
            )
        )
    return findings
