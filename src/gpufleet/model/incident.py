"""Incidents: one per root cause, with the effects it caused attached. Detectors open them, remediation acts on them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from gpufleet.model.observation import Entity


class IncidentState(StrEnum):
    open = "open"
    acknowledged = "acknowledged"
    mitigated = "mitigated"
    resolved = "resolved"


class Severity(StrEnum):
    """How bad, in one vocabulary for every layer; the values are the strings stored, served and labelled. A layer
    that speaks otherwise (the doctor's and SARIF's "error") maps at its edge."""

    critical = "critical"  # a GPU or link is unusable, a job is stuck or corrupting
    warning = "warning"  # degraded: slower, or about to fail
    info = "info"

    @property
    def rank(self) -> int:
        """info 0, warning 1, critical 2: the higher, the worse."""
        return _SEVERITY_RANK[self]

    @classmethod
    def worst(cls, severities: Iterable[Severity]) -> Severity | None:
        """The worst of `severities`; None when there are none."""
        return max(severities, key=_SEVERITY_RANK.__getitem__, default=None)


_SEVERITY_RANK = {Severity.info: 0, Severity.warning: 1, Severity.critical: 2}


class RootCause(StrEnum):
    """What broke. Remediation runbooks are keyed on these."""

    gpu_xid = "gpu-xid"  # a fatal or application Xid not covered by a more specific cause
    gpu_lost = "gpu-lost"  # fell off the bus
    ecc_dbe = "ecc-dbe"
    ecc_sbe_rate = "ecc-sbe-rate"
    row_remap_failure = "row-remap-failure"
    retired_pages = "retired-pages"
    thermal = "thermal"
    power_brake = "power-brake"
    pcie = "pcie"
    nvlink = "nvlink"
    scaleup_link = "scaleup-link"  # another vendor's scale-up fabric: Infinity Fabric (XGMI), Gaudi's scale-up ports
    gpu_ras = "gpu-ras"  # an uncorrectable hardware error outside memory (AMD RAS, Gaudi critical HW/FW error)
    gpu_hang = "gpu-hang"  # a ring or command-submission timeout: the driver resets the device
    ib_symbol_errors = "ib-symbol-errors"
    ib_link_down = "ib-link-down"
    ib_link_flap = "ib-link-flap"
    ib_congestion = "ib-congestion"
    ib_link_degraded = "ib-link-degraded"  # a link trained below its width or speed
    fabric_cabling = "fabric-cabling"  # cabling differs from the intended fabric: missing, miscabled, unexpected
    fabric_config = "fabric-config"  # duplicate GUIDs or LIDs, unassigned LIDs
    nccl_hang = "nccl-hang"
    straggler = "straggler"
    training_stall = "training-stall"
    idle_gpu = "idle-gpu"
    driver_mismatch = "driver-mismatch"
    recovery_action = "recovery-action"  # Xid 154: the driver announced what it needs
    diag_failure = "diag-failure"
    collective_slow = "collective-slow"  # a measured collective (nccl-tests) well below what the fabric should give
    # the application layer: what a job's or a service's own metrics say
    loss_nonfinite = "loss-nonfinite"  # NaN or infinite loss (or gradient norm)
    loss_plateau = "loss-plateau"  # loss not decreasing over N steps: frozen (stall) or flat within noise (plateau)
    loss_divergence = "loss-divergence"  # validation loss rising while training loss falls, or loss blowing up
    gradient_norm = "gradient-norm"  # exploding (> 100) or vanishing (< 1e-7)
    throughput_drop = "throughput-drop"  # samples/s well below the job's own baseline
    input_starved = "input-starved"  # GPUs waiting on the input pipeline
    checkpoint_failure = "checkpoint-failure"
    gpu_oom = "gpu-oom"  # CUDA out of memory: the framework's allocator, not the kernel
    host_oom = "host-oom"  # the kernel's OOM killer (a cgroup limit or the node's memory)
    slo_latency = "slo-latency"  # request-duration percentiles over their objective
    slo_ttft = "slo-ttft"  # time to first token over its objective
    slo_errors = "slo-errors"  # error ratio over its objective
    slo_availability = "slo-availability"  # successful-request ratio under its objective over the hour
    service_stale = "service-stale"  # a service's replicas stopped reporting
    # the box around the GPUs, as its BMC reports it (health/bmc.py)
    node_fan = "node-fan"  # a chassis fan failed, stopped or fell below its lower critical threshold
    node_psu = "node-psu"  # a power supply failed, predicts failure or lost its AC input
    node_thermal = "node-thermal"  # a chassis temperature (inlet, exhaust, board) over its upper threshold
    # the nodes' clocks (health/clock_skew.py)
    clock_skew = "clock-skew"  # a job's nodes' clocks differ by more than 1 ms
    clock_unsynchronised = "clock-unsynchronised"  # a node's time daemon (or kernel) says its clock is not synchronised


@dataclass(slots=True)
class Evidence:
    time: float
    source: str  # kmsg, telemetry, fabric, job, diag
    text: str  # the real line or a measured value with its threshold


@dataclass(slots=True)
class Incident:
    id: str  # stable for the root cause: the same fault seen again dedupes onto it
    cause: RootCause
    entity: Entity  # the broken thing: a GPU, a port, a node, a job
    severity: Severity
    summary: str
    first_seen: float
    last_seen: float
    state: IncidentState = IncidentState.open
    count: int = 1
    evidence: list[Evidence] = field(default_factory=list)
    effects: list[str] = field(default_factory=list)  # "job train-3 hung", "job train-3 stalled"
    action: str = ""  # the vocabulary term a runbook keys on (RESET_GPU, RESTART_BM, WORKFLOW_XID_48, ...)
    xid: int | None = None
    serial: str | None = None  # GPU board serial, for an RMA ticket

    @property
    def node(self) -> str:
        return self.entity.node
