"""`gpufleet nccl`: predicted collective performance, measured-vs-expected, env advice, log diagnosis."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from gpufleet.cli.inputs import read_input_lines, read_input_text
from gpufleet.cli.output import OUTPUT_HELP, OutputFormat, console, emit, err_console, make_table
from gpufleet.errors import UserError
from gpufleet.nccl.topology import Topology

if TYPE_CHECKING:
    from gpufleet.fabric.graph import FabricGraph
    from gpufleet.fabric.rails import JobFabric
    from gpufleet.nccl.compare import CollectiveFinding, RunJudgement
    from gpufleet.nccl.perf_parser import PerfTable

sub = typer.Typer(
    help="NCCL: predict collective performance, compare nccl-tests runs, advise, lint, diagnose logs.",
    no_args_is_help=True,
)

SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """8, 1K, 4M, 8G (powers of 1024, as nccl-tests reads -b/-e)."""
    m = SIZE.match(text)
    if not m:
        raise UserError(f"cannot read size {text!r}", fix="use bytes or a K/M/G suffix, e.g. 8, 64K, 8G")
    return int(float(m.group(1)) * (1 << (10 * "KMGT".find(m.group(2).upper()) + 10) if m.group(2) else 1))


def human(n: int) -> str:
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


GPU_OPT = typer.Option(None, "--gpu", help="GPU model (h100-sxm, h200, a100, b200, ...)")
NODES_OPT = typer.Option(None, "--nodes", min=1, help="Number of nodes")
GPN_OPT = typer.Option(None, "--gpus-per-node", min=1, help="GPUs (ranks) per node")
NICS_OPT = typer.Option(
    None, "--nics-per-node", min=0, help="Fabric NIC ports per node (default: the run's NCCL NET/IB lines)"
)
GBPS_OPT = typer.Option(
    None, "--nic-gbps", min=0, help="Speed of one NIC port, Gb/s (default: the run's NCCL NET/IB lines)"
)
TRANSPORT_OPT = typer.Option(None, "--transport", help="ib, roce, efa or socket")
NVLS_OPT = typer.Option(None, "--nvls/--no-nvls", help="Force NVLink SHARP on/off (default: NCCL's auto rule)")
SHARP_OPT = typer.Option(False, "--sharp", help="IB SHARP via CollNet is available and enabled")
NVSWITCH_OPT = typer.Option(None, "--nvswitch/--no-nvswitch", help="Override the catalog: GPUs behind an NVSwitch")
CPU_OPT = typer.Option(None, "--cpu", help="CPU vendor: intel, amd, arm, power")
VERSION_OPT = typer.Option(None, "--nccl-version", help="NCCL version whose constants to use (default 2.30)")
GRAPH_LOG_OPT = typer.Option(
    None,
    "--graph-log",
    exists=True,
    dir_okay=False,
    help="NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=GRAPH log: use NCCL's own search results instead of derived ones",
)
TUNING_LOG_OPT = typer.Option(
    None,
    "--tuning-log",
    exists=True,
    dir_okay=False,
    help="NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING log (rank 0): use NCCL's printed cost table",
)
OUT_OPT = typer.Option(OutputFormat.table, "-o", "--output", help=OUTPUT_HELP)
FABRIC_OPT = typer.Option(
    None,
    "--fabric",
    exists=True,
    dir_okay=False,
    help="`ibnetdiscover` output: rails per node (the hosts' cabled HCA ports), their link speed (the slowest) and "
    "the switch hops between the job's hosts come from the discovered fabric. --nics-per-node, --nic-gbps and "
    "--transport, when given too, win over it.",
)
# what the model is told when neither a flag nor the fabric says
PREDICT_DEFAULTS: dict[str, object] = {"nodes": 1, "nics_per_node": 0, "nic_gbps": 0.0, "transport": "ib"}
FABRIC_FLAGS = {"nics_per_node": "--nics-per-node", "nic_gbps": "--nic-gbps", "transport": "--transport"}


def _topology(defaults: dict[str, object], **flags: object) -> Topology:
    from gpufleet.nccl.compare import build_topology

    values = {k: v for k, v in defaults.items() if v is not None}
    values.update({k: v for k, v in flags.items() if v is not None})
    return build_topology(values)


@sub.command("predict")
def predict(
    gpu: str = GPU_OPT,
    nodes: int | None = typer.Option(
        None, "--nodes", min=1, help="Number of nodes (default 1, or the hosts --fabric/--hosts name)"
    ),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node", min=1, help="GPUs (ranks) per node"),
    nics_per_node: int | None = typer.Option(
        None, "--nics-per-node", min=0, help="Fabric NIC ports per node (default 0, or from --fabric)"
    ),
    nic_gbps: float | None = typer.Option(
        None, "--nic-gbps", min=0, help="Speed of one NIC port, Gb/s (default: from --fabric)"
    ),
    transport: str | None = typer.Option(None, "--transport", help="ib, roce, efa or socket (default ib)"),
    fabric: Path | None = FABRIC_OPT,
    hosts: str | None = typer.Option(
        None,
        "--hosts",
        help="With --fabric: the job's hosts, comma-separated, as the fabric's HCAs name them "
        "(default: every host of the fabric)",
    ),
    nvls: bool | None = NVLS_OPT,
    sharp: bool = SHARP_OPT,
    nvswitch: bool | None = NVSWITCH_OPT,
    graph_log: Path | None = GRAPH_LOG_OPT,
    tuning_log: Path | None = TUNING_LOG_OPT,
    cpu: str = typer.Option("intel", "--cpu", help="CPU vendor: intel, amd, arm, power"),
    nccl_version: str = typer.Option("2.30", "--nccl-version", help="NCCL version whose constants to use"),
    op: str = typer.Option("allreduce", "--op", help="allreduce, allgather, reducescatter, broadcast, reduce"),
    algo: str | None = typer.Option(None, "--algo", help="Like NCCL_ALGO, e.g. ring or ^nvls;allreduce:tree,ring"),
    proto: str | None = typer.Option(None, "--proto", help="Like NCCL_PROTO, e.g. ^LL128"),
    min_bytes: str = typer.Option("8", "--min-bytes", "-b", help="Smallest size (8, 1K, 1M, ...)"),
    max_bytes: str = typer.Option("8G", "--max-bytes", "-e", help="Largest size"),
    factor: int = typer.Option(2, "--step-factor", "-f", min=2, help="Size multiplier between rows"),
    plot: Path | None = typer.Option(None, "--plot", help="Also write a busbw-vs-size plot (PNG)"),
    output: OutputFormat = OUT_OPT,
) -> None:
    """Predict time, algbw and busbw per message size, with the algorithm and protocol NCCL would pick."""
    from gpufleet.fabric.rails import job_fabric
    from gpufleet.nccl.predict import predict_sweep

    given: dict[str, object] = {"nics_per_node": nics_per_node, "nic_gbps": nic_gbps, "transport": transport}
    host_list = _host_list(hosts)
    loaded = _load_fabric(fabric, host_list)
    job = job_fabric(loaded[0], host_list, source=loaded[1]) if loaded is not None else None
    notes: list[str] = []
    layout: dict[str, object] = dict(PREDICT_DEFAULTS)
    if job is not None:
        layout.update(job.flags())
        notes = _fabric_notes(job, given)
        if hosts and nodes is not None and nodes != len(job.hosts):
            raise UserError(
                f"--nodes {nodes} but --hosts names {len(job.hosts)} host(s)",
                fix="drop --nodes: with --hosts, the job's hosts are its nodes",
            )
        if nodes is None:
            nodes = len(job.hosts)
        if not hosts:
            notes.append(
                f"the job's hosts are not named (--hosts): rails and speed are the slowest across all "
                f"{len(job.hosts)} hosts of the fabric"
            )
    topo = _topology(
        layout,
        gpu=gpu,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        nics_per_node=nics_per_node,
        nic_gbps=nic_gbps,
        transport=transport,
        nvls=nvls,
        sharp=sharp,
        nvswitch=nvswitch,
        cpu_vendor=cpu,
        nccl_version=nccl_version,
        algo_env=algo,
        proto_env=proto,
        graph_override=_graph_override(graph_log),
        tuning_override=_tuning_override(tuning_log),
    )
    rows = predict_sweep(topo, op, parse_size(min_bytes), parse_size(max_bytes), factor)
    data = [
        {
            "bytes": r.bytes,
            "op": r.op,
            "algo": r.algo,
            "proto": r.proto,
            "channels": r.channels,
            "threads": r.threads,
            "time_us": round(r.time_us, 3),
            "algbw_gbps": round(r.algbw_gbps, 3),
            "busbw_gbps": round(r.busbw_gbps, 3),
        }
        for r in rows
    ]
    if plot is not None:
        _plot(plot, rows, f"{topo.gpu} x{topo.nranks} ({topo.nodes} node(s)) {rows[0].op}")
    if job is not None and output not in (OutputFormat.table, OutputFormat.wide):
        # the rows stay the whole of stdout; what the fabric said goes beside them
        for line in _fabric_lines(job, notes):
            err_console.print(line, highlight=False, markup=False)

    def table(wide: bool) -> None:
        # nccl-tests column order, float elements, one placement (the model has no in/out-of-place split).
        cols = ["size (B)", "count", "type", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "algo", "proto"]
        if wide:
            cols += ["channels", "threads"]
        body = []
        for r, d in zip(rows, data, strict=True):
            row = [
                r.bytes,
                r.bytes // 4,
                "float",
                f"{d['time_us']:.2f}",
                f"{d['algbw_gbps']:.2f}",
                f"{d['busbw_gbps']:.2f}",
                d["algo"],
                d["proto"],
            ]
            if wide:
                row += [d["channels"], d["threads"]]
            body.append(row)
        title = (
            f"predicted {rows[0].op}: {topo.gpu} x {topo.nranks} ranks ({topo.nodes} node(s)), "
            f"NCCL {topo.nccl_version} model"
        )
        console.print(make_table(cols, body, title=title))
        if job is not None:
            for line in _fabric_lines(job, notes):
                console.print(line, highlight=False, markup=False)

    emit(data, output, table)


def _host_list(text: str | None) -> list[str] | None:
    names = [h.strip() for h in (text or "").split(",") if h.strip()]
    return names or None


def _read_fabric(path: Path) -> tuple[FabricGraph, str]:
    """The fabric an `ibnetdiscover` output shows, and the name to cite it by."""
    from gpufleet.fabric.discover import from_ibnetdiscover
    from gpufleet.parsers.infiniband.diags import parse_ibnetdiscover

    text, cited = read_input_text(path)
    return from_ibnetdiscover(parse_ibnetdiscover(text, source=cited)), cited


def _live_fabric() -> tuple[FabricGraph, str]:
    """The fabric as the running control plane last discovered it."""
    from gpufleet.cli.client import Api
    from gpufleet.fabric.rails import graph_from_rows

    api = Api()
    systems, links = api.get("/api/v1/fabric/systems"), api.get("/api/v1/fabric/links")
    if not systems:
        raise UserError(
            "the control plane has not discovered the fabric",
            fix="run a fabric watcher (`gpufleet agent --fabric`), or pass an `ibnetdiscover` output with --fabric",
        )
    return graph_from_rows(systems, links), "the control plane's fabric"


def _load_fabric(path: Path | None, hosts: list[str] | None, *, live: bool = False) -> tuple[FabricGraph, str] | None:
    """The discovered fabric the command was pointed at, or None when none was."""
    if path is not None and live:
        raise UserError("--fabric and --live-fabric both name a fabric", fix="give one of them")
    if path is None and not live:
        if hosts:
            raise UserError("--hosts names hosts of a fabric, and no fabric was given", fix="add --fabric FILE")
        return None
    return _read_fabric(path) if path is not None else _live_fabric()


def _fabric_notes(job: JobFabric, given: dict[str, object]) -> list[str]:
    """Which of a flag and the fabric the model took, where both say something: the flag."""
    notes = []
    from_fabric = job.flags()
    units = {"nic_gbps": " Gb/s", "nics_per_node": " per node"}
    for key, flag in FABRIC_FLAGS.items():
        mine, theirs = given.get(key), from_fabric.get(key)
        if mine is not None and theirs is not None and mine != theirs:
            unit = units.get(key, "")
            mine_text = f"{mine:g}" if isinstance(mine, float | int) else str(mine)
            theirs_text = f"{theirs:g}" if isinstance(theirs, float | int) else str(theirs)
            notes.append(f"{flag} {mine_text} wins over the fabric's {theirs_text}{unit}")
    return notes


def _fabric_lines(job: JobFabric, notes: list[str]) -> list[str]:
    speed = f"{job.nic_gbps:g} Gb/s" if job.nic_gbps is not None else "speed unknown"
    if job.hops is None:
        apart = ""
    elif job.hops <= 1:
        apart = f", one leaf per rail ({', '.join(job.path)})"
    else:
        apart = f", up to {job.hops} switches apart ({' -> '.join(job.path)})"
    lines = [f"fabric ({job.source}): {len(job.hosts)} host(s), {job.nics_per_node} rail(s) per node at {speed}{apart}"]
    return lines + [f"fabric: {note}" for note in [*job.notes, *notes]]


def _graph_override(
    path: Path | None,
) -> tuple[tuple[str, int, float, float, str, str, bool, bool], ...] | None:
    if path is None:
        return None
    from gpufleet.nccl.graph_log import parse_graph_log

    return parse_graph_log(path.read_text(encoding="utf-8", errors="replace"))


def _tuning_override(path: Path | None) -> tuple[tuple[str, str, str, float, float], ...] | None:
    if path is None:
        return None
    from gpufleet.nccl.tuning_log import parse_tuning_log

    return parse_tuning_log(path.read_text(encoding="utf-8", errors="replace"))


def _plot(path: Path, rows: list, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.semilogx([r.bytes for r in rows], [r.busbw_gbps for r in rows], marker="o", ms=3)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    try:
        fig.savefig(path, dpi=120, bbox_inches="tight")
    except OSError as exc:
        raise UserError(f"cannot write plot {path}: {exc.strerror}") from exc
    finally:
        plt.close(fig)


@sub.command("compare")
def compare(
    file: Path = typer.Argument(..., exists=True, dir_okay=False, help="nccl-tests output or busbw table"),
    gpu: str | None = GPU_OPT,
    nodes: int | None = NODES_OPT,
    gpus_per_node: int | None = GPN_OPT,
    nics_per_node: int | None = NICS_OPT,
    nic_gbps: float | None = GBPS_OPT,
    transport: str | None = TRANSPORT_OPT,
    nvls: bool | None = NVLS_OPT,
    sharp: bool = SHARP_OPT,
    nvswitch: bool | None = NVSWITCH_OPT,
    graph_log: Path | None = GRAPH_LOG_OPT,
    tuning_log: Path | None = TUNING_LOG_OPT,
    cpu: str | None = CPU_OPT,
    nccl_version: str | None = VERSION_OPT,
    op: str | None = typer.Option(None, "--op", help="Collective (default: from the file, else allreduce)"),
    fabric: Path | None = FABRIC_OPT,
    live_fabric: bool = typer.Option(
        False,
        "--live-fabric",
        help="Like --fabric, from the running control plane's discovered fabric (the server --report sends to).",
    ),
    output: OutputFormat = OUT_OPT,
    report: bool = typer.Option(
        False, "--report", help="Send the findings to the running control plane (incidents: collective-slow)."
    ),
) -> None:
    """Line up a measured run with the prediction and say which sizes fall short, by how much, and why.

    GPU model, GPU count and nodes come from the run's own header lines, NIC count and speed from its NCCL INFO
    lines (NCCL_DEBUG=INFO: `NET/IB : Using [0]mlx5_0:1/IB ...` and each device's `speed=`); flags override them,
    and what was assumed is said. With --fabric, rails per node and their speed come from the run's hosts in the
    discovered fabric. Output that ends before nccl-tests' closing `# Avg bus bandwidth` line is judged `unknown`, never
    healthy; rows with `#wrong` > 0 make it `failed`."""
    from gpufleet.nccl.compare import judge_run, run_findings
    from gpufleet.nccl.perf_parser import parse_perf_runs

    text = read_input_text(file)[0].replace("\x00", "")
    runs = parse_perf_runs(text.splitlines())
    flags: dict[str, object] = {
        "gpu": gpu,
        "nodes": nodes,
        "gpus_per_node": gpus_per_node,
        "nics_per_node": nics_per_node,
        "nic_gbps": nic_gbps,
        "transport": transport,
        "nvls": nvls,
        "sharp": sharp or None,
        "nvswitch": nvswitch,
        "cpu_vendor": cpu,
        "nccl_version": nccl_version,
        "graph_override": _graph_override(graph_log),
        "tuning_override": _tuning_override(tuning_log),
    }
    loaded = _load_fabric(fabric, None, live=live_fabric)
    judgements, jobs = [], []
    for table in runs:
        job = _run_fabric(loaded, table, flags) if loaded is not None else None
        given = {k: v for k, v in flags.items() if v is not None}
        run_flags = flags if job is None else {**job[0].flags(), **job[2], **given}
        judgements.append(judge_run(table, run_flags, op, default_op="allreduce"))
        jobs.append(job)
    if len(judgements) == 1:
        only = judgements[0]
        if only.result is None and not only.issues and not only.judged_by_itself:  # nothing to say: what is missing
            raise UserError(only.not_judged, fix=only.fix or None)
    data = [_compare_data(file, j) for j in judgements]
    for body, job in zip(data, jobs, strict=True):
        if job is not None:
            body["fabric"] = {**job[0].to_dict(), "notes": [*job[0].notes, *job[1]]}

    def render(wide: bool) -> None:
        for number, (j, job) in enumerate(zip(judgements, jobs, strict=True), 1):
            name = file.name if len(judgements) == 1 else f"{file.name} (run {number}: {j.op or 'unknown test'})"
            _render_run(name, j)
            if job is not None:
                for line in _fabric_lines(job[0], job[1]):
                    console.print(line, highlight=False, markup=False)

    emit(data[0] if len(data) == 1 else data, output, render)
    if report:
        _report(file, [f for j in judgements for f in run_findings(j)])


def _run_fabric(
    loaded: tuple[FabricGraph, str], table: PerfTable, flags: dict[str, object]
) -> tuple[JobFabric, list[str], dict[str, object]]:
    """The run's rails from the fabric (its hosts', or every host's when it names none), what to say about them,
    and what the run itself says that is narrower than the fabric (NCCL_IB_HCA leaving rails out)."""
    from gpufleet.fabric.rails import job_fabric
    from gpufleet.nccl.compare import infer_topology

    job = job_fabric(loaded[0], table.hosts or None, source=loaded[1])
    notes = _fabric_notes(job, flags)
    if not table.hosts:
        notes.append(
            f"the run names no hosts: rails and speed are the slowest across all {len(job.hosts)} hosts of the fabric"
        )
    narrower: dict[str, object] = {}
    hcas = infer_topology(table).values.get("nics_per_node")
    if isinstance(hcas, int) and hcas < job.nics_per_node and flags.get("nics_per_node") is None:
        narrower["nics_per_node"] = hcas
        notes.append(
            f"the run's NCCL_IB_HCA names {hcas} HCA(s), fewer than the fabric's {job.nics_per_node} rails per node: "
            f"the model uses {hcas}"
        )
    return job, notes, narrower


def _compare_data(file: Path, j: RunJudgement) -> dict[str, object]:
    """One judged run as `compare -o json` prints it."""
    result = j.result
    return {
        "file": str(file),
        "op": j.op,
        "nccl_version_in_file": j.table.nccl_version,
        "verdict": j.verdict,
        "complete": j.complete,
        "median_ratio_large": result.median_ratio_bandwidth_region if result else None,
        "latency_factor_small": result.latency_factor if result else None,
        "flagged_sizes": result.flagged_sizes if result else [],
        "causes": [{"code": c.code, "severity": c.severity, "message": c.message} for c in j.causes],
        "rows": [
            {
                "bytes": r.bytes,
                "measured_busbw": r.measured_busbw,
                "predicted_busbw": round(r.predicted_busbw, 2),
                "ratio": round(r.ratio, 3),
                "algo": r.algo,
                "proto": r.proto,
                "flagged": r.flagged,
            }
            for r in (result.rows if result else [])
        ],
        "topology": j.topology.model_dump() if j.topology else None,
        "assumed": j.assumed,
        "not_judged": j.not_judged or None,
        "own_peak_busbw": j.own.peak if j.own is not None else None,
        "judged_by_itself": j.judged_by_itself,
    }


def _render_run(name: str, j: RunJudgement) -> None:
    result, topo = j.result, j.topology
    if result is not None and topo is not None:
        body = [
            [
                human(r.bytes),
                f"{r.measured_busbw:.2f}",
                f"{r.predicted_busbw:.2f}",
                f"{r.ratio:.0%}",
                f"{r.algo}/{r.proto}",
                "LOW" if r.flagged else "",
            ]
            for r in result.rows
        ]
        console.print(
            make_table(
                ["size", "measured busbw", "expected busbw", "ratio", "NCCL pick", ""],
                body,
                title=(
                    f"{name}: {j.verdict} ({topo.gpu} x {topo.nranks} ranks, {topo.nodes} node(s), "
                    + (f"{topo.nics_per_node} x {topo.nic_gbps:g} Gb/s NICs a node, " if topo.nodes > 1 else "")
                    + f"NCCL {topo.nccl_version} model)"
                ),
            )
        )
        if result.latency_factor is not None:
            console.print(f"small messages (<= 64 KiB): {result.latency_factor:.1f}x the expected time")
    else:
        console.print(f"{name}: {j.verdict}", highlight=False)
    for c in j.causes:
        console.print(f"[bold]{c.severity}[/bold] {c.code}: {c.message}", highlight=False)
    if j.not_judged:
        console.print(f"bandwidth not compared: {j.not_judged}" + (f" ({j.fix})" if j.fix else ""), highlight=False)
    if j.own is not None:
        for note in j.own.notes[1:] if j.not_judged else j.own.notes:
            console.print(note, highlight=False, markup=False)
    if not j.complete:
        console.print("the output ends before nccl-tests' closing '# Avg bus bandwidth' line", highlight=False)
    for fact in j.assumed:
        console.print(f"assumed: {fact}", highlight=False)


def _report(file: Path, findings: list[CollectiveFinding]) -> None:
    """POST the run's findings to the control plane, which opens collective-slow incidents for them."""
    from gpufleet.cli.client import Api
    from gpufleet.errors import BackendError, GpufleetError
    from gpufleet.nccl.compare import CollectiveReport

    report = CollectiveReport(source=file.name, findings=findings)
    api = Api()
    if api.token() is None:
        raise UserError("no API token found", fix="set GPUFLEET_TOKEN or run where `gpufleet up` runs")
    try:
        answer = api.post("/api/v1/nccl-findings", report.model_dump(mode="json"))
    except BackendError:
        raise
    except GpufleetError as exc:  # refused: the server said why
        raise BackendError(f"the control plane refused the findings: {exc.message}", fix=exc.fix) from None
    console.print(f"reported {len(report.findings)} finding(s): {', '.join(answer['incidents']) or 'no incident'}")


@sub.command("advise")
def advise_cmd(
    gpu: str = GPU_OPT,
    nodes: int = typer.Option(2, "--nodes", min=1, help="Number of nodes"),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node", min=1, help="GPUs per node"),
    nics_per_node: int = typer.Option(8, "--nics-per-node", min=0, help="Fabric NIC ports per node"),
    nic_gbps: float = typer.Option(400.0, "--nic-gbps", min=0, help="Speed of one NIC port, Gb/s"),
    transport: str = typer.Option("ib", "--transport", help="ib, roce, efa or socket"),
    nvls: bool | None = NVLS_OPT,
    sharp: bool = SHARP_OPT,
    nvswitch: bool | None = NVSWITCH_OPT,
    nic_names: str | None = typer.Option(None, "--nic-names", help="Comma list of rail HCAs (mlx5_0,...)"),
    socket_ifname: str | None = typer.Option(None, "--socket-ifname", help="Data-network interface name"),
    output: OutputFormat = OUT_OPT,
) -> None:
    """Recommend NCCL environment settings for a fabric, each with its reason."""
    from gpufleet.nccl.advisor import advise

    topo = _topology(
        {},
        gpu=gpu,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        nics_per_node=nics_per_node,
        nic_gbps=nic_gbps,
        transport=transport,
        nvls=nvls,
        sharp=sharp,
        nvswitch=nvswitch,
    )
    names = [n.strip() for n in nic_names.split(",") if n.strip()] if nic_names else None
    items = advise(topo, names, socket_ifname)
    data = [{"var": a.var, "value": a.value, "reason": a.reason} for a in items]
    emit(
        data,
        output,
        lambda wide: console.print(
            make_table(["variable", "value", "why"], [[a.var, a.value, a.reason] for a in items])
        ),
    )


@sub.command("lint")
def lint_cmd(
    env_file: Path | None = typer.Option(
        None,
        "--env-file",
        exists=True,
        dir_okay=False,
        help="KEY=VALUE file, shell exports or launcher -x flags (default: this env)",
    ),
    transport: str | None = typer.Option(None, "--transport", help="ib, roce, efa or socket (enables GID checks)"),
    output: OutputFormat = OUT_OPT,
) -> None:
    """Flag risky NCCL settings (forced algorithms, disabled IB, wrong GID index, ...)."""
    from gpufleet.nccl.advisor import lint_env, read_env_file

    env = read_env_file(env_file) if env_file else dict(os.environ)
    found = lint_env(env, transport)
    data = [
        {
            "rule": f.rule,
            "var": f.var,
            "value": f.value,
            "severity": f.severity,
            "message": f.message,
            "fix": f.fix,
        }
        for f in found
    ]

    def render(wide: bool) -> None:
        if not found:
            console.print("no findings")
            return
        console.print(
            make_table(
                ["severity", "variable", "value", "problem", "fix"],
                [[f.severity, f.var, f.value, f.message, f.fix] for f in found],
            )
        )

    emit(data, output, render)


@sub.command("diagnose")
def diagnose_cmd(
    files: list[Path] = typer.Argument(
        ..., exists=True, dir_okay=False, help="NCCL_DEBUG / PyTorch logs: one file, or one per rank"
    ),
    output: OutputFormat = OUT_OPT,
) -> None:
    """Classify an NCCL failure from its logs and name the rank/host at fault, with evidence lines."""
    from gpufleet.nccl.diagnose import diagnose_texts

    # lines cut at the pasted-text bound, as triage reads them: a line of megabytes is not an NCCL message
    texts = [read_input_lines(f) for f in files]
    dx = diagnose_texts([(cited, "".join(lines)) for lines, cited in texts])
    data = dx.as_dict()

    def render(wide: bool) -> None:
        console.print(f"[bold]{dx.cls}[/bold]: {dx.summary}", highlight=False)
        if dx.ranks or dx.hosts:
            console.print(f"ranks: {dx.ranks or '-'}  hosts: {dx.hosts or '-'}", highlight=False)
        console.print(f"fix: {dx.fix}", highlight=False)
        for line in dx.evidence:
            console.print(f"  > {line}", highlight=False, markup=False)
        if dx.also_seen:
            console.print(f"also seen: {', '.join(dx.also_seen)}", highlight=False)

    emit(data, output, render)


def register(app: typer.Typer) -> None:
    app.add_typer(sub, name="nccl")
