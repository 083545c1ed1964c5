"""Measured vs expected: line nccl-tests rows up with the model and say where and why a run falls short.

`judge_run` is the one judgement of a run that `gpufleet nccl compare` and `gpufleet triage` both present: what the
run shows by itself (corrupted results, a run that stopped, output that ends before nccl-tests' closing lines) and,
when the output (or flags) give the GPU model and layout, its bandwidth against the model's expectation.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from gpufleet.catalog.gpus import GpuModelSpec, get_gpu_model, model_for_product_name
from gpufleet.errors import UserError
from gpufleet.model import Severity
from gpufleet.nccl.constants import DEFAULT_VERSION, available_versions, load_constants
from gpufleet.nccl.own_peak import OwnPeak, judge_own_peak
from gpufleet.nccl.perf_parser import STOP_HINTS, PerfRow, PerfTable
from gpufleet.nccl.predict import Prediction, bus_factor, normalize_coll, predict_one
from gpufleet.nccl.topology import Topology
from gpufleet.nccl.tuning import COLLECTIVES

# The expectation is NCCL's pick delivered at the hardware's bandwidth (data/delivery.yaml) plus pipeline fill
# (data/expected.yaml); healthy public runs land at 0.82-1.35x of it between 1 MiB and 256 MiB and at 0.93-1.06x
# above (bench/nccl_model.py). Flag below 65% and 85% respectively.
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
    verdict: Literal["healthy", "underperforming", "failed", "no-data", "unknown"]
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
    predictions: dict[int, Prediction] = {}  # sizes repeat across data types, ops and -N cycles

    def predicted(nbytes: int) -> Prediction:
        if nbytes not in predictions:
            predictions[nbytes] = predict_one(topo, coll, nbytes)
        return predictions[nbytes]

    rows: list[RowComparison] = []
    for r in table.rows:
        if r.bytes <= 0 or (r.bytes < MID_REGION_BYTES and r.busbw < 0.5):
            continue  # 0-byte rows move nothing; tiny sizes print 0.00: nothing to compare
        p = predicted(r.bytes)
        if p.busbw_gbps <= 0:
            continue  # one rank: nothing crosses a link, nccl-tests prints busbw 0
        ratio = r.busbw / p.busbw_gbps
        flagged = r.bytes >= MID_REGION_BYTES and ratio < 1.0 - _tolerance(r.bytes)
        rows.append(RowComparison(r.bytes, r.busbw, p.busbw_gbps, ratio, p.algo, p.proto, flagged))
    result = CompareResult(coll, topo, rows, "healthy", hosts=list(table.hosts))
    big = [x.ratio for x in rows if x.bytes >= BANDWIDTH_REGION_BYTES]
    result.median_ratio_bandwidth_region = statistics.median(big) if big else None
    result.flagged_sizes = [x.bytes for x in rows if x.flagged]
    small = [
        r.time_us / expected
        for r in table.rows
        if 0 < r.bytes <= LATENCY_REGION_BYTES and r.time_us and (expected := predicted(r.bytes).time_us)
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
    result.verdict = _verdict(table, result.causes, bool(rows))
    return result


def _verdict(
    table: PerfTable, causes: list[Cause], compared: bool
) -> Literal["healthy", "underperforming", "failed", "no-data", "unknown"]:
    if any(c.severity == Severity.critical and c.code in RUN_CAUSES for c in causes):
        return "failed"
    if table.truncated:
        return "unknown"  # the rest of the run could still show corruption or a failure
    if causes:
        return "underperforming"
    return "healthy" if compared else "no-data"


def _fmt(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):g} {unit}"
    return f"{n} B"


RUN_CAUSES = ("data_corruption", "run_failed", "avg_below_target")
# Lines that mean the run stopped, as against an NCCL WARN a run may print and still finish; nccl-tests' own
# `# error:` lines too.
FATAL_HINTS = (*STOP_HINTS, "# error:")


def run_causes(table: PerfTable) -> list[Cause]:
    """What the run shows by itself, whatever the fabric: corrupted results, a stop on an error, an average below
    the run's own NCCL_TESTS_MIN_BW target."""
    causes: list[Cause] = []
    wrong = table.wrong_rows
    if wrong:
        sizes = ", ".join(f"{_fmt(r.bytes)} ({r.wrong} wrong)" for r in wrong[:5])
        causes.append(
            Cause(
                "data_corruption",
                f"#wrong > 0 at {sizes}: results were corrupted (GPU, NVLink or "
                "NIC fault, or LL128 on an untested path)",
                Severity.critical,
            )
        )
    elif table.out_of_bounds:
        causes.append(
            Cause(
                "data_corruption",
                f"nccl-tests found {table.out_of_bounds} result check(s) out of bounds: results were corrupted "
                "(GPU, NVLink or NIC fault, or LL128 on an untested path)",
                Severity.critical,
            )
        )
    # a line that stops a run, or an error the output ends with; a run that printed its footer finished
    fatal = [e for e in table.errors if any(h in e for h in FATAL_HINTS)] + table.last_errors
    if table.footer is None and (fatal or (table.errors and not table.rows)):
        last = _fmt(table.rows[-1].bytes) if table.rows else "the first size"
        first = (fatal or table.errors)[0]
        causes.append(Cause("run_failed", f"the run stopped after {last}: {first[:160]}", Severity.critical))
    if table.avg_check_failed:
        causes.append(
            Cause(
                "avg_below_target",
                f"the average bus bandwidth {table.avg_busbw} GB/s is below 90% of the target set in NCCL_TESTS_MIN_BW",
                Severity.warning,
            )
        )
    return causes


def _causes(table: PerfTable, topo: Topology, rows: list[RowComparison], big_ratio: float | None) -> list[Cause]:
    causes = run_causes(table)
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


def run_findings(judgement: RunJudgement) -> list[CollectiveFinding]:
    """The findings of a judged run: its causes against the model, or what the run showed by itself."""
    if judgement.result is not None:
        return compare_to_findings(judgement.result)
    hosts = judgement.table.hosts
    host = hosts[0] if len(hosts) == 1 else None
    return [
        CollectiveFinding(kind=f"nccl_{c.code}", severity=c.severity, message=c.message, node=host, host=host)
        for c in judgement.issues
    ]


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


REDUCTIONS = frozenset({"sum", "prod", "max", "min", "avg", "mulsum"})
WORD_SIZES = {"int8": 1, "uint8": 1, "char": 1, "f8e4m3": 1, "f8e5m2": 1, "half": 2, "bfloat16": 2, "int32": 4,
              "uint32": 4, "int": 4, "float": 4, "int64": 8, "uint64": 8, "double": 8}  # fmt: skip
MAX_GPUS_PER_NODE = 72
MODEL_DEFAULTS = (("gpus_per_node", "8 GPUs per node"), ("nccl_version", f"NCCL {DEFAULT_VERSION} model"))


@dataclass
class Inferred:
    """Topology fields read from a run's own lines, what was assumed instead, and what stands in the way."""

    values: dict[str, object] = field(default_factory=dict)
    read: list[str] = field(default_factory=list)  # "GPU a100-80gb (NVIDIA A100-SXM4-80GB) from the header"
    assumed: list[str] = field(default_factory=list)
    problem: str = ""  # why the GPU model is unknown, when it is
    nodes_assumed: bool = False  # the output names no hosts: one node is assumed
    op: str | None = None
    op_read: str = ""


def _row_shape(rows: list[PerfRow]) -> tuple[float | None, int | None, bool | None]:
    """busbw/algbw (nccl-tests' bus factor), size/(count x word) and whether every row names a reduction."""
    factors, spreads, reductions = [], set(), set()
    for r in rows:
        # algbw from the size and the time (printed to more digits than algbw's two decimals): a slow run's
        # 0.96 GB/s would otherwise carry a 0.5% rounding into the factor
        for time_us, busbw in ((r.oop_time_us, r.oop_busbw), (r.ip_time_us, r.ip_busbw)):
            if time_us and busbw is not None and busbw >= 1.0 and r.bytes > 0:
                factors.append(busbw / (r.bytes / time_us / 1e3))
                break
        word = WORD_SIZES.get((r.dtype or "").lower())
        if word and r.count:
            spreads.add(round(r.bytes / (r.count * word), 3))
        reductions.add((r.redop or "").lower() in REDUCTIONS)
    factor = statistics.median(factors) if factors else None
    spread = int(next(iter(spreads))) if len(spreads) == 1 and float(next(iter(spreads))).is_integer() else None
    reduction = reductions.pop() if len(reductions) == 1 else None
    return factor, spread, reduction


def _ranks_from_rows(op: str, rows: list[PerfRow]) -> int | None:
    """The rank count nccl-tests' bus factor (doc/PERFORMANCE.md) and row counts imply for `op`, when they agree."""
    factor, spread, _ = _row_shape(rows)
    if op in ("allgather", "reducescatter") and spread and spread > 1:
        return spread
    if op == "allreduce" and factor is not None and 1.02 < factor < 1.999:
        n = round(2 / (2 - factor))
        return n if abs(bus_factor(op, n) - factor) < 0.02 else None
    return None


def _op_from_rows(rows: list[PerfRow]) -> str | None:
    """The collective, from what only it prints: allreduce (a reduction, busbw = 2(n-1)/n algbw with n > 2, one
    element per word), allgather / reducescatter (count per rank: size = nranks x count x word)."""
    factor, spread, reduction = _row_shape(rows)
    if reduction is None or factor is None or spread is None:
        return None
    if spread == 1 and reduction and 1.3 < factor < 1.999:
        return "allreduce"
    if spread > 1 and abs(factor - (spread - 1) / spread) < 0.02:
        return "reducescatter" if reduction else "allgather"
    return None


def infer_topology(table: PerfTable) -> Inferred:
    """GPU model, nodes, GPUs per node, NCCL version and fabric hints from the run's own lines."""
    out = Inferred()
    names = table.gpu_names or ([table.gpu_name] if table.gpu_name else [])
    models: dict[str, GpuModelSpec | None] = {n: model_for_product_name(n) for n in names[:16]}
    known = {m.name for m in models.values() if m is not None}
    if not names:
        out.problem = "the output names no GPU (nccl-tests prints one '#  Rank ... device' line per GPU)"
    elif None in models.values():
        unknown = next(n for n, m in models.items() if m is None)
        out.problem = f"GPU {unknown!r} is not in the catalog"
    elif len(known) > 1:
        out.problem = f"the run mixes GPU models ({', '.join(sorted(known))})"
    else:
        out.values["gpu"] = known.pop()
        out.read.append(f"GPU {out.values['gpu']} ({names[0]})")
    out.op = table.op
    if out.op:
        out.op_read = f"collective {out.op}"
    elif op := _op_from_rows(table.rows):
        out.op = op
        out.assumed.append(f"collective {op}, from the rows (no test name in the output)")
    nranks, nodes = table.nranks, table.nodes
    if table.rank_hosts:
        out.read.append(f"{nranks} GPU(s) on {nodes} host(s) from the header")
    else:
        if nranks and table.threads and table.gpus_per_thread:
            nranks *= table.threads * table.gpus_per_thread  # mpirun -n counts processes
        if table.info_hosts and table.nranks is not None:
            out.read.append(f"{nranks} GPU(s) on {nodes} host(s) from NCCL's INFO lines")
        elif nranks is None and table.info_nranks:
            nranks = table.info_nranks
            out.assumed.append(f"{nranks} GPUs, the world size NCCL's INFO lines or the launcher give")
        if nranks is None and out.op and (n := _ranks_from_rows(out.op, table.rows)):
            nranks = n
            out.assumed.append(f"{n} GPUs, from the bus factor of the rows (no '#  Rank' lines)")
        if nodes is None:
            nodes = 1
            out.nodes_assumed = True
            out.assumed.append("1 node (the output names no hosts)")
    if nodes:
        out.values["nodes"] = nodes
    if nranks and nodes:
        per_node = max(1, nranks // nodes)
        if per_node <= MAX_GPUS_PER_NODE:
            out.values["gpus_per_node"] = per_node
        if nranks % nodes:
            out.assumed.append(f"{per_node} GPUs per node ({nranks} GPUs do not split evenly over {nodes} nodes)")
    if table.nccl_version:
        out.values["nccl_version"] = table.nccl_version
        out.read.append(f"NCCL {table.nccl_version}")
    hca = table.env.get("NCCL_IB_HCA")
    if hca and not hca.startswith("^"):
        out.values["nics_per_node"] = len([h for h in hca.lstrip("=").split(",") if h])
    if table.env.get("NCCL_IB_GID_INDEX") or table.env.get("NCCL_IB_TC"):
        out.values["transport"] = "roce"
    if table.net is not None:
        out.values["transport"] = table.net
        out.read.append(f"network {table.net} from NCCL's INFO lines")
    if table.nics and "nics_per_node" not in out.values:
        out.values["nics_per_node"] = table.nics
        out.read.append(f"{table.nics} NIC(s) per node from NCCL's INFO lines")
    if table.nic_mbps:
        slowest = min(table.nic_mbps.values()) / 1000
        out.values["nic_gbps"] = slowest
        spread = "" if len(set(table.nic_mbps.values())) == 1 else ", the slowest of them"
        out.read.append(f"{slowest:g} Gb/s per NIC from NCCL's NET/IB lines{spread}")
    return out


@dataclass
class RunJudgement:
    """One run judged: by itself (`issues`) and, when the fabric is known, against the model (`result`)."""

    table: PerfTable
    inferred: Inferred
    issues: list[Cause]  # from the run alone: corruption, a stop on an error, its own NCCL_TESTS_MIN_BW target
    result: CompareResult | None = None  # bandwidth against the model; None when that could not be judged
    topology: Topology | None = None
    op: str | None = None
    not_judged: str = ""  # why the bandwidth was not compared with the model
    fix: str = ""
    assumed: list[str] = field(default_factory=list)
    own: OwnPeak | None = None  # without the model: the run against its own peak (nccl.own_peak)

    @property
    def causes(self) -> list[Cause]:
        if self.result is not None:
            return self.result.causes
        own = [Cause(c.code, c.message, c.severity) for c in self.own.causes] if self.own is not None else []
        return self.issues + own

    @property
    def judged_by_itself(self) -> bool:
        """The bandwidth was judged against the run's own peak, the model being unable to size it."""
        return self.result is None and self.own is not None and self.own.conclusive

    @property
    def complete(self) -> bool:
        return not self.table.truncated

    @property
    def verdict(self) -> Literal["healthy", "underperforming", "failed", "no-data", "unknown"]:
        if self.result is not None:
            return self.result.verdict
        if self.judged_by_itself:
            return _verdict(self.table, self.causes, True)
        verdict = _verdict(self.table, self.issues, False)
        return "unknown" if verdict in ("healthy", "no-data") and self.table.rows else verdict


# what a run across nodes needs to be sized: (field, what it is, the flag that gives it)
_NIC_NEEDS = (
    ("nics_per_node", "NIC count per node", "--nics-per-node N (e.g. 8)"),
    ("nic_gbps", "NIC speed", "--nic-gbps GBPS (e.g. 400)"),
)


def build_topology(values: dict[str, object]) -> Topology:
    """A Topology from inferred values and flags; a UserError saying what is missing."""
    values = dict(values)
    if "gpu" not in values:
        raise UserError("no GPU model given", fix="pass --gpu (e.g. h100-sxm)")
    missing = [need for need in _NIC_NEEDS if not values.get(need[0])]
    if values.get("nodes", 1) != 1 and missing:
        raise UserError(
            f"the run spans {values.get('nodes')} nodes and neither its lines nor the flags give its "
            + " or its ".join(what for _, what, _ in missing),
            fix=f"pass {' and '.join(flag for _, _, flag in missing)}, or rerun with NCCL_DEBUG=INFO: NCCL's NET/IB "
            "lines name the HCAs and their speed",
        )
    if values.get("nodes", 1) == 1:
        values.setdefault("nics_per_node", 0)
    try:
        return Topology(**values)
    except ValueError as exc:
        errors = exc.errors() if hasattr(exc, "errors") else []
        raise UserError(f"bad topology: {errors[0]['msg'] if errors else exc}") from exc


def judge_run(
    table: PerfTable,
    flags: dict[str, object] | None = None,
    op: str | None = None,
    default_op: str | None = None,
) -> RunJudgement:
    """Judge one run. `flags` (topology fields) override what the output says; `op` overrides its collective;
    `default_op` stands in when neither the output nor its rows tell the collective."""
    inferred = infer_topology(table)
    judgement = RunJudgement(table, inferred, run_causes(table), assumed=list(inferred.assumed))
    given = {k: v for k, v in (flags or {}).items() if v is not None}
    values = {**inferred.values, **given}
    coll = normalize_coll(op) if op else inferred.op
    if coll is None and default_op:
        coll = default_op
        judgement.assumed.append(f"collective {default_op} (the output does not name its test)")
    judgement.op = coll
    if coll is None:
        judgement.not_judged = "the output does not name its test (all_reduce_perf, ...)"
        judgement.fix = "pass the collective (--op)"
        return _by_itself(judgement, values, given)
    if coll not in COLLECTIVES:
        judgement.not_judged = f"the model does not cover {coll}"
        judgement.fix = "compare allreduce/allgather/reducescatter/broadcast/reduce runs, or pass --op"
        return _by_itself(judgement, values, given)
    if "gpu" not in values:
        judgement.not_judged = inferred.problem or "the output names no GPU"
        judgement.fix = "pass --gpu (e.g. h100-sxm)"
        return _by_itself(judgement, values, given)
    assumed = [f"{what} (not in the output)" for key, what in MODEL_DEFAULTS if key not in values]
    if values.get("nodes", 1) != 1 and "transport" not in values:
        assumed.append("InfiniBand transport (not in the output)")
    version = str(values.get("nccl_version", DEFAULT_VERSION))
    try:
        load_constants(version)
    except UserError:
        oldest = available_versions()[0]
        values["nccl_version"] = oldest
        assumed.append(f"NCCL {oldest} model (NCCL {version} is not modelled)")
    try:
        topo = build_topology(values)
    except UserError as exc:
        judgement.not_judged, judgement.fix = exc.message, exc.fix or ""
        return _by_itself(judgement, values, given)
    if topo.nranks <= 1:
        judgement.not_judged = "the run has one GPU: nothing crosses a link"
        judgement.fix = "run nccl-tests across the node's GPUs (-g 8, or one rank per GPU)"
        return judgement
    judgement.topology = topo
    judgement.assumed += assumed
    try:
        judgement.result = compare_table(table, topo, coll)
    except UserError as exc:
        judgement.not_judged, judgement.fix = exc.message, exc.fix or ""
    return judgement


def _by_itself(judgement: RunJudgement, values: dict[str, object], given: dict[str, object]) -> RunJudgement:
    """Where the model cannot size the run: the run against its own peak and, on one node, the PCIe floor. A
    published summary table (sizes picked from other runs) has no peak of its own."""
    if judgement.table.fmt != "nccl-tests":
        return judgement
    gpu = values.get("gpu")
    spec = None
    if isinstance(gpu, str):
        try:
            spec = get_gpu_model(gpu)
        except UserError:
            spec = None
    nodes = values.get("nodes")
    per_node = values.get("gpus_per_node")
    nranks = nodes * per_node if isinstance(nodes, int) and isinstance(per_node, int) else None
    assumed = judgement.inferred.nodes_assumed and "nodes" not in given
    judgement.own = judge_own_peak(
        judgement.table, nodes if isinstance(nodes, int) else None, nranks, spec, judgement.not_judged, assumed
    )
    return judgement
