"""The `kind: Scenario` manifest: a cluster, a workload, a duration and the faults to inject."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field, model_validator

from gpufleet.spec.base import Duration, Manifest, Metadata
from gpufleet.spec.cluster_spec import ClusterBody


class FaultType(StrEnum):
    xid = "xid"
    ecc_dbe = "ecc-dbe"
    gpu_off_bus = "gpu-off-bus"
    thermal_runaway = "thermal-runaway"  # fan failure: cooling collapses, temperature climbs
    power_brake = "power-brake"
    pcie_degrade = "pcie-degrade"
    nvlink_errors = "nvlink-errors"
    ib_symbol_errors = "ib-symbol-errors"
    link_flap = "link-flap"
    link_down = "link-down"
    nccl_hang = "nccl-hang"
    straggler = "straggler"
    idle_gpu = "idle-gpu"
    driver_mismatch = "driver-mismatch"
    # in the driver's own words: amdgpu's ring timeout and reset, habanalabs' command-submission timeout and reset
    # (an NVIDIA GPU's hang is an Xid: use `xid` with code 109 or 8)
    gpu_hang = "gpu-hang"
    # a RAS uncorrectable error in a hardware block (AMD: `block`, e.g. gfx, sdma, umc, xgmi_wafl), or Gaudi's
    # critical hardware error event
    ras_error = "ras-error"
    # the application layer: what a training loop or an inference server says about itself
    loss_plateau = "loss-plateau"  # the loss stops decreasing: flat, with its usual noise
    loss_stall = "loss-stall"  # the reported loss is frozen at one value
    loss_divergence = "loss-divergence"  # validation loss climbs while the training loss keeps falling
    loss_nan = "loss-nan"  # loss and gradient norm become NaN
    grad_explode = "grad-explode"  # gradient norm far above its usual 0.5-2
    checkpoint_failure = "checkpoint-failure"  # checkpoint writes fail
    slow_input = "slow-input"  # the data loader falls behind: ranks wait for input, GPUs idle
    slo_breach = "slo-breach"  # a service's latency rises `factor` times
    error_burst = "error-burst"  # a service fails `factor` (a fraction) of its requests
    traffic_ramp = "traffic-ramp"  # a service's request rate climbs to `factor` times over the duration
    service_down = "service-down"  # a service stops answering, its /metrics with it


# Where each fault lands: a GPU, a node, a NIC port (rail) or a job.
GPU_FAULTS = {
    FaultType.xid,
    FaultType.ecc_dbe,
    FaultType.gpu_off_bus,
    FaultType.thermal_runaway,
    FaultType.power_brake,
    FaultType.pcie_degrade,
    FaultType.nvlink_errors,
    FaultType.idle_gpu,
    FaultType.gpu_hang,
    FaultType.ras_error,
}
PORT_FAULTS = {FaultType.ib_symbol_errors, FaultType.link_flap, FaultType.link_down}
TRAINING_APP_FAULTS = {
    FaultType.loss_plateau,
    FaultType.loss_stall,
    FaultType.loss_divergence,
    FaultType.loss_nan,
    FaultType.grad_explode,
    FaultType.checkpoint_failure,
    FaultType.slow_input,
}
JOB_FAULTS = {FaultType.nccl_hang, FaultType.straggler, *TRAINING_APP_FAULTS}
NODE_FAULTS = {FaultType.driver_mismatch}
SERVICE_FAULTS = {FaultType.slo_breach, FaultType.error_burst, FaultType.traffic_ramp, FaultType.service_down}
APP_FAULTS = TRAINING_APP_FAULTS | SERVICE_FAULTS
# Faults that speak one driver's language: an Xid or an NVRM API mismatch is NVIDIA's, a RAS block error AMD's and
# Gaudi's; scale-up link errors are NVLink's Xid 74 or an XGMI RAS error. Every other fault lands on any vendor.
VENDOR_FAULTS: dict[FaultType, frozenset[str]] = {
    FaultType.xid: frozenset({"nvidia"}),
    FaultType.driver_mismatch: frozenset({"nvidia"}),
    FaultType.ras_error: frozenset({"amd", "intel"}),
    FaultType.gpu_hang: frozenset({"amd", "intel"}),
    FaultType.nvlink_errors: frozenset({"nvidia", "amd"}),
}
# AMD RAS blocks a `ras-error` fault may name (amdgpu_ras.c's block names, lower case)
RAS_BLOCKS = (
    "umc", "sdma", "gfx", "mmhub", "athub", "pcie_bif", "hdp", "xgmi_wafl", "df", "smn", "sem", "mp0", "mp1",
    "fuse", "mca", "vcn", "jpeg", "ih", "mpio",
)  # fmt: skip


def fault_fits_vendor(fault: FaultType, vendor: str | None) -> bool:
    """Whether a fault can land on a device of this vendor (None: a node without accelerators)."""
    allowed = VENDOR_FAULTS.get(fault)
    return allowed is None or (vendor is not None and vendor in allowed)


# What a campaign's `types: all` means: the hardware, fabric and collective faults. Application faults are listed
# by name, since each needs a workload that reports the series it changes.
INFRASTRUCTURE_FAULTS = [t for t in FaultType if t not in APP_FAULTS]


class FaultSpec(Manifest):
    at: Duration
    type: FaultType
    node: str | None = None
    gpu: int | None = Field(default=None, ge=0)
    rail: int | None = Field(default=None, ge=0)  # NIC index on the node
    job: str | None = None
    rank: int | None = Field(default=None, ge=0)
    service: str | None = None  # an inference service's name, for service faults
    duration: Duration | None = None  # for faults that heal (flaps, power brake, straggler, application faults)
    code: int | None = Field(default=None, ge=1, le=999)  # Xid code for `xid`
    block: str | None = None  # the RAS block for `ras-error` on an AMD GPU (default gfx)
    # slowdown (straggler, slow-input, slo-breach), error-rate multiplier, rate multiplier (traffic-ramp) or the
    # fraction of requests that fail (error-burst)
    factor: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _targets(self) -> FaultSpec:
        t = self.type
        if t in GPU_FAULTS and (self.node is None or self.gpu is None):
            raise ValueError(f"fault {t.value!r} needs `node` and `gpu`")
        if t in PORT_FAULTS and (self.node is None or self.rail is None):
            raise ValueError(f"fault {t.value!r} needs `node` and `rail` (the NIC index)")
        if t in JOB_FAULTS and self.job is None:
            raise ValueError(f"fault {t.value!r} needs `job` (and optionally `rank`)")
        if t in NODE_FAULTS and self.node is None:
            raise ValueError(f"fault {t.value!r} needs `node`")
        if t in SERVICE_FAULTS and self.service is None:
            raise ValueError(f"fault {t.value!r} needs `service` (the inference service's name)")
        if self.service is not None and t not in SERVICE_FAULTS:
            raise ValueError(f"fault {t.value!r} does not take `service`: only service faults do")
        if t is FaultType.error_burst and self.factor is not None and self.factor > 1:
            raise ValueError("fault 'error-burst' takes `factor` as the fraction of requests that fail (0-1]")
        if t in (FaultType.slow_input, FaultType.slo_breach, FaultType.traffic_ramp) and (self.factor or 2) <= 1:
            raise ValueError(f"fault {t.value!r} needs a `factor` above 1 (how many times slower or busier)")
        if t is FaultType.xid and self.code is None:
            raise ValueError("fault 'xid' needs `code` (the Xid number)")
        if self.block is not None and (t is not FaultType.ras_error or self.block not in RAS_BLOCKS):
            raise ValueError(f"`block` is for 'ras-error' and one of: {', '.join(RAS_BLOCKS)}")
        return self


class CampaignSpec(Manifest):
    """Random faults: `per_type` of each listed type at random times and places, reproducible by seed."""

    seed: int = 0
    types: list[FaultType] | Literal["all"] = "all"
    per_type: int = Field(default=3, ge=1)
    start: Duration = 600.0
    end: Duration | None = None  # defaults to the scenario's duration minus 30 minutes
    xid_codes: list[int] = [13, 31, 43, 48, 63, 64, 74, 79, 92, 94, 95, 109, 119, 120]


class TrainingJobSpec(Manifest):
    name: str
    nodes: int | list[str]
    pool: str | None = None  # with a node count: take the nodes from this pool (default: one pool with room)
    gpus_per_node: int | None = None
    model_params_b: float = Field(default=7.0, gt=0)
    tokens_per_step: int = Field(default=4_000_000, gt=0)
    nccl_timeout: Duration = 1800.0
    start: Duration = 0.0
    # what the training loop reports: samples are tokens_per_step / sequence_length per step
    sequence_length: int = Field(default=4096, gt=0)
    learning_rate: float = Field(default=3e-4, gt=0)  # the peak, after warm-up; cosine decay to a tenth of it
    warmup_steps: int = Field(default=100, ge=0)
    total_steps: int = Field(default=100_000, gt=0)  # the planned run, over which the learning rate decays
    eval_every: int = Field(default=50, gt=0)  # steps between validation-loss evaluations
    checkpoint_every: int = Field(default=100, gt=0)  # steps between checkpoints


class InferenceSpec(Manifest):
    name: str
    node: str | None = None
    pool: str | None = None  # without `node`: a node of this pool
    gpus: int = Field(default=1, ge=1)
    requests_per_s: float = Field(default=50.0, gt=0)
    slo_p99: Duration = 0.5
    version: str = Field(default="v1", min_length=1)  # the model version it serves (the `version` label)
    tokens_per_request: float = Field(default=16.0, ge=1)  # generated tokens per request, on average
    capacity_per_gpu: float = Field(default=400.0, gt=0)  # requests/s one GPU serves before requests queue


class WorkloadSpec(Manifest):
    training_jobs: list[TrainingJobSpec] = []
    # Fill the cluster with jobs of this many nodes until this fraction of GPU nodes is busy.
    auto_training_nodes_per_job: int | None = Field(default=None, ge=1)
    auto_training_fill: float = Field(default=0.75, ge=0, le=1)
    inference: list[InferenceSpec] = []
    # What the job controller does with a failed job: restart it (excluding nodes with lost GPUs) or leave it.
    restart_policy: Literal["OnFailure", "Never"] = "OnFailure"
    restart_backoff: Duration = 120.0


class MigSpec(Manifest):
    """GPUs in MIG mode from the start, as mig-parted applies a config: each chosen GPU gets `devices` (profile ->
    instances per GPU, mig-parted's `mig-devices`; empty is MIG on with no instances yet), placed where its
    geometry allows. Training jobs laid out by count stay off these nodes: a full-GPU rank cannot use them."""

    nodes: list[str] = Field(min_length=1)
    gpus: list[Annotated[int, Field(ge=0)]] | None = None  # GPU indices on each node; all of them when absent
    devices: dict[str, Annotated[int, Field(ge=0, le=7)]] = {}


class SharingMode(StrEnum):
    time_slicing = "time-slicing"
    mps = "mps"
    mig = "mig"


# The most clients one GPU takes: MPS allows 48 per GPU from compute capability 7.0 (16 before; the
# nvidia-cuda-mps-control man page); time-slicing is held to the same bound.
MAX_REPLICAS = 48
MAX_REPLICAS_PRE_VOLTA_MPS = 16


def _ordered(name: str, pair: tuple[float, float], low: float, high: float) -> None:
    if not low <= pair[0] <= pair[1] <= high:
        raise ValueError(f"`{name}` is a [min, max] range within {low:g}..{high:g}, min first; got {list(pair)}")


class SharedPodsSpec(Manifest):
    """The pods that come and go on shared GPUs: Poisson arrivals, exponential lifetimes, and what each asks for.
    Each container that asks for a GPU gets one device (a replica, or a MIG instance); the others (sidecars) none."""

    arrivals_per_hour: float = Field(default=6.0, ge=0)
    mean_lifetime: Duration = 1800.0
    initial: int | None = Field(default=None, ge=0)  # pods running at t=0; default: the steady state, as room allows
    containers: tuple[int, int] = (1, 1)  # containers per pod
    gpu_containers: tuple[int, int] = (1, 1)  # of them, how many ask for a GPU
    processes: tuple[int, int] = (1, 1)  # GPU processes per GPU container
    memory_mib: tuple[float, float] = (1024.0, 4096.0)  # each process's GPU memory
    sm_pct: tuple[float, float] = (10.0, 50.0)  # what each process would use of the device alone
    namespaces: list[str] = Field(default=["default"], min_length=1)
    workloads: list[str] = Field(default=["notebook"], min_length=1)  # the owners (Deployments, ...) pods come from
    kind: Literal["Deployment", "StatefulSet", "Job"] = "Deployment"

    @model_validator(mode="after")
    def _ranges(self) -> SharedPodsSpec:
        _ordered("containers", self.containers, 1, 3)
        _ordered("gpuContainers", self.gpu_containers, 1, 2)
        _ordered("processes", self.processes, 1, 2)
        _ordered("memoryMib", self.memory_mib, 1, 1e7)
        _ordered("smPct", self.sm_pct, 0, 100)
        if self.gpu_containers[0] > self.containers[1]:
            raise ValueError("`gpuContainers` cannot exceed `containers`: a pod has at least as many containers")
        if self.mean_lifetime <= 0:
            raise ValueError("`meanLifetime` must be positive")
        return self


class SharingSpec(Manifest):
    """GPUs shared among pods, as the NVIDIA device plugin (or DRA driver) offers them: time-sliced or MPS replicas of
    whole GPUs, or MIG instances (carved by `mig:`), each optionally time-sliced into `replicas`."""

    nodes: list[str] = Field(min_length=1)
    gpus: list[Annotated[int, Field(ge=0)]] | None = None  # GPU indices on each node; all of them when absent
    mode: SharingMode
    replicas: int | None = None  # time-slicing and MPS: 2..48 clients per GPU; MIG: per instance, 1 (exclusive)..48
    profiles: list[str] | None = None  # MIG: which instance profiles this entry covers (default: every instance)
    rename_by_default: bool = False  # the device plugin's renameByDefault: shared resources end in `.shared`
    # kubelets that keep terminated pods in the pod-resources List (kubernetes#119423): an ended pod stays listed,
    # with its devices, and in the node's pod list with phase Succeeded, for `lingerFor`
    linger_terminated: bool = False
    linger_for: Duration = 900.0
    pods: SharedPodsSpec = SharedPodsSpec()

    @model_validator(mode="after")
    def _replicas(self) -> SharingSpec:
        if self.mode is SharingMode.mig:
            if self.replicas is None:
                self.replicas = 1
            if not 1 <= self.replicas <= MAX_REPLICAS:
                raise ValueError(f"replicas of a MIG instance must be 1..{MAX_REPLICAS}, got {self.replicas}")
            return self
        if self.profiles is not None:
            raise ValueError("`profiles` picks MIG instances: it is for `mode: mig` only")
        if self.replicas is None or not 2 <= self.replicas <= MAX_REPLICAS:
            raise ValueError(
                f"{self.mode.value} needs `replicas` between 2 and {MAX_REPLICAS} (clients per GPU), "
                f"got {self.replicas}"
            )
        return self


class ScenarioBody(Manifest):
    cluster: str | ClusterBody  # a path (relative to the scenario file) or an inline cluster spec
    duration: Duration = 86400.0
    tick: Duration = 1.0
    seed: int = 0
    mig: list[MigSpec] = []
    sharing: list[SharingSpec] = []  # GPUs shared among pods (after `mig:` has carved its GPUs)
    workload: WorkloadSpec = WorkloadSpec()
    faults: list[FaultSpec] = []
    campaign: CampaignSpec | None = None

    @model_validator(mode="after")
    def _within(self) -> ScenarioBody:
        for fault in self.faults:
            if fault.at > self.duration:
                raise ValueError(f"a {fault.type.value} fault at {fault.at:g}s is after the end ({self.duration:g}s)")
        if self.tick <= 0:
            raise ValueError("tick must be positive")
        return self


class ScenarioManifest(Manifest):
    api_version: Literal["gpufleet.io/v1"] = Field(alias="apiVersion")
    kind: Literal["Scenario"]
    metadata: Metadata
    spec: ScenarioBody
