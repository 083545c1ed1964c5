"""`gpufleet nccl`: predicted collective performance, measured-vs-expected, env advice, log diagnosis."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from gpufleet.cli.inputs import read_input_text
from gpufleet.cli.output import OUTPUT_HELP, OutputFormat, console, emit, make_table
from gpufleet.errors import UserError
from gpufleet.nccl.topology import Topology

if TYPE_CHECKING:
    from gpufleet.nccl.compare import CollectiveFinding, RunJudgement

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
NICS_OPT = typer.Option(None, "--nics-per-node", min=0, help="Fabric NIC ports per node")
GBPS_OPT = typer.Option(None, "--nic-gbps", min=0, help="Speed of one NIC port, Gb/s")
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


def _topology(defaults: dict[str, object], **flags: object) -> Topology:
    from gpufleet.nccl.compare import build_topology

    values = {k: v for k, v in defaults.items() if v is not None}
    values.update({k: v for k, v in flags.items() if v is not None})
    return build_topology(values)


@sub.command("predict")
def predict(
    gpu: str = GPU_OPT,
    nodes: int = typer.Option(1, "--nodes", min=1, help="Number of nodes"),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node", min=1, help="GPUs (ranks) per node"),
    nics_per_node: int = typer.Option(0, "--nics-per-node", min=0, help="Fabric NIC ports per node"),
    nic_gbps: float = typer.Option(0.0, "--nic-gbps", min=0, help="Speed of one NIC port, Gb/s"),
    transport: str = typer.Option("ib", "--transport", help="ib, roce, efa or socket"),
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
    from gpufleet.nccl.predict import predict_sweep

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

    emit(data, output, table)


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
    output: OutputFormat = OUT_OPT,
    report: bool = typer.Option(
        False, "--report", help="Send the findings to the running control plane (incidents: collective-slow)."
    ),
) -> None:
    """Line up a measured run with the prediction and say which sizes fall short, by how much, and why.

    GPU model, GPU count and nodes come from the run's own header lines; flags override them, and what was assumed
    is said. Output that ends before nccl-tests' closing `# Avg bus bandwidth` line is judged `unknown`, never
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
    judgements = [judge_run(table, flags, op, default_op="allreduce") for table in runs]
    if len(judgements) == 1:
        only = judgements[0]
        if only.result is None and not only.issues:  # nothing to say about this run: say what is missing
            raise UserError(only.not_judged, fix=only.fix or None)
    data = [_compare_data(file, j) for j in judgements]

    def render(wide: bool) -> None:
        for number, j in enumerate(judgements, 1):
            name = file.name if len(judgements) == 1 else f"{file.name} (run {number}: {j.op or 'unknown test'})"
            _render_run(name, j)

    emit(data[0] if len(data) == 1 else data, output, render)
    if report:
        _report(file, [f for j in judgements for f in run_findings(j)])


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
                    f"NCCL {topo.nccl_version} model)"
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

    texts = [read_input_text(f) for f in files]
    dx = diagnose_texts([(cited, text) for text, cited in texts])
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
