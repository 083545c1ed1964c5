"""The API's response shapes, so `/openapi.json` describes every field a client reads.

They mirror what `control/views.py` builds (one shape for the API, the CLI and the dashboard); a field added there
and not here is dropped from the answer, and the API tests compare the two.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gpufleet.cost import report as cost_report
from gpufleet.model.actions import Service
from gpufleet.model.incident import Severity


class Shape(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Problem(Shape):
    error: str = Field(description="What is wrong.")
    fix: str | None = Field(None, description="What to do about it.")


class Health(Shape):
    status: Literal["ok", "unhealthy"]
    problems: list[str]
    time: float = Field(description="The control plane's clock (epoch seconds; the twin's clock under `up`).")
    nodes: int
    batches: int = Field(description="Agent batches taken since start.")
    ticks: int = Field(description="Control-loop turns since start.")
    loop_gap_p99_s: float | None = Field(None, description="99th percentile of the seconds between its last 600 turns.")
    loop_gap_max_s: float | None = Field(None, description="The longest wait between two of its last 600 turns (s).")
    remediation: str
    backend: str
    leader: bool = Field(True, description="Whether this replica runs correlation and remediation.")
    replica: str = Field("", description="This replica's name (host:pid).")


class MigInstance(Shape):
    profile: str = Field(description="The GPU-instance profile, in NVIDIA's names: 1g.10gb, 3g.40gb, 1g.10gb+me.")
    gi_id: int = Field(description="The GPU-instance id NVML gives it.")
    start: int = Field(description="Its first memory slice.")
    size: int = Field(description="How many memory slices it spans.")
    uuid: str = Field(description="The MIG device's UUID (MIG-...), empty when no compute instance was read.")
    ci_id: int | None = Field(description="The compute instance behind that UUID.")


class GpuRow(Shape):
    node: str
    gpu: int
    uuid: str
    serial: str
    pci_bus_id: str
    model: str
    health: Literal["healthy", "degraded", "unhealthy", "lost", "unknown"]
    util_pct: float | None
    temp_c: float | None
    power_w: float | None
    sm_clock_mhz: float | None
    fb_used_mib: float | None
    clock_events: list[str] = Field(description="Active clock-event (throttle) reasons, by NVML's names.")
    ecc_dbe_volatile: float | None
    pcie: str = Field(description="Current PCIe link, e.g. gen5 x16.")
    xid_last: float | None
    readings: Literal["current", "lost", "none"] = Field(
        "current",
        description="Whether its values are current, or it is lost (no readings since it fell off the bus; the values"
        " are empty, never its last ones) or has none (its agent is silent or has not reported).",
    )
    held_by: str | None = Field(description="The workload holding the GPU, if any.")
    fb_total_mib: float | None = Field(None, description="Framebuffer total, as the node's inventory reports it.")
    power_limit_w: float | None = Field(None, description="The enforced power limit.")
    mig_mode: bool | None = Field(None, description="MIG mode as NVML reports it now; null when it has no MIG.")
    clique_id: int | None = Field(
        None, description="The NVLink fabric clique the GPU joined (NVML fabric info); null when it joined none."
    )
    cluster_uuid: str | None = Field(
        None, description="The UUID of the NVLink domain (cluster) the GPU joined; null when it joined none."
    )
    mig: list[MigInstance] = Field([], description="The GPU instances of a MIG-enabled GPU, by placement.")
    slices: int | None = Field(
        None, description="Memory slices of the model's MIG geometry (8 on A100 and H100); null without MIG."
    )


class NodeRow(Shape):
    name: str
    status: str = Field(
        description="Ready, Degraded (its GPU source is down: it cannot see its GPUs) or AgentLost, with"
        " SchedulingDisabled when cordoned."
    )
    pool: str
    rack: str
    gpu_model: str | None
    gpus: int
    gpus_allocatable: int = Field(description="GPUs healthy or degraded (capacity minus the failed).")
    gpu_util_pct: float | None
    gpu_temp_max_c: float | None
    power_kw: float
    links_up: str
    jobs: list[str]
    driver: str
    cuda: str
    agent: str
    last_seen_ago_s: float | None


class Condition(Shape):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str


class Nic(Shape):
    name: str
    port: int
    rail: int | None
    guid: str
    state: Literal["Active", "Down"]
    speed_gbps: float | None
    peer: str | None
    symbol_errors: float | None
    link_downed: float | None
    rcv_errors: float | None


class EntityRef(Shape):
    kind: str
    node: str
    index: int | None
    name: str
    text: str = Field(
        "",
        description="The entity as a path: gpu/NODE/INDEX, or for a GPU without an index (one NVML does not"
        " list) gpu/NODE/PCI-ADDRESS, else its UUID.",
    )


class Evidence(Shape):
    time: float
    source: str
    text: str


class IncidentRow(Shape):
    id: str
    cause: str
    entity: EntityRef
    node: str
    severity: Severity
    summary: str
    first_seen: float
    last_seen: float
    state: Literal["open", "acknowledged", "mitigated", "resolved"]
    count: int
    evidence: list[Evidence]
    effects: list[str] = Field(description="What it caused: jobs stalled, GPUs lost from allocatable, ...")
    action: str = Field(description="The action the detector recommends (NVIDIA's, for an Xid).")
    action_title: str = Field(description="What the action asks for, in a line (empty when there is none).")
    action_steps: list[str] = Field(description="The action's steps in order, as an operator follows them.")
    action_reference: str = Field(description="Where the term comes from, e.g. 'NVIDIA WORKFLOW_XID_48, Xid 48'.")
    xid: int | None
    serial: str | None
    age_s: float
    last_seen_ago_s: float


class Software(Shape):
    driver: str
    cuda: str
    kernel: str
    fabric_manager: str


class GpuAffinityRow(Shape):
    gpu: int
    pci_bus_id: str
    numa_node: int | None = Field(description="The NUMA node of the GPU's root complex (None: the platform says none).")
    cpus: str = Field(description="The CPUs local to it, as the kernel prints a CPU list.")
    nearest_nics: list[str] = Field(description="The NICs with its nearest PCIe link.")
    nic_links: dict[str, Literal["PIX", "PXB", "PHB", "NODE", "SYS"]] = Field(
        description="Its PCIe link to each NIC, in nvidia-smi topo -m's terms."
    )


class NicAffinityRow(Shape):
    name: str
    pci_bus_id: str
    numa_node: int | None
    cpus: str
    netdev: str


class Affinity(Shape):
    source: str = Field(description="Where the agent read it: sysfs, nvidia-smi topo -m, rocm-smi --showtopo, twin.")
    gpus: list[GpuAffinityRow]
    nics: list[NicAffinityRow]


class NodeDetail(Shape):
    name: str
    agent: str
    status: str
    labels: dict[str, str]
    conditions: list[Condition]
    software: Software
    gpus: list[GpuRow]
    nics: list[Nic]
    incidents: list[IncidentRow]
    kernel_log: list[str] = Field(description="The node's latest kernel-log GPU reports, as the driver printed them.")
    affinity: Affinity | None = Field(
        default=None, description="GPU<->NIC<->CPU affinity as the node's agent reported it (None: not reported)."
    )
    sources_down: dict[str, str] = Field(
        default_factory=dict,
        description="The node's sources its agent reports down (gpufleet_source_up 0), each with why. A GPU source"
        " (nvml, amdsmi, hlml) down makes the node Degraded: it cannot see its GPUs.",
    )


class Straggler(Shape):
    rank: int
    node: str
    gpu: int
    compute_s: float
    ratio: float | None = Field(description="Its compute time over the job's median.")


class JobRow(Shape):
    name: str
    state: Literal["Running", "Stalled"]
    nodes: int
    ranks: int
    step: int
    step_time_s: float
    last_step_age_s: float
    restarts: int
    cause: str | None = Field(description="The open incident that stalled it, if known.")
    node_list: list[str]
    rank_compute_median_s: float | None = Field(description="The median rank's compute time per step.")
    stragglers: list[Straggler] = Field(description="Ranks computing clearly slower than the median, slowest first.")
    loss: float | str | None = Field(default=None, description="The job's last loss; 'NaN/inf' when it diverged.")
    validation_loss: float | str | None = None
    learning_rate: float | None = None
    grad_norm: float | str | None = None
    samples_per_s: float | None = None
    tokens_per_s: float | None = None
    data_wait_s: float | None = Field(default=None, description="The slowest rank's wait for input, last step.")
    checkpoints_ok: int = 0
    checkpoints_failed: int = 0


class BurnRateRow(Shape):
    windows: str
    threshold: float
    long: float | None
    short: float | None
    firing: bool


class ServiceRow(Shape):
    """An inference service joined across its replicas; percentiles are the worst replica's over `window_s`."""

    name: str
    state: Literal["Serving", "SLO breached", "Too little traffic", "Idle", "Stale"]
    replicas: int
    nodes: list[str]
    gpus: list[str] = Field(description="node/GPU index of every GPU it runs on.")
    requests_per_s: float
    requests: int = Field(description="Requests counted since the servers started.")
    errors: int
    error_ratio: float | None
    p50_s: float | None
    p95_s: float | None
    p99_s: float | None
    slo_p99_s: float | None = Field(description="The service's p99 latency objective.")
    window_s: float
    versions: list[str] = []
    queue_depth: float | None = None
    objective_p99_s: float | None = None
    objective_ttft_s: float | None = None
    objective_availability: float | None = None
    p95_5m_s: float | None = Field(default=None, description="Over the SLO window, summed across replicas.")
    p99_5m_s: float | None = None
    ttft_5m_s: float | None = Field(default=None, description="Time to first token at the objective's quantile.")
    error_ratio_5m: float | None = None
    availability_1h: float | None = None
    burn_rates: list[BurnRateRow] = Field(default=[], description="The SRE workbook's multi-window burn rates.")
    breaches: list[str] = Field(default=[], description="Root causes of the objectives breached now.")
    slo_note: str = Field(default="", description="Why nothing can be judged (too little traffic, stale).")
    problems: list[str] = Field(default=[], description="Series of the service that could not be read.")


class EventRow(Shape):
    id: int = Field(description="Cursor: pass it as `before` (older) or `after` (newer).")
    agent: str
    seq: int
    time: float
    received: float
    node: str
    kind: str
    entity: str
    message: str
    attrs: dict[str, Any]


class AuditRow(Shape):
    seq: int
    time: float
    recorded: float
    actor: str = Field(description="The token's name, `anonymous`, or `remediation`.")
    action: str
    target: str
    decision: str
    reason: str
    incident: str
    cause: str
    runbook: str
    step: str
    dry_run: bool
    backend: str
    request: str


class ClockRow(Shape):
    node: str
    source: str = Field(description="What reported the node's clock: chrony, ntpd, timesyncd, kernel; empty if none.")
    synchronised: bool | None = Field(description="False when the daemon or the kernel says it is not synchronised.")
    offset_s: float | None = Field(description="The node's clock minus true time, as its daemon estimates it.")
    error_s: float | None = Field(description="The daemon's bound on that error (or the kernel's maxerror).")
    sent_minus_received_s: float | None = Field(
        description="The greatest of (the push's send stamp - this control plane's receive time) over the node's recent"
        " pushes: its clock minus this plane's, less the smallest one-way delay."
    )


class AgentRow(Shape):
    agent: str
    incarnation: str | None = Field(None, description="The stream's incarnation; shown to admins only.")
    node: str
    last_seq: int
    last_time: float


class GridRow(Shape):
    node: str
    status: str
    cordoned: bool
    util: list[int | None]
    temp: list[int | None]
    throttled: list[bool]
    allocated: list[bool]


class HistoryPoint(Shape):
    t: float
    util: float | None = None
    temp: float | None = None
    power: float | None = Field(None, description="Fleet power in kW.")


class NodeDegraded(Shape):
    node: str
    sources_down: dict[str, str] = Field(description="Its GPU sources that are down, each with why.")


class Summary(Shape):
    time: float
    nodes: int
    nodes_lost: int
    gpus: int
    gpus_lost: int
    gpus_throttled: int
    gpus_idle_held: int
    util_mean: float
    temp_max: float | None
    power_kw: float
    jobs: dict[str, int]
    links_down: int
    incidents_open: int
    incidents_critical: int
    nodes_degraded: list[NodeDegraded] = Field(
        default_factory=list, description="Nodes whose GPU source is down: they cannot see their GPUs."
    )
    grid: list[GridRow]
    job_rows: list[JobRow]
    incidents: list[IncidentRow]
    remediation: str
    backend: str
    simulated_time: bool = Field(
        False, description="The clock (`time`) is the digital twin's simulated time, not the wall clock."
    )
    history: list[HistoryPoint]


class Transition(Shape):
    id: str
    state: str


class ActionResult(Shape):
    target: str = Field(description="node/NAME, gpu/NODE/INDEX or job/NAME.")
    action: str
    result: str
    dry_run: bool = False


class CollectiveResult(Shape):
    incidents: list[str]


class Sample(Shape):
    labels: dict[str, str]
    time: float
    value: float | None


class Range(Shape):
    labels: dict[str, str]
    points: list[tuple[float, float | None]] = Field(description="[time, value] pairs.")


class NodeActionRow(Shape):
    id: str
    node: str
    kind: str
    gpu: int | None
    incident: str
    reason: str
    requested_by: str
    created: float
    deadline: float
    state: str = Field(description="queued, dispatched, or the outcome: done, passed, failed, refused, expired, "
                       "unsupported, interrupted.")  # fmt: skip
    dispatched: float | None
    finished: float | None
    detail: str = Field(description="The agent's one line on what happened, or why not.")
    output: str = Field(description="The command's own output (its end, when long).")


class BlastJob(BaseModel):
    job: str
    nodes: list[str] = Field(description="Its nodes under the switch at fault.")
    ranks_there: int = Field(description="How many of its ranks run on them.")


class BlastRadius(BaseModel):
    switch: str = Field(description="The switch at fault: the lower of a cable's two switches.")
    tier: str = Field(description="leaf, spine or core.")
    hosts: list[str] = Field(description="Every host under it (a spine's or core's through its leaves).")
    jobs: list[BlastJob] = Field(description="The jobs with ranks on those hosts (the fleet's workload attribution).")


class IncidentDetail(IncidentRow):
    actions: list[AuditRow] = Field(description="Remediation decisions and people's changes, oldest first.")
    node_actions: list[NodeActionRow] = Field(
        default_factory=list, description="What the node's agent was asked to do for it, with results, oldest first."
    )
    blast_radius: BlastRadius | None = Field(
        None, description="A fabric switch at fault: the hosts under it and the jobs on them; null otherwise."
    )


class Note(BaseModel):
    model_config = ConfigDict(extra="forbid")
    note: str = Field("", max_length=2000, description="Why, for the audit log.")


class ActionRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    dryRun: bool = Field(False, description="Check everything (node, GPU, backend capability) and change nothing.")
    reason: str = Field("", max_length=500, description="Why, for the audit log and the scheduler's reason field.")


class NodeActionRequest(ActionRequest):
    kind: Literal["reset-gpu", "reboot-node", "power-cap", "restart-service", "diag"] = Field(
        description="What the node's agent does (model/actions.py)."
    )
    gpu: int | None = Field(None, ge=0, le=4095, description="reset-gpu, power-cap, diag: the GPU (none: all).")
    fraction: float | None = Field(None, gt=0.3, le=1.0, description="power-cap: of the default power limit.")
    level: int | None = Field(None, ge=1, le=4, description="diag: dcgmi diag -r LEVEL.")
    service: Service | None = Field(None, description="restart-service: the NVIDIA daemon to restart.")
    deadlineSeconds: float = Field(900.0, gt=0, le=86400.0, description="Not begun by then: not begun at all.")


class EnrollRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    node: str = Field(min_length=1, max_length=253, description="The node's name, as its agent reports it.")


class Enrolled(Shape):
    name: str
    node: str
    token: str = Field(description="The node's own agent token; shown once, kept by the agent in its data directory.")


class NodeActionQueued(Shape):
    id: str
    state: str = Field(description="queued, or would (dryRun).")
    result: str


class RequeueRequest(ActionRequest):
    exclude: list[str] = Field(default_factory=list, max_length=1000, description="Nodes the job must not return to.")


class Link(Shape):
    node: str
    hca: str
    port: int
    rail: str
    guid: str
    switch: str | None = Field(description="The switch at the other end, when known.")
    state: Literal["Active", "Down", "Unknown"]
    speed_gbps: float | None
    symbol_errors: float | None
    link_downed: float | None
    rcv_errors: float | None
    incident: str | None = Field(description="The worst open incident on this port.")
    severity: Severity | None


class Switch(Shape):
    name: str
    links: int
    down: int
    erring: int = Field(description="Links with symbol, receive or link-downed errors counted.")


class FabricCounts(Shape):
    source: Literal["fabric watcher", "node agents"] = Field(
        description="Who counted: the subnet's watcher (every switch and cable it discovered), else the nodes' agents"
        " (the switches their HCA ports face, a link per HCA port)."
    )
    switches: int
    links: int
    links_down: int
    hca_ports: int = Field(description="The HCA ports the nodes' agents report (the `links` list below).")


class Fabric(Shape):
    switches: list[Switch] = Field(description="The switches the nodes' HCA ports face, with their ports' states.")
    links: list[Link] = Field(description="Every HCA port the nodes' agents report.")
    counts: FabricCounts = Field(description="The fabric's one count of switches and links, for every view of it.")


class WhoAmI(Shape):
    name: str = Field(description="The token's name, or anonymous.")
    role: Literal["viewer", "operator", "admin", "agent", "none"]


class PendingRow(Shape):
    """Work the workload manager has not placed, and why in its own words."""

    manager: str = Field(description="The workload manager that reported it: slurm, kubernetes, twin.")
    name: str = Field(description="The pod, Kueue Workload or Slurm job (JOBID NAME).")
    queue: str = Field(description="Kueue ClusterQueue, Slurm partition, or the namespace without Kueue.")
    namespace: str = Field(description="Kubernetes namespace, or the Slurm account.")
    gpus: int = Field(description="GPUs it asks for in all (MIG instances count one each).")
    since: float | None = Field(description="When it was submitted or first found unschedulable (epoch s).")
    waiting_s: float | None = Field(description="How long it has waited, when `since` is known.")
    reason: str = Field(description="The manager's reason: Unschedulable, Resources, Priority, QOSMaxGRESPerUser, ...")
    message: str = Field(description="The manager's words: a FailedScheduling message, or a Slurm reason explained.")
    priority: int | None


class QueueRow(Shape):
    """A queue's GPUs: in use, asked for by pending work, and its quota."""

    manager: str
    name: str
    gpus_used: int
    gpus_pending: int = Field(description="GPUs its pending work asks for.")
    quota: int | None = Field(description="Kueue nominal quota, or the Slurm partition's GPUs; null: none.")
    borrowing_limit: int | None = Field(description="How much more it may borrow from its cohort; null: unlimited.")
    use_pct: float | None = Field(description="GPUs in use as a percentage of quota (over 100 when borrowing).")
    pending: int = Field(description="Pending workloads or jobs.")
    running: int = Field(description="Admitted workloads, running jobs or pods.")


class ManagerView(Shape):
    manager: str
    node: str = Field(description="The node whose agent reported it.")
    time: float = Field(description="When the report was read (epoch s).")
    age_s: float
    stale: bool = Field(description="The report is over two minutes old, or its agent went silent.")
    pending_count: int = Field(description="Its pending work in all, on every page.")
    gpus_pending: int
    pending: list[PendingRow] = Field(description="Its rows of this page, longest-waiting first.")
    queues: list[QueueRow]


class ListMeta(Shape):
    """Where a paged list stands, in the Kubernetes API's names."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    continue_: str | None = Field(
        None,
        alias="continue",
        description="Pass it as `continue` for the next page; null on the last page.",
    )
    remainingItemCount: int = Field(0, description="Items after this page.")


class SchedulerView(Shape):
    time: float = Field(description="The control plane's clock.")
    managers: list[ManagerView] = Field(
        description="One per workload manager that reports, by name, each with its counts and queues on every "
        "page; its `pending` holds its rows of this page of the pending work (longest-waiting first across "
        "managers, `limit` rows a page)."
    )
    metadata: ListMeta = Field(default_factory=ListMeta, description="The page: how to get the next one.")


# --- the fabric service (/api/v1/fabric/...), shaped after UFM's resources ----------------------------------------


class SubnetManagerRow(Shape):
    lid: int
    guid: str
    activity: int = Field(description="sminfo's activity count: it grows with every sweep.")
    priority: int
    state: str = Field(description="SMINFO_MASTER, SMINFO_STANDBY, ...")


class SubnetRow(Shape):
    subnet: str = Field(description="The local port the subnet is reached through (mlx5_0/1), or default.")
    source: str = Field(description="live (the real tools) or twin.")
    time: float = Field(description="When the last poll was taken (epoch s).")
    polls: int
    poll_s: float
    took_s: float = Field(description="How long the last poll's tools ran.")
    switches: int
    hcas: int
    links: int
    links_down: int
    findings: dict[str, int] = Field(description="Active findings by severity.")
    errors: list[str] = Field(description="Tools that failed or timed out in the last poll.")
    subnet_manager: SubnetManagerRow | None
    expected: str = Field(description="What the fabric is checked against: the manifest, or the first discovery.")
    settings: list[dict[str, Any]] = Field(
        default_factory=list,
        description="The watching host's fabric settings (HCA ports' MTU, RoCE QoS, OpenSM's configuration, "
        "whether opensm and SHARP's sharp_am run), as its agent read them; their findings are among `findings`.",
    )


class FabricSubnets(Shape):
    subnets: list[SubnetRow]
    reports: int
    isolated_ports: int


class TopologySwitchRow(Shape):
    name: str
    tier: Literal["leaf", "spine", "core"]
    hosts: list[str] = Field(description="A leaf: every host with a rail cabled to it.")
    children: list[str] = Field(description="A spine or core: the switches one tier down cabled to it.")


class TopologyHostRow(Shape):
    name: str
    home: str = Field(description="The one leaf a tree-shaped scheduler lists the host under: most of its rails.")
    leaves: list[str] = Field(description="Every leaf its rails reach, in rail order.")
    rails: int
    nvlink_domain: str | None = Field(description="<cluster uuid>.<clique> its GPUs joined; null where none.")


class TopologyLabelsState(Shape):
    kept: bool = Field(description="Whether this control plane writes node labels (a backend that labels nodes).")
    settle_polls: int = Field(description="Polls a host's new labels must hold before they are written.")
    applied: int = Field(description="Hosts whose labels were written (or found written).")
    pending: int = Field(description="Hosts whose new labels are settling.")
    waiting: dict[str, dict[str, Any]] = Field(description="The first of them: {labels, polls, of}.")


class FabricTopology(Shape):
    source: str
    notes: list[str]
    switches: list[TopologySwitchRow]
    hosts: list[TopologyHostRow]
    changes: int = Field(description="Topologies built since the start that differed from the one before.")
    labels: TopologyLabelsState


class FabricSystem(Shape):
    name: str
    type: Literal["switch", "hca", "router"]
    guid: str
    lid: int | None
    ports: int
    description: str
    tier: str = Field(description="leaf, spine or core for a switch.")
    host: str
    subnet: str


class FabricLinkRow(Shape):
    a: str = Field(description="One end, SWITCH/PORT or HOST/HCA/PORT.")
    b: str
    a_node: str
    b_node: str
    tiers: list[str]
    width: str | None = Field(description="Negotiated width, e.g. 4x.")
    speed: str | None = Field(description="Negotiated speed, e.g. NDR.")
    rate_gbps: float | None
    up: bool
    state: str
    subnet: str
    worst: str = Field(description="The worst active finding on either end: critical, warning, info, or empty.")
    error_rate_per_s: float = Field(description="Error counters' growth per second at both ends, last poll.")


class FabricPortRow(Shape):
    name: str
    ufm_name: str = Field(description="UFM's name for the port: <GUID without 0x>_<port>.")
    node: str
    port: int
    peer: str | None
    state: str
    counters: dict[str, int] = Field(description="Latest PMA counters by name (PortXmitData counts octets / 4).")
    rates_per_s: dict[str, float]
    errors: int = Field(description="Sum of the error counters.")
    subnet: str


class FabricAlarm(Shape):
    kind: str = Field(description="missing-link, miscabled, link-down, link-flap, symbol-errors, ...")
    severity: Severity
    ends: list[str] | None = None
    port: str | None = None
    message: str
    fix: str
    action: str | None = Field(None, description="What remediation may do: isolate-port.")
    subnet: str


class FabricEventRow(Shape):
    time: float
    subnet: str
    kind: str = Field(
        description="link-down, link-up, sm-sweep, sm-change, poll-error; host-moved, host-new, host-gone, "
        "switch-new, switch-gone (the topology); relabel (a node's topology labels written)."
    )
    severity: str
    message: str
    ends: list[str]


class TelemetrySeries(Shape):
    port: str
    points: list[dict[str, float]] = Field(description="{time, <counter>: value, ...} per poll.")


class FabricTelemetry(Shape):
    port: str
    peer: str | None
    series: list[TelemetrySeries]


class IsolatedPort(Shape):
    port: str
    since: float


class PreflightFailure(Shape):
    """What a GPU pod's `gpufleet-preflight` init container reports when a check fails on its node."""

    model_config = ConfigDict(extra="forbid")

    node: str = Field(min_length=1, max_length=253, description="The node the pod was placed on.")
    check: Literal["dcgm-diag", "nccl-allreduce"] = Field(description="The check that failed.")
    output: str = Field("", max_length=65_536, description="The check's output (its verdict and failures).")
    pod: str = Field("", max_length=317, description="namespace/name of the pod whose preflight failed.")
    gang: str = Field("", max_length=300, description="The pod's gang (e.g. JobSet/train), when it has one.")


class PreflightResult(Shape):
    incident: str = Field(description="The incident opened (or joined) on the node.")


# The cost report is a typed model already (cost/report.py), described field by field there: the API answers
# it as it is, so the two cannot drift apart.
CostReport = cost_report.CostReport
