"""Workloads: pods, gangs, training jobs and inference services, and every way they ask for GPUs."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from gpufleet.model.node import TaintEffect


class GpuSharing(StrEnum):
    exclusive = "exclusive"  # whole GPUs (nvidia.com/gpu)
    mig = "mig"  # a MIG profile (nvidia.com/mig-1g.10gb)
    time_slicing = "time-slicing"  # a replica of a time-sliced GPU
    mps = "mps"  # an MPS replica with memory and thread limits
    milli = "milli"  # a share of one GPU in 1/1000 (the openb trace's gpu_milli)
    dra = "dra"  # DRA ResourceClaims


@dataclass(frozen=True, slots=True)
class GpuRequest:
    """How many GPUs, or which slice of one, a pod asks for."""

    sharing: GpuSharing = GpuSharing.exclusive
    count: int = 0  # whole GPUs, MIG instances or replicas
    mig_profile: str | None = None
    milli: int = 1000  # per-GPU share for `milli`
    mps_memory_limit_mib: int | None = None
    mps_thread_percentage: int | None = None
    claims: tuple[str, ...] = ()  # ResourceClaim names for `dra`
    models: tuple[str, ...] = ()  # allowed GPU models (openb gpu_spec); empty = any
    vendor: str = "nvidia"  # whose accelerators (catalog vendor name): nvidia.com/gpu, amd.com/gpu, habana.ai/gaudi

    @property
    def gpu_milli_total(self) -> int:
        if self.sharing is GpuSharing.milli:
            return self.milli * max(self.count, 1)
        if self.sharing is GpuSharing.exclusive:
            return 1000 * self.count
        return 0


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""  # empty key with Exists tolerates every taint
    operator: str = "Equal"  # Equal or Exists
    value: str = ""
    effect: TaintEffect | None = None  # None tolerates every effect


@dataclass(frozen=True, slots=True)
class SelectorRequirement:
    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist, Gt, Lt
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PreferredTerm:
    weight: int
    requirements: tuple[SelectorRequirement, ...]


@dataclass(frozen=True, slots=True)
class NodeAffinity:
    # Terms are ORed; requirements within a term are ANDed (as in Kubernetes).
    required: tuple[tuple[SelectorRequirement, ...], ...] = ()
    preferred: tuple[PreferredTerm, ...] = ()


class PodPhase(StrEnum):
    pending = "Pending"
    running = "Running"
    succeeded = "Succeeded"
    failed = "Failed"


@dataclass(slots=True)
class Pod:
    name: str
    namespace: str = "default"
    cpu_milli: int = 0
    memory_mib: int = 0
    gpu: GpuRequest = field(default_factory=GpuRequest)
    tolerations: tuple[Toleration, ...] = ()
    node_selector: dict[str, str] = field(default_factory=dict)
    affinity: NodeAffinity | None = None
    priority: int = 0
    queue: str = "default"
    gang: str | None = None
    phase: PodPhase = PodPhase.pending
    node: str | None = None
    gpu_indices: tuple[int, ...] = ()  # which GPUs of the node it holds
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class Gang:
    """All-or-nothing group: at least `min_member` pods must be placed together."""

    name: str
    min_member: int
    pods: list[str] = field(default_factory=list)
    queue: str = "default"
    priority: int = 0


class JobState(StrEnum):
    pending = "Pending"
    running = "Running"
    hung = "Hung"  # a collective is stuck; NCCL's watchdog has not fired yet
    failed = "Failed"
    completed = "Completed"


@dataclass(slots=True)
class TrainingJob:
    """A data-parallel training job: one rank per GPU across `nodes`."""

    name: str
    nodes: list[str]
    gpus_per_node: int
    model_params_b: float = 7.0  # billions of parameters; sets gradient bytes per step
    tokens_per_step: int = 4_000_000
    gpu_memory_fraction: float = 0.85
    nccl_timeout_s: float = 1800.0  # PyTorch ProcessGroupNCCL default
    state: JobState = JobState.pending
    step: int = 0
    last_step_time: float = 0.0
    step_time_s: float = 0.0
    queue: str = "default"
    priority: int = 0
    excluded_nodes: list[str] = field(default_factory=list)
    restarts: int = 0
    # what its training loop reports about itself
    sequence_length: int = 4096  # tokens per sample
    learning_rate: float = 3e-4  # peak, after warm-up
    warmup_steps: int = 100
    total_steps: int = 100_000  # the planned run: the cosine schedule reaches its floor here
    eval_every: int = 50  # steps between validation-loss evaluations
    checkpoint_every: int = 100  # steps between checkpoints

    @property
    def samples_per_step(self) -> int:
        return max(1, round(self.tokens_per_step / self.sequence_length))

    @property
    def world_size(self) -> int:
        return len(self.nodes) * self.gpus_per_node

    @property
    def gradient_bytes(self) -> int:
        """bf16 gradients all-reduced every step."""
        return int(self.model_params_b * 1e9 * 2)


@dataclass(slots=True)
class InferenceService:
    name: str
    node: str
    gpu_indices: tuple[int, ...]
    requests_per_s: float = 50.0
    base_latency_s: float = 0.08  # a request's mean duration, unloaded, at full clocks
    slo_p99_s: float = 0.5
    version: str = "v1"  # the model version served
    tokens_per_request: float = 16.0  # generated per request, on average
    capacity_per_gpu: float = 400.0  # requests/s a GPU serves before requests queue
