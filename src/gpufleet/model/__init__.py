"""The model: plain data every other part speaks in. No I/O."""

from gpufleet.model.cluster import Cluster, NodePool
from gpufleet.model.fabric import Fabric, Link, Nic, Port, PortState, Switch, Transport
from gpufleet.model.gpu import Gpu, GpuHealth, MigInstance
from gpufleet.model.incident import Evidence, Incident, IncidentState, RootCause, Severity
from gpufleet.model.node import (
    GPU_RESOURCE,
    Node,
    NodeCondition,
    SoftwareFacts,
    Taint,
    TaintEffect,
)
from gpufleet.model.observation import Entity, EntityKind, Event, Sample
from gpufleet.model.workload import (
    Gang,
    GpuRequest,
    GpuSharing,
    InferenceService,
    JobState,
    NodeAffinity,
    Pod,
    PodPhase,
    PreferredTerm,
    SelectorRequirement,
    Toleration,
    TrainingJob,
)

__all__ = [
    "GPU_RESOURCE",
    "Cluster",
    "Entity",
    "EntityKind",
    "Event",
    "Evidence",
    "Fabric",
    "Gang",
    "Gpu",
    "GpuHealth",
    "GpuRequest",
    "GpuSharing",
    "Incident",
    "IncidentState",
    "InferenceService",
    "JobState",
    "Link",
    "MigInstance",
    "Nic",
    "Node",
    "NodeAffinity",
    "NodeCondition",
    "NodePool",
    "Pod",
    "PodPhase",
    "Port",
    "PortState",
    "PreferredTerm",
    "RootCause",
    "Sample",
    "SelectorRequirement",
    "Severity",
    "SoftwareFacts",
    "Switch",
    "Taint",
    "TaintEffect",
    "Toleration",
    "TrainingJob",
    "Transport",
]
