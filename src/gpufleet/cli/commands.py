"""Which module holds each `gpufleet` command, and the one line `gpufleet --help` shows for it.

The command modules import what their commands need (the twin, the parsers, the API client, numpy...), so the
top-level command loads only the module of the command that runs: `gpufleet --help` is drawn from this table and
imports none of them. tests/cli/test_commands.py checks the table against what the modules register (names,
modules and help), so a new or renamed command, or a changed first paragraph of its help, fails there until it is
written here too.

Each module exposes `register(app)`, which adds its commands to a Typer app.
"""

from __future__ import annotations

from typing import NamedTuple


class Entry(NamedTuple):
    name: str
    module: str  # under gpufleet.cli
    help: str  # the first paragraph of the command's help, on one line


# In the order `gpufleet --help` lists them.
COMMANDS: tuple[Entry, ...] = (
    Entry(
        "validate",
        "core",
        "Check manifests against their schema; a misspelled or invalid field is named with what is allowed.",
    ),
    Entry(
        "get",
        "fleet",
        "List resources, like `kubectl get`: nodes, GPUs, jobs, incidents, events, the audit log, agents, fabric "
        "links and switches, and the workload manager's pending work and queues.",
    ),
    Entry(
        "describe",
        "fleet",
        "Everything about one node (GPUs, NICs, conditions, capacity, software, kernel log), one GPU, or one "
        "incident (evidence, effects, every action taken).",
    ),
    Entry("cordon", "fleet", "Mark a node unschedulable."),
    Entry("uncordon", "fleet", "Mark a node schedulable again."),
    Entry("drain", "fleet", "Cordon a node and move its work away (its controller restarts it elsewhere)."),
    Entry("reset", "fleet", "Reset one GPU (refused while work holds it)."),
    Entry("requeue", "fleet", "Requeue a job, keeping it off the nodes given."),
    Entry("ack", "fleet", "Acknowledge an incident: someone is on it."),
    Entry("mitigate", "fleet", "Mark an incident mitigated."),
    Entry("resolve", "fleet", "Resolve an incident."),
    Entry("top", "top", "The fleet live in the terminal, like `top`: figures, nodes (troubled first), open incidents."),
    Entry(
        "up",
        "server",
        "Start the embedded default: the control plane, the digital twin's nodes as agents behind the same door, "
        "and the dashboard on 127.0.0.1.",
    ),
    Entry(
        "server",
        "server",
        "Run the control plane: agents push to it, it correlates incidents and remediates through a backend.",
    ),
    Entry(
        "agent",
        "agent",
        "Collect GPU and fabric telemetry and serve it as dcgm-exporter does; with --control-plane, also run the "
        "node's detectors and report what they find, the kernel log's GPU faults and the node's inventory; with "
        "--workload, also what the workload manager has not placed and why, and its queues' GPUs against quota.",
    ),
    Entry(
        "diag",
        "diag",
        "Run health checks. A dcgmi PASS while NVLink or HCA links are down is not trusted, a dcgmi failure that is "
        "the diagnostic's own error is Unknown (not a GPU failure), and a cut output is Unknown (never Pass).",
    ),
    Entry(
        "preflight",
        "preflight",
        "Check this pod's GPUs before its job starts (the preflight init container): dcgmi diag, and an NCCL "
        "all-reduce for a gang's pod. A failure is reported to the control plane, which opens an incident on the node.",
    ),
    Entry(
        "triage",
        "triage",
        "Tell what printed each input (kernel log, nvidia-smi, dcgmi, NCCL log, InfiniBand tools, kubectl, ...) by "
        "its content, and judge it: healthy, degraded, faulty, or unknown when it cannot say. Pasted text is fine: "
        "prompts, echoed commands, `> ` quoting, elisions, markers, colour and launcher prefixes are taken off.",
    ),
    Entry(
        "doctor",
        "doctor",
        "Check Kubernetes manifests (files, directories, Helm-rendered output, - for stdin), GPU Operator "
        "ClusterPolicy and AMD GPU Operator DeviceConfig objects, device-plugin and mig-parted configs, NVIDIA, AMD "
        "(ROCm) and Intel Gaudi workloads and device plugins, Prometheus Operator objects and kubectl captures "
        "(`kubectl get nodes -o json`, `kubectl get pods -A -o json`, `kubectl version -o json`), kubelet "
        "configurations (the KubeletConfiguration file, `kubectl get --raw /api/v1/nodes/NODE/proxy/configz`), "
        "container runtime configs (containerd's config.toml and its drop-ins, CRI-O's crio.conf and crio.conf.d, "
        "Docker's daemon.json), hosts' fabric settings (`gpufleet fabric settings -o json`: MTU, RoCE, OpenSM, SHARP) "
        "against the real Kubernetes schemas first, then against the known GPU-cluster mistakes (`--list-rules`).",
    ),
    Entry("sim", "core", "Run the digital twin headless."),
    Entry("config", "fleet", "Which control plane and token the CLI uses, kept in $GPUFLEET_HOME/config."),
    Entry(
        "telemetry",
        "telemetry",
        "Telemetry artifacts: the metric field catalog, Prometheus alert rules, Grafana dashboards.",
    ),
    Entry("xid", "xid", "Kernel-log GPU faults: classify Xid/SXid/fallen-off-the-bus lines, explain Xid codes."),
    Entry(
        "nccl", "nccl", "NCCL: predict collective performance, compare nccl-tests runs, advise, lint, diagnose logs."
    ),
    Entry(
        "sched",
        "sched",
        "Placement: trace replay and policies; plan, explain or run on Kubernetes (kubectl captures or live).",
    ),
    Entry(
        "partition",
        "partition",
        "Partition GPUs: valid MIG layouts, a layout plan for a demand mix, device-plugin sharing configs.",
    ),
    Entry(
        "remediate",
        "remediate",
        "Fix faults safely: runbooks per root cause, budgets, a circuit breaker, rate limits, an audit log.",
    ),
    Entry(
        "read",
        "read",
        "Parse a saved tool output into records: kernel-log, link-events, nhc, nvidia-smi-q, nvidia-smi-table, "
        "nvidia-smi-query-gpu, nvidia-smi-mig, nvidia-smi-nvlink, nvidia-smi-topo, nvidia-smi-processes, "
        "nvidia-device-plugin-log, dcgmi-diag, dcgmi-health, dcgmi-dmon, dcgmi-discovery, dcgm-exporter-metrics, "
        "amd-smi, rocm-smi, rocm-smi-topo, hl-smi, nccl-log, nccl-tests, nccl-ras, ibstat, ibstatus, perfquery, "
        "ibqueryerrors, iblinkinfo, ibnetdiscover, ibv_devinfo, mlxlink, ibdiagnet, opensm-conf, partitions-conf, "
        "mlnx-qos, saquery-smir, smpquery-portinfo, ipmitool-sdr, ipmitool-sel, chronyc-tracking, ntpq-rv, "
        "timedatectl-timesync. Each format is also one `gpufleet triage` tells and judges. Judged by `gpufleet "
        "triage` only (no parser to print yet): "
        "kubectl-node-json, kubectl-pod-json, kubectl-describe-node, kubectl-node-yaml, kubectl-pod-yaml, "
        "kubectl-describe-pod, kubectl-events, app-log.",
    ),
    Entry("fabric", "fabric", "InfiniBand fabric: discover it and validate it against the intended cabling."),
    Entry(
        "token",
        "token",
        "API tokens and their roles: viewer (reads), operator (changes), admin (also tokens), agent (pushes).",
    ),
    Entry(
        "deploy",
        "deploy",
        "Deploy gpufleet: Kubernetes manifests from the Helm chart, how big a deployment gets, SLO alert rules and "
        "KEDA autoscaling for inference services.",
    ),
    Entry("cost", "cost", "What GPU time costs: per workload, team and model; idle GPUs; scale-to-zero."),
)

BY_NAME: dict[str, Entry] = {entry.name: entry for entry in COMMANDS}


def modules() -> tuple[str, ...]:
    """Every command module, fully qualified, each once, in the table's order."""
    return tuple(dict.fromkeys(f"gpufleet.cli.{entry.module}" for entry in COMMANDS))
