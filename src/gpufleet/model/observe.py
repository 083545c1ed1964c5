"""The one contract between a node and the control plane: typed observations, and the batch that carries them.

Every node, real or simulated, speaks this. An agent parses and detects at the edge (kernel-log reports, port state
changes, node-local health findings), keeps those durably in its spool under a sequence number, and pushes them in
a `Batch` together with the node's latest state (inventory, a metric snapshot, the training jobs it hosts). The
control plane stores each record exactly once per (agent, incarnation, seq) and answers with the highest sequence
number it holds (`Ack`).

- Durable records (`Record`: a `KernelReport`, a `LinkEvent`, a `BmcEvent` or a `Finding`) are delivered exactly
  once.
- State (`NodeInventory`, `MetricSnapshot`, `JobFact`, `ServiceFact`, `SchedulerReport`, `ClockFact`) is
  latest-value: a push replaces what the last one said, and a lost push is simply superseded by the next.

Times are Unix epoch seconds everywhere. `docs/wire.md` describes the wire form (JSON, or msgpack).
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
import numpy as np

from gpufleet.model.actions import ActionResult, NodeAction, NodeActionKind
from gpufleet.model.affinity import HostAffinity
from gpufleet.model.fabric_settings import HostFabricSettings
from gpufleet.model.incident import RootCause, Severity
from gpufleet.model.kernel import EventKind
from gpufleet.model.observation import Entity

SCHEMA_VERSION = 1
MAX_SEQ = 2**53 - 1  # exact as a JSON number and in every database's integer column
LATEST_TIME = 4_102_444_800.0  # 2100-01-01: a time past this is a broken clock or a unit error

Seq = Annotated[int, msgspec.Meta(ge=1, le=MAX_SEQ)]
Time = Annotated[float, msgspec.Meta(ge=0.0, le=LATEST_TIME)]
Name = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
Text = Annotated[str, msgspec.Meta(max_length=16_384)]
Short = Annotated[str, msgspec.Meta(max_length=256)]
GpuIndex = Annotated[int, msgspec.Meta(ge=0, le=4095)]


# --- durable records -------------------------------------------------------------------------------------------


class Finding(msgspec.Struct, tag="finding"):
    """What a health check saw at one moment on one entity (NVSentinel's HealthEvent is the model for this).

    `cause` names the check that failed and the root cause it stands for; `action` is the recommended action
    (the vocabulary runbooks key on); `evidence` is the real line, or the measurement against its threshold.
    An `effect` (a stalled job, an idle rank) joins the incident of a root cause that explains it, when one is open.
    """

    time: Time
    cause: RootCause
    entity: Entity
    severity: Severity
    summary: Text
    evidence: Text
    source: Short  # kmsg, telemetry, fabric, training, software, nccl
    action: Short = ""
    xid: int | None = None
    job: Short | None = None  # the job a finding is about, or whose rank holds the GPU
    effect: bool = False
    began: float | None = None  # when an effect started (a stalled job's last step)
    # the kernel-log line a finding judges (KernelReport.ident): the control plane takes a line once, whichever
    # stream brings it again (an agent that lost its spool re-reads the log under a new incarnation)
    ident: Short = ""

    @property
    def key(self) -> str:
        return f"{self.cause.value}:{self.entity}"


class KernelReport(msgspec.Struct, tag="kernel"):
    """A GPU or NVSwitch fault the kernel log reported, parsed at the edge (Xid, SXid, fallen off the bus, reset
    required, driver API mismatch). `gpu` is the GPU index on the node when the PCI address resolved to one."""

    time: Time
    node: Name
    kind: EventKind
    message: Text
    raw: Text  # the driver's own line(s)
    gpu: GpuIndex | None = None
    pci: Short | None = None  # domain:bus:device
    xid: int | None = None
    sxid: int | None = None
    vendor: Short = "nvidia"  # whose driver printed it
    detail: Short = ""  # the RAS block and severity, the ring, or the driver's event name
    ident: Short = ""  # the line's identity on its node: its own timestamp and text (model.kernel.kernel_ident)
    logged: Time | None = None  # the wall time the line itself carries, when it carries one


class LinkEvent(msgspec.Struct, tag="link"):
    """A fabric port changed state (seen in sysfs or by the port's counters)."""

    time: Time
    node: Name
    hca: Short  # mlx5_0
    port: Annotated[int, msgspec.Meta(ge=0, le=255)]
    up: bool
    state: Short = ""  # ACTIVE, DOWN, INIT, ARMED
    phys_state: Short = ""  # LinkUp, Polling, Disabled, ...
    detail: Text = ""


class BmcEvent(msgspec.Struct, tag="bmc"):
    """A new record of the node's BMC System Event Log (IPMI SEL), as the agent's BMC source read it: the record id,
    IPMI's sensor type and the sensor, the event in ipmitool's words and whether it was asserted or deasserted.
    `severity` is health/bmc.py's verdict of it (None: no fault); a fault also comes as its own finding."""

    time: Time  # when the agent read it
    node: Name
    record: Annotated[int, msgspec.Meta(ge=0, le=0xFFFF)]
    sensor_type: Short
    sensor: Short
    event: Short
    asserted: bool
    raw: Text
    logged: Time | None = None  # the record's own time, when the BMC stamped one
    severity: Severity | None = None


Observation = Finding | KernelReport | LinkEvent | BmcEvent


class Record(msgspec.Struct):
    """One durable observation under the agent's sequence number."""

    seq: Seq
    body: Observation


# --- latest-value state ----------------------------------------------------------------------------------------


class MigInfo(msgspec.Struct):
    """A MIG GPU instance as NVML lists it: its profile (`3g.40gb`), GPU-instance id, where it sits on the GPU's
    memory-slice axis (`start`, `size` slices), and the MIG device UUID of its compute instance."""

    profile: Short
    gi_id: Annotated[int, msgspec.Meta(ge=0, le=255)]
    start: Annotated[int, msgspec.Meta(ge=0, le=255)]
    size: Annotated[int, msgspec.Meta(ge=1, le=255)]
    uuid: Short = ""
    ci_id: Annotated[int, msgspec.Meta(ge=0, le=255)] | None = None


class GpuInfo(msgspec.Struct):
    index: GpuIndex
    uuid: Short
    model: Short
    pci_bus_id: Short = ""
    serial: Short = ""
    mig_mode: bool | None = None
    memory_mib: float | None = None
    power_limit_w: float | None = None
    mig: Annotated[list[MigInfo], msgspec.Meta(max_length=64)] = []
    vendor: Short = "nvidia"  # nvidia, amd, intel
    partition: Short = ""  # AMD compute and memory partition mode: CPX_NPS4
    parent: GpuIndex | None = None  # the physical device a partition belongs to
    # the NVLink domain a GPU joined (NVML's fabric info, once its registration completed): the clique (partition of
    # an NVSwitch or multi-node NVLink domain) and the cluster's UUID; None and "" where it has none or has not joined
    clique_id: Annotated[int, msgspec.Meta(ge=0, le=2**32 - 1)] | None = None
    cluster_uuid: Short = ""


class PortInfo(msgspec.Struct):
    hca: Short
    port: Annotated[int, msgspec.Meta(ge=0, le=255)]
    rail: Short = ""
    guid: Short = ""
    lid: int | None = None
    rate_gbps: float | None = None
    link_layer: Short = ""  # InfiniBand, Ethernet
    netdev: Short = ""  # ib0, ibp24s0
    peer: Short = ""  # the switch at the other end, when the node knows it (ibnetdiscover, the twin)

    @property
    def name(self) -> str:
        return f"{self.hca}/{self.port}"


class NodeInventory(msgspec.Struct):
    hostname: Name
    driver: Short = ""
    cuda: Short = ""
    kernel: Short = ""
    fabric_manager: Short = ""
    agent_version: Short = ""
    gpus: Annotated[list[GpuInfo], msgspec.Meta(max_length=4096)] = []
    ports: Annotated[list[PortInfo], msgspec.Meta(max_length=1024)] = []
    labels: dict[Short, Short] = {}  # pool, rack and what the node's labeller knows
    affinity: HostAffinity | None = None  # GPU<->NIC<->CPU: NUMA nodes, CPU lists, PCIe links (None: not read)
    # the host's own fabric settings (HCA and RoCE netdev MTU, RoCE QoS, OpenSM's files), its latest read; None: the
    # host has no HCA, the agent does not read them, or an older agent
    fabric_settings: HostFabricSettings | None = None


class MetricSnapshot(msgspec.Struct):
    """The node's latest collection, in dcgm-exporter's field names and the IB counter metric names.

    Values are little-endian float64, field-major (`values[field][column]`); NaN means no reading. GPU columns
    follow `gpus` (GPU indices, in inventory order), port columns follow `ports` ("mlx5_0/1"). `held` names the
    workload holding each GPU ("namespace/pod") or is empty.
    """

    time: Time
    gpus: Annotated[list[GpuIndex], msgspec.Meta(max_length=4096)] = []
    gpu_fields: Annotated[list[Short], msgspec.Meta(max_length=1024)] = []
    gpu_values: bytes = b""
    ports: Annotated[list[Short], msgspec.Meta(max_length=1024)] = []
    port_fields: Annotated[list[Short], msgspec.Meta(max_length=256)] = []
    port_values: bytes = b""
    port_up: list[bool] = []
    held: list[Short] = []
    # the node's sources that are down now (gpufleet_source_up 0), each with why: a node whose GPU source (NVML)
    # is down reports no GPUs, and this is what says it is blind rather than empty
    sources_down: Annotated[dict[Short, Text], msgspec.Meta(max_length=64)] = {}

    def __post_init__(self) -> None:
        for what, fields, columns, values in (
            ("gpu_values", self.gpu_fields, self.gpus, self.gpu_values),
            ("port_values", self.port_fields, self.ports, self.port_values),
        ):
            want = 8 * len(fields) * len(columns)
            if len(values) != want:
                raise ValueError(f"{what} holds {len(values)} bytes; {len(fields)} fields x {len(columns)} = {want}")
        if self.port_up and len(self.port_up) != len(self.ports):
            raise ValueError(f"port_up has {len(self.port_up)} entries for {len(self.ports)} ports")
        if self.held and len(self.held) != len(self.gpus):
            raise ValueError(f"held has {len(self.held)} entries for {len(self.gpus)} GPUs")

    @classmethod
    def of(
        cls,
        time: float,
        gpus: list[int],
        gpu_fields: list[str],
        gpu_matrix: np.ndarray,
        ports: list[str] | None = None,
        port_fields: list[str] | None = None,
        port_matrix: np.ndarray | None = None,
        port_up: list[bool] | None = None,
        held: list[str] | None = None,
        sources_down: dict[str, str] | None = None,
    ) -> MetricSnapshot:
        """Build a snapshot from (fields x columns) arrays."""
        port_bytes = b"" if port_matrix is None else np.ascontiguousarray(port_matrix, dtype="<f8").tobytes()
        return cls(
            time=float(time),
            gpus=gpus,
            gpu_fields=gpu_fields,
            gpu_values=np.ascontiguousarray(gpu_matrix, dtype="<f8").tobytes(),
            ports=ports or [],
            port_fields=port_fields or [],
            port_values=port_bytes,
            port_up=port_up or [],
            held=held or [],
            sources_down=sources_down or {},
        )

    def gpu_matrix(self) -> np.ndarray:
        return np.frombuffer(self.gpu_values, dtype="<f8").reshape(len(self.gpu_fields), len(self.gpus))

    def port_matrix(self) -> np.ndarray:
        return np.frombuffer(self.port_values, dtype="<f8").reshape(len(self.port_fields), len(self.ports))


class RankFact(msgspec.Struct, array_like=True):
    rank: Annotated[int, msgspec.Meta(ge=0)]
    gpu: GpuIndex
    compute_s: float | None = None  # the rank's compute time per step, when the framework exports it


class TrainingSignals(msgspec.Struct, omit_defaults=True):
    """What a job's own instrumentation said at its last scrape (the `gpufleet.instrument` names); None where the
    job does not export it. JSON has no NaN or infinity, so a non-finite value travels as None with its field's
    name in `nonfinite` (a NaN loss is a finding, not a missing value)."""

    step: Annotated[int, msgspec.Meta(ge=0)] | None = None
    loss: float | None = None
    validation_loss: float | None = None
    learning_rate: float | None = None
    grad_norm: float | None = None
    samples_per_s: Annotated[float, msgspec.Meta(ge=0.0)] | None = None
    tokens_per_s: Annotated[float, msgspec.Meta(ge=0.0)] | None = None
    data_wait_s: Annotated[float, msgspec.Meta(ge=0.0)] | None = None  # the slowest rank's input wait, last step
    checkpoints_ok: Annotated[int, msgspec.Meta(ge=0)] = 0  # cumulative
    checkpoints_failed: Annotated[int, msgspec.Meta(ge=0)] = 0
    checkpoint_s: Annotated[float, msgspec.Meta(ge=0.0)] | None = None  # the last write's duration
    last_checkpoint_time: Time | None = None
    barrier_timeouts: Annotated[int, msgspec.Meta(ge=0)] = 0
    missing_rank: Annotated[int, msgspec.Meta(ge=0)] | None = None  # the rank the last timed-out barrier lacked
    nonfinite: Annotated[list[Short], msgspec.Meta(max_length=16)] = []


class JobFact(msgspec.Struct):
    """A training job's ranks on this node and its progress, as the framework reports it."""

    job: Name
    ranks: Annotated[list[RankFact], msgspec.Meta(max_length=4096)]
    world_size: Annotated[int, msgspec.Meta(ge=1)]
    last_step_time: Time
    step_seconds: float = 0.0
    step: int = 0
    restarts: int = 0
    signals: TrainingSignals | None = None  # from the node that hosts the rank exporting them (rank 0 usually)


class HistogramFact(msgspec.Struct, array_like=True):
    """A cumulative Prometheus histogram as last scraped: `counts[i]` observations were <= `bounds[i]`, `count`
    in all (the +Inf bucket). The control plane differences successive ones over its own windows."""

    bounds: Annotated[list[float], msgspec.Meta(max_length=64)]
    counts: Annotated[list[Annotated[float, msgspec.Meta(ge=0.0)]], msgspec.Meta(max_length=64)]
    count: Annotated[float, msgspec.Meta(ge=0.0)]
    sum: float = 0.0

    def __post_init__(self) -> None:
        if len(self.counts) != len(self.bounds):
            raise ValueError(f"histogram has {len(self.counts)} counts for {len(self.bounds)} bounds")


class ServiceFact(msgspec.Struct):
    """An inference service with replicas on this node, from its own request-duration histogram: percentiles are
    over the requests since the last push (None when there were too few to say), counts are cumulative.

    The cumulative histograms (request duration, time to first token, inter-token latency) let the control plane
    judge the SLOs over its own windows (5 minutes, an hour), summed across the service's replicas."""

    service: Name
    gpus: Annotated[list[GpuIndex], msgspec.Meta(max_length=4096)] = []
    requests: Annotated[int, msgspec.Meta(ge=0)] = 0
    errors: Annotated[int, msgspec.Meta(ge=0)] = 0
    requests_per_s: Annotated[float, msgspec.Meta(ge=0.0)] = 0.0
    p50_s: Annotated[float, msgspec.Meta(ge=0.0)] | None = None
    p95_s: Annotated[float, msgspec.Meta(ge=0.0)] | None = None
    p99_s: Annotated[float, msgspec.Meta(ge=0.0)] | None = None
    slo_p99_s: Annotated[float, msgspec.Meta(gt=0.0)] | None = None
    window_s: Annotated[float, msgspec.Meta(ge=0.0)] = 0.0  # what the percentiles span
    version: Short = ""
    latency: HistogramFact | None = None
    ttft: HistogramFact | None = None
    inter_token: HistogramFact | None = None
    generated_tokens: Annotated[float, msgspec.Meta(ge=0.0)] | None = None  # cumulative
    queue_depth: Annotated[float, msgspec.Meta(ge=0.0)] | None = None
    problems: Annotated[list[Text], msgspec.Meta(max_length=16)] = []  # what was wrong with its series, and skipped


class PendingWork(msgspec.Struct):
    """Work the workload manager has not placed, and why, in its own words (a Kubernetes FailedScheduling message,
    a Slurm pending Reason)."""

    name: Name
    queue: Short = ""
    namespace: Short = ""  # Kubernetes namespace, or the Slurm account
    gpus: Annotated[int, msgspec.Meta(ge=0)] = 0
    since: Time | None = None  # submitted or first unschedulable
    reason: Short = ""  # Unschedulable, Resources, Priority, QOSMaxGRESPerUser, ...
    message: Text = ""
    priority: int | None = None


class QueueUse(msgspec.Struct):
    """A queue's GPUs: in use, asked for by pending work, and its quota (a Kueue ClusterQueue's nominal quota and
    borrowing limit, or a Slurm partition's GPUs). None is unknown or unlimited."""

    name: Name
    gpus_used: Annotated[int, msgspec.Meta(ge=0)] = 0
    gpus_pending: Annotated[int, msgspec.Meta(ge=0)] = 0
    quota: Annotated[int, msgspec.Meta(ge=0)] | None = None
    borrowing_limit: Annotated[int, msgspec.Meta(ge=0)] | None = None
    pending: Annotated[int, msgspec.Meta(ge=0)] = 0
    running: Annotated[int, msgspec.Meta(ge=0)] = 0


class SchedulerReport(msgspec.Struct):
    """The workload manager's view, from the agent that watches it (`gpufleet agent --workload slurm|kubernetes`,
    or the twin's): one per cluster, latest-value like the rest of a node's state."""

    manager: Short  # slurm, kubernetes, twin
    time: Time
    pending: Annotated[list[PendingWork], msgspec.Meta(max_length=100_000)] = []
    queues: Annotated[list[QueueUse], msgspec.Meta(max_length=10_000)] = []


PortNumber = Annotated[int, msgspec.Meta(ge=0, le=255)]


class FabricNodeFact(msgspec.Struct, array_like=True):
    """A switch, HCA or router the subnet shows. `name` is "host/device" for an HCA whose description says so."""

    name: Name
    kind: Literal["switch", "hca", "router"]
    guid: Short = ""
    lid: Annotated[int, msgspec.Meta(ge=0, le=65535)] | None = None  # a switch's (port 0)
    ports: Annotated[int, msgspec.Meta(ge=0, le=255)] = 0
    description: Short = ""
    tier: Short = ""


class FabricLinkFact(msgspec.Struct, array_like=True):
    """A cable between two ports, with what the ports negotiated."""

    a: Name
    a_port: PortNumber
    b: Name
    b_port: PortNumber
    width: Annotated[int, msgspec.Meta(ge=1, le=32)] | None = None  # lanes
    speed: Short | None = None  # SDR ... NDR, XDR
    up: bool = True
    a_lid: Annotated[int, msgspec.Meta(ge=0, le=65535)] | None = None
    b_lid: Annotated[int, msgspec.Meta(ge=0, le=65535)] | None = None
    note: Short = ""  # iblinkinfo's "Could be 12X"


class IdlePortFact(msgspec.Struct, array_like=True):
    """A port with no link: its state as the tools print it ("Down/Polling", "Down/Disabled")."""

    node: Name
    port: PortNumber
    state: Short


class PortCounterFact(msgspec.Struct, array_like=True):
    """One port's PMA counters, aligned with the report's `counter_names` (None: not read)."""

    node: Name
    port: PortNumber
    values: Annotated[list[Annotated[int, msgspec.Meta(ge=0)] | None], msgspec.Meta(max_length=64)]


class SubnetManagerFact(msgspec.Struct):
    """The master subnet manager as `sminfo` shows it; its activity count grows with every sweep it makes."""

    lid: Annotated[int, msgspec.Meta(ge=0, le=65535)]
    guid: Short
    activity: Annotated[int, msgspec.Meta(ge=0)]
    priority: Annotated[int, msgspec.Meta(ge=0, le=15)] = 0
    state: Short = ""  # SMINFO_MASTER, SMINFO_STANDBY, ...


class FabricReport(msgspec.Struct):
    """One poll of one subnet, by the agent that watches the fabric (`gpufleet agent --fabric`, or the twin's):
    the topology as discovered, ports without a link, and the ports' counters. Latest-value, like the rest of a
    node's state; the control plane analyses each new one (`time` tells them apart).

    `counters_complete` says every port was read (a perfquery sweep); otherwise only the ports listed had
    anything to report (ibqueryerrors lists ports with errors), and the others' counters did not move."""

    subnet: Short  # the local port the subnet is reached through ("mlx5_0/1"), or "default"
    time: Time
    source: Short = "live"  # live, twin
    nodes: Annotated[list[FabricNodeFact], msgspec.Meta(max_length=200_000)] = []
    links: Annotated[list[FabricLinkFact], msgspec.Meta(max_length=1_000_000)] = []
    idle_ports: Annotated[list[IdlePortFact], msgspec.Meta(max_length=2_000_000)] = []
    counter_names: Annotated[list[Short], msgspec.Meta(max_length=64)] = []
    counters: Annotated[list[PortCounterFact], msgspec.Meta(max_length=2_000_000)] = []
    counters_complete: bool = False
    conflicts: Annotated[list[Text], msgspec.Meta(max_length=1000)] = []  # cables the two ends list differently
    errors: Annotated[list[Text], msgspec.Meta(max_length=100)] = []  # tools that failed or timed out this poll
    poll_s: Annotated[float, msgspec.Meta(ge=0.0)] = 0.0
    took_s: Annotated[float, msgspec.Meta(ge=0.0)] = 0.0
    sm: SubnetManagerFact | None = None
    # the watching host's own settings (HCA MTU, RoCE QoS, OpenSM's configuration, SHARP's aggregation manager)
    settings: Annotated[list[HostFabricSettings], msgspec.Meta(max_length=64)] = []

    def __post_init__(self) -> None:
        width = len(self.counter_names)
        for row in self.counters:
            if len(row.values) != width:
                raise ValueError(f"counters of {row.node}/{row.port} hold {len(row.values)} values for {width} names")


class ClockFact(msgspec.Struct, omit_defaults=True):
    """The node's clock as its time daemon or the kernel reports it (chrony's `tracking`, ntpd's system variables,
    systemd-timesyncd's last NTP exchange, or the kernel's adjtimex state). Latest-value.

    `offset_s` is the system clock minus true time as the daemon estimates it: positive when the clock is ahead
    (chrony's "fast of NTP time"). `error_s` bounds how far the clock may be from true time (chrony's
    |offset| + root dispersion + root delay / 2, the kernel's maxerror). `synchronised` is False when the daemon
    says the clock is not synchronised (chrony's leap status "Not synchronised", ntpd's leap 11, the kernel's
    maxerror at 16 s: no daemon disciplines it), None when nothing said."""

    time: Time  # when the agent read it, on its own clock
    source: Short  # chrony, ntpd, timesyncd, kernel
    synchronised: bool | None = None
    offset_s: float | None = None
    error_s: Annotated[float, msgspec.Meta(ge=0.0)] | None = None
    last_offset_s: float | None = None  # the daemon's offset at its last update (chrony, same sign)
    root_delay_s: Annotated[float, msgspec.Meta(ge=0.0)] | None = None
    root_dispersion_s: Annotated[float, msgspec.Meta(ge=0.0)] | None = None
    stratum: Annotated[int, msgspec.Meta(ge=0, le=16)] | None = None
    reference: Short = ""  # the server or reference clock it follows
    leap: Short = ""  # the daemon's own word: Normal, Not synchronised, leap=11, ...


# --- the batch -------------------------------------------------------------------------------------------------


class Batch(msgspec.Struct):
    """One push from an agent. `incarnation` is made when the agent's spool is created: a new spool is a new
    stream whose sequence numbers start again at 1, and nothing of it is mistaken for a duplicate."""

    v: int
    agent: Name
    incarnation: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    node: Name
    sent: Time
    interval: Annotated[float, msgspec.Meta(gt=0.0, le=3600.0)] = 1.0
    records: Annotated[list[Record], msgspec.Meta(max_length=10_000)] = []
    inventory: NodeInventory | None = None
    metrics: MetricSnapshot | None = None
    jobs: Annotated[list[JobFact], msgspec.Meta(max_length=1024)] | None = None  # None: not reported this time
    services: Annotated[list[ServiceFact], msgspec.Meta(max_length=1024)] | None = None  # likewise
    scheduler: SchedulerReport | None = None  # from an agent that watches the workload manager
    fabric: Annotated[list[FabricReport], msgspec.Meta(max_length=16)] | None = None  # from a fabric watcher
    clock: ClockFact | None = None  # the node's clock, as last read (None: not read)
    # node actions (model/actions.py): the kinds this agent carries out (None: an agent that predates them, which
    # is given none), and the results it has not yet seen acknowledged
    can: Annotated[list[NodeActionKind], msgspec.Meta(max_length=32)] | None = None
    results: Annotated[list[ActionResult], msgspec.Meta(max_length=256)] = []

    def __post_init__(self) -> None:
        if self.v != SCHEMA_VERSION:
            raise ValueError(f"schema version {self.v} is not {SCHEMA_VERSION}")
        last = 0
        for record in self.records:
            if record.seq <= last:
                raise ValueError(f"records must be in increasing seq order ({record.seq} after {last})")
            last = record.seq


class Ack(msgspec.Struct, omit_defaults=True):
    """The control plane's answer: it holds every record of this stream up to `acked`; it took the results named in
    `results` (the agent forgets them), and asks the agent to carry out `actions` (those it has not begun)."""

    acked: int
    stored: int
    duplicates: int
    results: list[str] = []
    actions: list[NodeAction] = []
