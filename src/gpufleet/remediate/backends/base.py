"""The interface every remediation backend implements (what it answers), and one capability mixin per thing a
backend can do to a node or a job."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpufleet.errors import BackendError

if TYPE_CHECKING:
    from gpufleet.fabric.topology import Topology
    from gpufleet.remediate.config import EvictionSpec


class UnsupportedActionError(BackendError):
    """The backend cannot carry out this action: it lacks the capability (a GPU reset through the Slurm controller)
    or the configuration for it (no diag command)."""


@dataclass(frozen=True, slots=True)
class NodeLocation:
    """Where a node sits, for per-rack and per-leaf budgets. Empty when the backend does not know."""

    rack: str = ""
    leaf: str = ""


@dataclass(frozen=True, slots=True)
class DiagResult:
    passed: bool
    detail: str


class RemediationBackend(ABC):
    """What every backend answers: the cluster's clock, nodes, where they sit and which are out of service. What it
    can do to a node comes from the capability mixins below; the engine asks `isinstance(backend, Capability)`
    before it acts, and a backend without one is asked to explain (`cannot`)."""

    name: str = ""

    @abstractmethod
    def now(self) -> float:
        """The cluster clock in seconds (twin time for the twin, wall time otherwise)."""

    @abstractmethod
    def nodes(self) -> list[str]: ...

    @abstractmethod
    def placement(self) -> dict[str, NodeLocation]: ...

    @abstractmethod
    def unavailable(self) -> set[str]:
        """Nodes out of service now: cordoned, drained, draining or rebooting."""

    @abstractmethod
    def node_ready(self, node: str) -> bool:
        """The node is up and answering (after a reboot)."""

    def cannot(self, action: str, node: str, fix: str) -> UnsupportedActionError:
        """The error for an action this backend has no capability for (`action` reads "reset GPU 3")."""
        return UnsupportedActionError(f"the {self.name or 'configured'} backend cannot {action} on {node}", fix=fix)

    def gpu_count(self, node: str) -> int:
        return 0

    def gpu_model(self, node: str) -> str:
        return ""

    def cost_per_gpu_hour(self, node: str) -> float | None:
        return None

    def gpu_serial(self, node: str, index: int) -> str | None:
        return None


# --- capabilities: a backend lists those it has among its bases ----------------------------------------------


class Cordons(ABC):
    """Takes a node out of scheduling and returns it, remembering whose cordon it is (gpufleet.remediate.backends.
    cordons): `incident` is the incident taking the node out or returning it, None for a person acting through the
    API. A node already cordoned by someone else stays theirs, and an incident's uncordon returns the node only when
    its cordon was the last one holding it."""

    @abstractmethod
    def cordon(self, node: str, reason: str, incident: str | None) -> str: ...

    @abstractmethod
    def uncordon(self, node: str, incident: str | None) -> str:
        """`incident` None: a person returns the node whoever cordoned it (their call; the control plane audits
        it)."""


class LabelsNodes(ABC):
    """Writes the node labels gpufleet owns (the fabric topology's, gpufleet.control.fabric_topology) and no
    other."""

    @abstractmethod
    def topology_labels(
        self, topology: Topology, previous: Mapping[str, Mapping[str, str]] | None = None
    ) -> Mapping[str, Mapping[str, str]]:
        """The labels each host of `topology` should carry (this backend's keys for each tier); `previous`, the
        labels in force, keeps a switch group's name when one of its switches is lost."""

    @abstractmethod
    def label_node(self, node: str, labels: Mapping[str, str | None]) -> str:
        """Write `labels` (each key's value, None to remove it); every label not named stays as it is. What was
        written; "" when the node carried those values already (nothing written)."""


class KeepsHyperNodes(ABC):
    """Keeps Volcano's HyperNode objects (topology.volcano.sh) to the ones gpufleet wants: creates the missing,
    replaces the changed and deletes the stale among those gpufleet created (its managed-by label); a HyperNode
    someone else made is never touched."""

    @abstractmethod
    def sync_hypernodes(self, desired: Sequence[Mapping[str, Any]], *, dry_run: bool = False) -> list[str]:
        """Make the cluster's HyperNodes `desired`; what was done to each (or, in a dry run, what would be), in the
        order done. Empty when they were as desired already."""


class WritesTopologyConf(ABC):
    """Replaces the scheduler's topology file (Slurm's topology.conf) and has the scheduler read it again."""

    @abstractmethod
    def write_topology_conf(self, path: Path, text: str, *, retry: bool = False) -> str:
        """Write `text` to `path` atomically (a file beside it, renamed over it) and reconfigure the scheduler. What
        was done; "" when the file held `text` already (nothing written, nothing reconfigured), unless `retry` (the
        last try failed, perhaps after its write: reconfigure all the same)."""


class Drains(ABC):
    @abstractmethod
    def drain(self, node: str, reason: str, incident: str | None) -> str:
        """Cordon the node (recorded as `incident`'s, as `Cordons.cordon`) and move all its work away."""


# Who holds each GPU of a node now, as its agent reports it (MetricSnapshot.held): GPU index -> "namespace/pod", ""
# for a GPU no one pod holds whole (free, or shared by several through time-slicing, MPS or MIG). None when the node's
# agent has not reported it. The control plane hands one to a backend that evicts per GPU.
GpuHolders = Callable[[str], "dict[int, str] | None"]


class EvictsGpuWork(ABC):
    """Evicts only the work on one GPU and leaves the node's other work running: the drain for a fault confined to
    one GPU (the engine decides the scope, gpufleet.remediate.scope). The node is not cordoned by it; a runbook that
    wants that says so with its own cordon step."""

    gpu_holders: GpuHolders | None = None

    @abstractmethod
    def drain_gpu(self, node: str, index: int, reason: str, eviction: EvictionSpec) -> str: ...


class ResetsGpus(ABC):
    @abstractmethod
    def reset_gpu(self, node: str, index: int) -> str: ...


class RebootsNodes(ABC):
    @abstractmethod
    def reboot_node(self, node: str, reason: str) -> str: ...


class RunsDiagnostics(ABC):
    @abstractmethod
    def run_diag(self, node: str, level: int) -> DiagResult: ...


class CapsPower(ABC):
    @abstractmethod
    def set_power_limit(self, node: str, index: int | None, fraction: float) -> str:
        """Cap one GPU (or all of a node's GPUs when index is None) at `fraction` of its TDP."""


class IsolatesPorts(ABC):
    @abstractmethod
    def isolate_port(self, node: str, rail: int) -> str: ...


class IsolatesFabricPorts(ABC):
    """Takes a switch port out of service and back (UFM's port isolation; `ibportstate LID PORT disable`). The
    switch port facing a bad cable is what isolates it, whichever end counted the errors."""

    @abstractmethod
    def set_switch_port(self, switch: str, port: int, lid: int | None, *, enable: bool) -> str: ...


class RequeuesJobs(ABC):
    @abstractmethod
    def requeue_job(self, job: str, exclude: list[str]) -> str: ...
