"""`gpufleet agent`: the node agent."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from gpufleet.cli.output import console
from gpufleet.errors import UserError
from gpufleet.spec.base import parse_duration

if TYPE_CHECKING:
    from gpufleet.agent.fabric import FabricWatch
    from gpufleet.agent.host import BmcOptions
    from gpufleet.agent.workload import WorkloadWatch
    from gpufleet.model.observe import FabricReport, SchedulerReport


class Workload(StrEnum):
    slurm = "slurm"
    kubernetes = "kubernetes"


class Accelerators(StrEnum):
    auto = "auto"
    nvidia = "nvidia"
    amd = "amd"
    intel = "intel"


WORKLOAD_HELP = (
    "Also watch this workload manager and report its pending work (with its reason) and its queues' GPU use and "
    "quota, read at most every 15 s: slurm (squeue and scontrol, with $SLURM_CONF or --slurm-conf) or kubernetes "
    "(unschedulable pods, FailedScheduling events, Kueue ClusterQueues; --kubeconfig, else the pod's service "
    "account). Run it on one node per cluster; needs --control-plane."
)


def agent(
    sim: bool = typer.Option(False, "--sim", help="Read the digital twin instead of NVML and this host."),
    accelerators: Accelerators = typer.Option(
        Accelerators.auto,
        "--accelerators",
        help="Which GPU library to read: nvidia (NVML), amd (amdsmi), intel (Gaudi's pyhlml), or auto (the first of "
        "them that finds devices, in that order).",
    ),
    scenario: Path | None = typer.Option(None, "--scenario", "-f", help="With --sim: scenario (default: built-in)."),
    node: str | None = typer.Option(
        None,
        "--node",
        help="The node's name as the control plane and the scheduler know it (default: the hostname). With --sim: "
        "the twin node to act as (default: all nodes, /metrics only).",
    ),
    kmsg_file: Path | None = typer.Option(
        None,
        "--kmsg-file",
        help="Follow this appended-to file (kern.log, syslog) for GPU fault reports instead of /dev/kmsg.",
    ),
    ib_sysfs: Path = typer.Option(
        Path("/sys/class/infiniband"), "--ib-sysfs", help="Where the InfiniBand ports' sysfs tree is."
    ),
    interval: str = typer.Option(
        "1s", "--interval", help="Collection interval (collected on this clock, never on scrape)."
    ),
    host: str = typer.Option("127.0.0.1", "--host", help="Address for /metrics and /healthz."),
    port: int = typer.Option(9400, "--port", help="Port (dcgm-exporter's default is 9400)."),
    speed: float = typer.Option(1.0, "--speed", help="With --sim: simulated seconds per wall second."),
    control_plane: str | None = typer.Option(
        None,
        "--control-plane",
        help="Detect at the edge and push findings, kernel reports, link events, inventory and metrics to this "
        "control plane (e.g. http://cp:8470); its token from $GPUFLEET_TOKEN or $GPUFLEET_HOME/token.",
    ),
    hostname_label: str = typer.Option(
        "hostname", "--hostname-label", help="hostname (dcgm-exporter 4.x) or Hostname (3.x)."
    ),
    pod_labels: bool = typer.Option(
        False,
        "--pod-labels",
        help="Put pod/namespace/container, and hpc_job with --job-map-dir, on every GPU series (dcgm-exporter style) "
        "instead of info metrics.",
    ),
    fleet_series: bool = typer.Option(
        True,
        "--fleet-series/--no-fleet-series",
        help="Also export the vendor-neutral gpufleet_accelerator_* series (one dashboard for NVIDIA, AMD and Gaudi).",
    ),
    workload_series: list[str] = typer.Option(
        [],
        "--workload-series",
        metavar="SEL",
        help="Which workloads get per-workload GPU series (gpufleet_workload_gpu_*: memory, utilization, power, with "
        "how each was obtained); repeat to add: sharing:<mode> (exclusive, time-slicing, mps, mig, mig-time-slicing) "
        "for workloads on GPUs shared that way, namespace:<ns> for a namespace's workloads (namespace:* all), all, or "
        "none. Given, it replaces the default (sharing:time-slicing, sharing:mps, sharing:mig-time-slicing). A GPU "
        "that a workload uses without having been given it always gets them (the GpuWorkloadUnallotted alert).",
    ),
    workload_series_budget: int | None = typer.Option(
        None,
        "--workload-series-budget",
        metavar="N",
        help="The most per-workload GPU series one /metrics render writes (default 2000; 0: none): past it whole GPUs "
        "are left out, the last in device order first, and counted in gpufleet_attribution_workload_series_dropped.",
    ),
    job_map_dir: Path | None = typer.Option(
        None,
        "--job-map-dir",
        help="Read which Slurm jobs use each GPU from this directory every collection (one file per GPU index, a job "
        "id a line: dcgm-exporter's --hpc-job-mapping-dir format, kept by deploy/slurm/prolog.sh, e.g. "
        "/run/gpufleet/job-map) and expose them as hpc_job.",
    ),
    pod_resources: str = typer.Option(
        "/var/lib/kubelet/pod-resources/kubelet.sock",
        "--pod-resources",
        metavar="SOCKET",
        help="The kubelet's pod-resources socket: which container holds which GPU, MIG device or time-sliced "
        "replica, read every collection (used when it exists; 'none': not on Kubernetes).",
    ),
    pod_list: str = typer.Option(
        "https://127.0.0.1:10250/pods",
        "--pod-list",
        metavar="URL",
        help="With pod-resources: where to read this node's pods, to name the container of each GPU process from its "
        "cgroup (the kubelet's /pods, needing nodes/proxy; or the API server's "
        "/api/v1/pods?fieldSelector=spec.nodeName=NODE, needing pods list; 'none': no PID-to-pod map).",
    ),
    pod_list_ca: str | None = typer.Option(
        None, "--pod-list-ca", help="Verify --pod-list's certificate with this CA file (default: not verified)."
    ),
    proc_root: Path = typer.Option(
        Path("/proc"),
        "--proc-root",
        help="The host's /proc (for each GPU process's cgroup; in a pod: hostPID, or the host's /proc mounted here).",
    ),
    attribution: bool = typer.Option(
        True,
        "--attribution/--no-attribution",
        help="Attribute each GPU and MIG instance to the workloads using it (pod-resources or --job-map-dir, NVML's "
        "per-process data, cgroups).",
    ),
    app_metrics: list[str] = typer.Option(
        [],
        "--app-metrics",
        help="Scrape a training or serving process's /metrics (gpufleet.instrument, vLLM) and report its jobs and "
        "services with the node's GPUs; repeat for each process (e.g. http://127.0.0.1:8000/metrics).",
    ),
    cost_config: Path | None = typer.Option(
        None,
        "--cost-config",
        metavar="FILE",
        help="The cost config (prices: YAML, as `gpufleet cost report --price-file` reads it) the idle-cost series "
        "is priced with; default: the catalog's list prices, as the report's.",
    ),
    bmc: bool = typer.Option(
        True,
        "--bmc/--no-bmc",
        help="Read the node's BMC through ipmitool (in band, /dev/ipmi0): fan speeds, chassis temperatures, power "
        "supplies and their state as series and findings, its event log's new records as events. Without ipmitool "
        'or /dev/ipmi0 it is one log line and gpufleet_source_up{source="bmc"} 0.',
    ),
    bmc_interval: str = typer.Option(
        "60s", "--bmc-interval", help="With --bmc: time between two reads of the BMC (a read takes seconds)."
    ),
    bmc_timeout: str = typer.Option(
        "30s", "--bmc-timeout", help="With --bmc: an ipmitool command still running after this is stopped."
    ),
    fabric_settings_every: str = typer.Option(
        "10m",
        "--fabric-settings-every",
        help="Time between two reads of this host's fabric settings (HCA and RoCE netdev MTU, RoCE PFC, trust and "
        "ECN, OpenSM's files), sent in the node's inventory for the control plane to judge across hosts; 0 or off: "
        "never. A host without an HCA is never read.",
    ),
    dcgm: str = typer.Option(
        "auto",
        "--dcgm",
        metavar="auto|off|embedded|HOST[:PORT]",
        help="Also read the NVIDIA GPUs through DCGM's host engine (DCGM's own Python bindings): its profiling fields "
        "(DCGM_FI_PROF_*), health watches, policy violations and per-Slurm-job statistics. auto: the local "
        "nv-hostengine (127.0.0.1:5555) when DCGM is installed and running, else nothing, silently; embedded: a host "
        "engine started in the agent; HOST[:PORT]: an nv-hostengine there (port 5555 by default); off: not read. "
        'Asked for and not readable, it is one log line and gpufleet_source_up{source="dcgm"} 0.',
    ),
    data_dir: Path | None = typer.Option(
        None, "--data-dir", help="Where the event spool lives (default ~/.gpufleet/agent)."
    ),
    run_for: str | None = typer.Option(
        None, "--run-for", help="Stop after this long (e.g. 30s); default until Ctrl-C."
    ),
    workload: Workload | None = typer.Option(None, "--workload", help=WORKLOAD_HELP),
    slurm_conf: str | None = typer.Option(
        None, "--slurm-conf", help="With --workload slurm: the cluster's slurm.conf (default $SLURM_CONF)."
    ),
    kubeconfig: str | None = typer.Option(
        None, "--kubeconfig", help="With --workload kubernetes: the kubeconfig (default $KUBECONFIG, else in-cluster)."
    ),
    context: str | None = typer.Option(None, "--context", help="With --workload kubernetes: the kubeconfig context."),
    fabric: bool = typer.Option(
        False,
        "--fabric",
        help="Also watch the InfiniBand fabric: run ibnetdiscover, iblinkinfo and ibqueryerrors every --fabric-poll "
        "and report topology, port states and counters (the control plane validates and judges them). Run it on one "
        "host with an HCA on each subnet; needs --control-plane and infiniband-diags.",
    ),
    fabric_subnet: list[str] = typer.Option(
        [],
        "--fabric-subnet",
        help="With --fabric: a local HCA port that reaches a subnet, as CA:PORT (e.g. mlx5_0:1); repeat for several "
        "subnets. Default: the tools' default port.",
    ),
    fabric_poll: str = typer.Option("30s", "--fabric-poll", help="With --fabric: time between two polls."),
    tool_timeout: str = typer.Option(
        "60s", "--tool-timeout", help="With --fabric: a diag tool still running after this is stopped."
    ),
    action_command: list[str] = typer.Option(
        [],
        "--action-command",
        metavar="KIND=COMMAND",
        help="With --control-plane: the command for a node action the control plane may ask for, as KIND=COMMAND "
        "(reset-gpu, reboot-node, power-cap, restart-service, diag; {gpu}, {gpus}, {watts}, {level}, {service} "
        "filled in), or KIND= to refuse that kind. Defaults: reset-gpu 'nvidia-smi -r -i {gpu}', power-cap "
        "'nvidia-smi -i {gpu} -pl {watts}', restart-service 'systemctl restart {service}', diag 'dcgmi diag -r "
        "{level} -i {gpus}'; reboot-node has none: give one, e.g. reboot-node='systemctl reboot', or through the BMC "
        "reboot-node='ipmitool chassis power cycle'. Repeatable.",
    ),
    node_actions: bool = typer.Option(
        True,
        "--node-actions/--no-node-actions",
        help="With --control-plane: carry out the node actions the control plane asks for (see --action-command); "
        "off, the agent offers none.",
    ),
    enroll: bool = typer.Option(
        True,
        "--enroll/--no-enroll",
        help="With --control-plane and a shared agent token: ask once for a token bound to this node, kept in "
        "--data-dir, and push with it (node actions go only to an agent whose token is bound to its node).",
    ),
) -> None:
    """Collect GPU and fabric telemetry and serve it as dcgm-exporter does; with --control-plane, also run the node's
    detectors and report what they find, the kernel log's GPU faults and the node's inventory; with --workload, also
    what the workload manager has not placed and why, and its queues' GPUs against quota."""
    from gpufleet.cli.core import builtin_example
    from gpufleet.control.paths import api_token
    from gpufleet.control.paths import data_dir as default_dir
    from gpufleet.telemetry.exposition.config import ExpositionConfig

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request would drown the agent's own
    seconds = parse_duration(interval)
    if seconds <= 0:
        raise UserError("--interval must be positive", fix="e.g. --interval 1s")
    if hostname_label not in ("hostname", "Hostname"):
        raise UserError(f"--hostname-label {hostname_label!r}", fix="use hostname or Hostname")
    from gpufleet.telemetry.exposition.config import workload_series_settings

    if workload_series_budget is not None and workload_series_budget < 0:
        raise UserError("--workload-series-budget must be 0 or more", fix="e.g. --workload-series-budget 2000")
    exposition = ExpositionConfig(
        hostname_label=hostname_label,
        attribution="labels" if pod_labels else "info",
        fleet_series=fleet_series,
        **(workload_series_settings(workload_series) if workload_series else {}),
    )
    if workload_series_budget is not None:
        exposition = exposition.model_copy(update={"workload_series_budget": workload_series_budget})
    directory = data_dir or default_dir() / "agent"
    from gpufleet.cost.config import CostConfig

    cost = CostConfig.from_file(cost_config) if cost_config is not None else None
    token = api_token
    watch = None
    if workload is not None:
        if sim:
            raise UserError("the twin reports its own workload manager", fix="drop --workload, or --sim")
        if not control_plane:
            raise UserError(f"--workload {workload} reports to a control plane", fix="add --control-plane URL")
        watch = _watch(workload, slurm_conf, kubeconfig, context)
    fabric_watch = None
    if fabric:
        if sim:
            raise UserError("the twin reports its own fabric", fix="drop --fabric, or --sim")
        if not control_plane:
            raise UserError("--fabric reports to a control plane", fix="add --control-plane URL")
        fabric_watch = _fabric_watch(fabric_subnet, parse_duration(fabric_poll), parse_duration(tool_timeout))
    if sim and app_metrics:
        raise UserError("the twin's jobs and services export their own metrics", fix="drop --app-metrics, or --sim")
    if sim and job_map_dir is not None:
        raise UserError("the twin attributes its own GPUs", fix="drop --job-map-dir, or --sim")
    from gpufleet.sources.gpu.dcgm import parse_target

    dcgm_target = parse_target(dcgm)
    if sim and dcgm_target not in ("auto", None):
        raise UserError("the twin fills its own DCGM fields", fix="drop --dcgm, or --sim")
    if sim:
        from gpufleet.sim.agent import sim_agent

        if control_plane and node is None:
            raise UserError("a simulated agent reports one node", fix="add --node NAME (see `gpufleet get nodes`)")
        built = sim_agent(
            scenario or builtin_example("scenarios/day-256gpu.yaml"),
            node=node,
            host=host,
            port=port,
            interval=seconds,
            speed=speed,
            data_dir=directory,
            control_plane=control_plane,
            token=token,
            exposition=exposition,
            cost=cost,
        )
    else:
        from gpufleet.agent.host import AttributionOptions, BmcOptions, host_agent

        options = AttributionOptions(
            pod_resources=None if pod_resources == "none" else Path(pod_resources),
            pod_list=None if pod_list == "none" else pod_list,
            pod_list_ca=pod_list_ca,
            proc_root=proc_root,
        )

        built = host_agent(
            host=host,
            port=port,
            interval=seconds,
            data_dir=directory,
            control_plane=control_plane,
            token=token,
            exposition=exposition,
            node=node,
            kmsg_file=kmsg_file,
            ib_sysfs=ib_sysfs,
            scheduler=watch,
            job_map_dir=job_map_dir,
            app_targets=_app_targets(app_metrics),
            accelerators=accelerators.value,
            attribution=options if attribution else None,
            cost=cost,
            bmc=_bmc_options(bmc_interval, bmc_timeout, BmcOptions) if bmc else None,
            dcgm=dcgm_target,
            action_commands=_action_commands(action_command) if node_actions else _no_actions(),
            enroll=enroll,
            fabric_settings_every_s=_settings_every(fabric_settings_every),
        )
    if watch is not None:
        built.stoppers.insert(0, watch)  # reading before the first collection, stopped last
    if fabric_watch is not None and built.pusher is not None:
        pusher = built.pusher

        def deliver(reports: list[FabricReport]) -> None:
            pusher.state.put_fabric(reports)
            pusher.wake()

        fabric_watch.deliver = deliver
        built.stoppers.insert(0, fabric_watch)
    built.start()
    console.print(
        f"gpufleet agent for {built.node} serving http://{host}:{built.port}/metrics every {interval}"
        + (f", reporting to {control_plane}" if control_plane else "")
        + (f", watching {workload}" if workload else "")
        + (f", polling the fabric every {fabric_poll}" if fabric_watch else "")
    )
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    try:
        done.wait(parse_duration(run_for) if run_for else None)
    except KeyboardInterrupt:
        pass
    finally:
        built.stop()


def _bmc_options(interval: str, timeout: str, options: type[BmcOptions]) -> BmcOptions:
    interval_s, timeout_s = parse_duration(interval), parse_duration(timeout)
    if interval_s <= 0 or timeout_s <= 0:
        raise UserError("--bmc-interval and --bmc-timeout must be positive", fix="e.g. --bmc-interval 60s")
    return options(interval_s=interval_s, timeout_s=timeout_s)


def _settings_every(every: str) -> float | None:
    if every.strip() in ("0", "off"):
        return None
    try:
        return parse_duration(every) or None
    except ValueError as exc:
        raise UserError(
            f"--fabric-settings-every {every!r}: {exc}", fix="e.g. --fabric-settings-every 10m, or 0"
        ) from exc


def _app_targets(urls: list[str]) -> list[str]:
    for url in urls:
        if not url.startswith(("http://", "https://")):
            raise UserError(
                f"--app-metrics {url!r} is not an http(s) URL", fix="e.g. --app-metrics http://127.0.0.1:8000/metrics"
            )
    return urls


def _fabric_watch(subnets: list[str], poll_s: float, timeout_s: float) -> FabricWatch:
    from gpufleet.agent.fabric import FabricWatch
    from gpufleet.sources.infiniband.diag_tools import FabricTools, local_port

    if poll_s <= 0 or timeout_s <= 0:
        raise UserError("--fabric-poll and --tool-timeout must be positive", fix="e.g. --fabric-poll 30s")
    tools: list[FabricTools] = []
    for text in subnets or [""]:
        if not text:
            tools.append(FabricTools(timeout_s=timeout_s))
            continue
        ca, port = local_port(text)
        tools.append(FabricTools(ca=ca, port=port, timeout_s=timeout_s))
    return FabricWatch(tools, lambda reports: None, poll_s=poll_s)


def _watch(workload: Workload, slurm_conf: str | None, kubeconfig: str | None, context: str | None) -> WorkloadWatch:
    """The reader for `workload`, in its own thread. Credentials that cannot load are an error now; a manager that
    does not answer yet is only logged, and the agent goes on."""
    from gpufleet.agent.workload import WorkloadWatch

    read: Callable[[], SchedulerReport]
    if workload is Workload.slurm:
        from gpufleet.integrations.slurm.client import SlurmRunner
        from gpufleet.integrations.slurm.queue import SlurmQueueReader

        read = SlurmQueueReader(SlurmRunner(slurm_conf)).read
    else:
        from gpufleet.integrations.kubernetes.queue import KubernetesQueueReader

        read = KubernetesQueueReader.connect(kubeconfig, context).read
    return WorkloadWatch(read, workload.value)


def register(app: typer.Typer) -> None:
    app.command()(agent)


def _action_commands(given: list[str]) -> Any:
    """--action-command KIND=COMMAND over the defaults."""
    from gpufleet.agent.actions import Commands
    from gpufleet.model.actions import NodeActionKind

    commands = Commands()
    kinds = ", ".join(k.value for k in NodeActionKind)
    for item in given:
        kind, sep, command = item.partition("=")
        try:
            which = NodeActionKind(kind.strip())
        except ValueError:
            raise UserError(f"--action-command {item!r}: no action kind {kind!r}", fix=f"use one of {kinds}") from None
        if not sep:
            raise UserError(f"--action-command {item!r}", fix=f"write it KIND=COMMAND, e.g. {kind}='...'")
        if command.strip():
            commands.by_kind[which] = command.strip()
        else:
            commands.by_kind.pop(which, None)
    return commands


def _no_actions() -> Any:
    from gpufleet.agent.actions import Commands

    return Commands({}, None, None)
