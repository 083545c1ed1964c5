"""Pods on the twin's shared GPUs: time-sliced and MPS replicas of whole GPUs, and MIG instances (optionally
time-sliced), with pods arriving and leaving, each container given devices as the NVIDIA device plugin gives them
and each GPU container running processes whose memory and SM time make up the device's own readings.

The device plugin's IDs: a time-sliced or MPS replica is ``GPU-<uuid>::<n>``, a MIG instance ``MIG-<uuid>`` and a
time-sliced instance ``MIG-<uuid>::<n>``; each GPU container asks for one, and no two pods ever hold the same
replica. How the SM time is shared:

- time-slicing: the contexts take turns, so the processes together use at most the whole device; one that wants
  less than an even turn keeps what it wants and the rest is split among the others (max-min fair);
- MPS: clients run at once, each held to the active-thread percentage the plugin sets (100 / replicas);
- MIG: every instance is its own device, time-shared among its own processes.

The device reads what its processes add up to (parts reconcile): utilization is the sum of its processes' SM
time, memory used is their memory plus what the device keeps for itself (the driver, contexts). Everything is
drawn from the twin's seed, apart from the twin's own random stream, so a scenario without sharing is unchanged.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from gpufleet.catalog.mig import COMPUTE_SLICES, mig_profiles_for
from gpufleet.model import Cluster, Gpu, MigInstance
from gpufleet.sim.gpu_state import FB_RESERVED_MIB, GpuArrays
from gpufleet.spec.scenario_spec import SharingMode, SharingSpec

# What a MIG instance uses of its own memory with no process (a real A100 listing: 11 MiB idle, 15 MiB beside a
# process) and what the MPS server's context takes (a real T4 listing: 25 MiB).
MIG_INSTANCE_OVERHEAD_MIB = 13.0
MPS_SERVER_MIB = 25.0
MEM_UTIL_PER_SM = 0.45  # memory-controller activity per unit of SM activity, as the twin's GPUs read it
SM_NOISE = 0.08  # relative noise of what a process asks for, tick to tick

# PIDs: each node numbers its processes within its own block, so PIDs stay unique per node and, for the first
# thousand nodes, across the cluster (an agent reading every node at once keys processes by PID alone); all below
# the kernel's 64-bit pid_max (4194304).
PID_FIRST = 10_000
PID_BLOCK = 4_000
HOLDER_SLOTS = 32  # a block's first PIDs: one per GPU for whole-GPU holders, then one per GPU for MPS servers
SHARED_PIDS = PID_BLOCK - 2 * HOLDER_SLOTS
# the Kubernetes name suffix alphabet (no vowels, no look-alikes): ReplicaSet hashes and pod suffixes
_SUFFIX = "bcdfghjklmnpqrstvwxz2456789"


def pid_block(node_index: int) -> int:
    return PID_FIRST + (node_index % 1000) * PID_BLOCK


def holder_pid(node_index: int, gpu: int) -> int:
    """The PID of the process a whole-GPU holder (a training rank, a service replica) runs on GPU `gpu`."""
    return pid_block(node_index) + gpu % HOLDER_SLOTS


def mps_server_pid(node_index: int, gpu: int) -> int:
    return pid_block(node_index) + HOLDER_SLOTS + gpu % HOLDER_SLOTS


def stable_uid(*parts: object) -> str:
    """A Kubernetes-style UID that is the same every run for the same object."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "gpufleet-twin/" + "/".join(str(p) for p in parts)))


def resource_name(mode: SharingMode, profile: str, replicas: int, rename: bool) -> str:
    """The extended resource the device plugin advertises: nvidia.com/gpu, or nvidia.com/mig-<profile> under the
    mixed strategy ('+' written '.'), with `.shared` when renameByDefault renames a shared resource."""
    base = "nvidia.com/gpu" if mode is not SharingMode.mig else "nvidia.com/mig-" + profile.replace("+", ".")
    return base + ".shared" if rename and replicas > 1 else base


def instance_memory_mib(gpu: Gpu, instance: MigInstance) -> float:
    geometry = gpu.model.mig_geometry or ""
    return mig_profiles_for(geometry)[instance.profile].memory_gib * 1024.0


def instance_compute_slices(gpu: Gpu, instance: MigInstance) -> int:
    return mig_profiles_for(gpu.model.mig_geometry or "")[instance.profile].compute_slices


def device_capacity_mib(gpu: Gpu, instance: MigInstance | None) -> float:
    """What processes may use of a GPU, or of one MIG instance: its memory less what the device keeps."""
    if instance is None:
        return float(gpu.model.memory_mib) - FB_RESERVED_MIB
    return instance_memory_mib(gpu, instance) - MIG_INSTANCE_OVERHEAD_MIB


def time_share(demands: Sequence[float], capacity: float = 100.0) -> list[float]:
    """Max-min fair shares of `capacity` (round-robin time slices): who wants less than an even share keeps it."""
    out = [0.0] * len(demands)
    left, waiting = capacity, len(demands)
    for i in sorted(range(len(demands)), key=lambda j: demands[j]):
        give = min(demands[i], left / waiting)
        out[i] = give
        left -= give
        waiting -= 1
    return out


@dataclass(frozen=True, slots=True)
class ShareGroup:
    """One `sharing:` entry with the devices it covers: (node, GPU index, MIG GPU-instance ID or None)."""

    spec: SharingSpec
    devices: tuple[tuple[str, int, int | None], ...]


@dataclass(slots=True)
class SharedDevice:
    """A GPU or MIG instance whose replicas pods are given."""

    node: str
    node_index: int
    k: int  # the GPU's index in the twin's arrays
    gpu: int  # its index on the node
    uuid: str  # the GPU's
    mode: SharingMode
    replicas: int
    resource: str
    capacity_mib: float
    group: int
    instance: int = -1  # the MIG instance (index into Instances); -1: the whole GPU
    mig_uuid: str = ""
    gi_id: int | None = None
    holders: list[SimContainer | None] = field(default_factory=list)  # per replica

    def __post_init__(self) -> None:
        self.holders = [None] * self.replicas

    def device_id(self, replica: int) -> str:
        base = self.mig_uuid or self.uuid
        if self.mode is SharingMode.mig and self.replicas == 1:
            return base
        return f"{base}::{replica}"

    @property
    def device_ids(self) -> list[str]:
        return [self.device_id(r) for r in range(self.replicas)]

    @property
    def free(self) -> int:
        return sum(1 for h in self.holders if h is None)


@dataclass(slots=True)
class SimProcess:
    pid: int
    device: SharedDevice
    memory_mib: float
    demand_pct: float  # the SM time it would take of the device alone
    name: str = "python3"
    sm_util: float = 0.0
    mem_util: float = 0.0


@dataclass(slots=True)
class SimContainer:
    name: str
    container_id: str  # 64 hex digits, as containerd names it
    device: SharedDevice | None = None
    replica: int = -1
    processes: list[SimProcess] = field(default_factory=list)

    @property
    def device_id(self) -> str:
        return self.device.device_id(self.replica) if self.device is not None else ""


@dataclass(slots=True)
class SimPod:
    name: str
    namespace: str
    uid: str
    node: str
    owner_kind: str  # ReplicaSet, StatefulSet or Job
    owner_name: str
    containers: list[SimContainer]
    group: int
    started: float
    ends: float
    phase: str = "Running"  # Running, or Succeeded/Failed while a terminated pod lingers
    gone_at: float = math.inf  # when a lingering terminated pod leaves the lists

    @property
    def running(self) -> bool:
        return self.phase == "Running"

    @property
    def workload(self) -> str:
        """The workload it belongs to: a ReplicaSet's Deployment, the StatefulSet, the Job."""
        return self.owner_name.rsplit("-", 1)[0] if self.owner_kind == "ReplicaSet" else self.owner_name

    @property
    def processes(self) -> list[SimProcess]:
        return [p for c in self.containers for p in c.processes]


@dataclass(slots=True)
class Instances:
    """Every MIG instance of the twin with its own readings: utilization (percent of the instance), memory used
    and memory-controller activity."""

    k: list[int] = field(default_factory=list)
    gi_id: list[int] = field(default_factory=list)
    uuid: list[str] = field(default_factory=list)
    profile: list[str] = field(default_factory=list)
    memory_mib: list[float] = field(default_factory=list)
    compute_slices: list[int] = field(default_factory=list)
    util: np.ndarray = field(default_factory=lambda: np.zeros(0))
    fb_used_mib: np.ndarray = field(default_factory=lambda: np.zeros(0))
    mem_util: np.ndarray = field(default_factory=lambda: np.zeros(0))
    of_gpu: dict[int, list[int]] = field(default_factory=dict)  # GPU (k) -> its instances, in GI order

    def add(self, k: int, gpu: Gpu, inst: MigInstance) -> None:
        self.of_gpu.setdefault(k, []).append(len(self.k))
        self.k.append(k)
        self.gi_id.append(inst.gi_id)
        self.uuid.append(inst.uuid)
        self.profile.append(inst.profile)
        self.memory_mib.append(instance_memory_mib(gpu, inst))
        self.compute_slices.append(instance_compute_slices(gpu, inst))

    def seal(self) -> None:
        n = len(self.k)
        self.util = np.zeros(n)
        self.fb_used_mib = np.full(n, MIG_INSTANCE_OVERHEAD_MIB)
        self.mem_util = np.zeros(n)


class SharedPods:
    """The pods on shared GPUs, stepped with the twin."""

    def __init__(
        self,
        cluster: Cluster,
        gpu_index: dict[tuple[str, int], int],
        gpus: GpuArrays,
        groups: Sequence[ShareGroup] = (),
        seed: int = 0,
    ) -> None:
        self.cluster = cluster
        self.gpus = gpus
        self.groups = list(groups)
        self.rng = np.random.default_rng([seed, 0x5A7E])  # apart from the twin's stream
        self.node_index = {n.name: i for i, n in enumerate(cluster.nodes)}
        self.instances = Instances()
        for node in cluster.nodes:
            for g in node.gpus:
                if g.mig_enabled:
                    for inst in g.mig_instances:
                        self.instances.add(gpu_index[(node.name, g.index)], g, inst)
        self.instances.seal()
        self.devices: list[SharedDevice] = []
        for gi, group in enumerate(self.groups):
            for node_name, index, gi_id in group.devices:
                self.devices.append(self._device(node_name, index, gi_id, gi, group.spec, gpu_index))
        self.by_group: list[list[SharedDevice]] = [
            [d for d in self.devices if d.group == g] for g in range(len(groups))
        ]
        self.shared = {d.k for d in self.devices}  # GPUs (k) kept for sharing
        self.shared_gpus = np.array(sorted(self.shared), dtype=np.int64)
        self.mps_gpus = {d.k for d in self.devices if d.mode is SharingMode.mps}
        self.pods: list[SimPod] = []
        self.version = 0  # bumps whenever a pod comes, ends or leaves the lists
        self.rejected = 0  # pods that found no room (all replicas taken)
        self._cached: _Layout | None = None
        self._pid_next: dict[str, int] = {}
        self._rs_hash: dict[tuple[str, str], str] = {}
        self._jobs = 0
        for n, group in enumerate(self.groups):
            wanted = group.spec.pods
            initial = wanted.initial
            if initial is None:
                capacity = sum(d.replicas for d in self.by_group[n])
                initial = min(round(wanted.arrivals_per_hour * wanted.mean_lifetime / 3600.0), capacity)
            for _ in range(initial):
                self._admit(n, 0.0)
        self._write_readings()

    def _device(
        self,
        node_name: str,
        index: int,
        gi_id: int | None,
        group: int,
        spec: SharingSpec,
        gpu_index: dict[tuple[str, int], int],
    ) -> SharedDevice:
        gpu = self.cluster.node(node_name).gpus[index]
        k = gpu_index[(node_name, index)]
        replicas = spec.replicas or 1
        if gi_id is None:
            res = resource_name(spec.mode, "", replicas, spec.rename_by_default)
            return SharedDevice(
                node_name, self.node_index[node_name], k, index, gpu.uuid, spec.mode, replicas, res,
                device_capacity_mib(gpu, None), group,
            )  # fmt: skip
        inst = next(i for i in gpu.mig_instances if i.gi_id == gi_id)
        position = next(i for i in self.instances.of_gpu[k] if self.instances.gi_id[i] == gi_id)
        return SharedDevice(
            node_name, self.node_index[node_name], k, index, gpu.uuid, spec.mode, replicas,
            resource_name(spec.mode, inst.profile, replicas, spec.rename_by_default),
            device_capacity_mib(gpu, inst), group, position, inst.uuid, gi_id,
        )  # fmt: skip

    # --- the loop ------------------------------------------------------------------------------------------------

    def step(self, now: float, dt: float) -> None:
        if not self.groups:
            return
        alive = self.gpus.alive
        all_alive = bool(alive[self.shared_gpus].all())
        for pod in list(self.pods):
            if pod.running:
                lost = not all_alive and any(c.device is not None and not alive[c.device.k] for c in pod.containers)
                if lost or now >= pod.ends:
                    self.finish(pod, now, "Failed" if lost else "Succeeded")
            elif now >= pod.gone_at:
                self.pods.remove(pod)
                self.version += 1
        for g, group in enumerate(self.groups):
            rate = group.spec.pods.arrivals_per_hour / 3600.0
            if rate > 0:
                for _ in range(int(self.rng.poisson(rate * dt))):
                    self._admit(g, now)
        self._write_readings()

    def finish(self, pod: SimPod, now: float, phase: str) -> None:
        """A pod ends: its replicas are free at once; it leaves the lists, or lingers terminated if its kubelet
        keeps such pods."""
        if not pod.running:
            return
        for c in pod.containers:
            if c.device is not None:
                c.device.holders[c.replica] = None
            c.processes = []
        spec = self.groups[pod.group].spec
        if spec.linger_terminated:
            pod.phase, pod.gone_at = phase, now + spec.linger_for
        else:
            self.pods.remove(pod)
        self.version += 1

    def evict_node(self, node: str, now: float) -> None:
        """A drained or rebooting node's pods are evicted."""
        for pod in [p for p in self.pods if p.node == node and p.running]:
            self.finish(pod, now, "Failed")

    def running_pods(self, node: str | None = None) -> list[SimPod]:
        return [p for p in self.pods if p.running and (node is None or p.node == node)]

    def listed_pods(self, node: str | None = None) -> list[SimPod]:
        """What the node's pod list holds: running pods, and terminated ones that linger."""
        return [p for p in self.pods if node is None or p.node == node]

    def culprit(self, k: int) -> tuple[int, str] | None:
        """The first process on GPU `k` (any of its MIG instances), as an Xid line names it."""
        for pod in self.pods:
            for proc in pod.processes:
                if proc.device.k == k:
                    return proc.pid, proc.name
        return None

    # --- arrivals ------------------------------------------------------------------------------------------------

    def _admit(self, g: int, now: float) -> SimPod | None:
        spec = self.groups[g].spec.pods
        rng = self.rng
        n_containers = int(rng.integers(spec.containers[0], spec.containers[1] + 1))
        n_gpu = min(int(rng.integers(spec.gpu_containers[0], spec.gpu_containers[1] + 1)), n_containers)
        placed = self._place(g, n_gpu)
        if placed is None:
            self.rejected += 1
            return None
        node = placed[0][0].node
        namespace = str(rng.choice(spec.namespaces))
        workload = str(rng.choice(spec.workloads))
        name, owner_kind, owner_name = self._name(spec.kind, namespace, workload, node)
        uid = str(uuid.UUID(bytes=rng.bytes(16), version=4))
        containers: list[SimContainer] = []
        gpu_names = ("main", "worker")
        side_names = ("istio-proxy", "log-shipper")
        for c in range(n_containers):
            cid = rng.bytes(32).hex()
            if c < n_gpu:
                device, replica = placed[c]
                container = SimContainer(gpu_names[c], cid, device, replica)
                device.holders[replica] = container
                for _ in range(int(rng.integers(spec.processes[0], spec.processes[1] + 1))):
                    memory = float(round(rng.uniform(spec.memory_mib[0], spec.memory_mib[1])))
                    demand = float(rng.uniform(spec.sm_pct[0], spec.sm_pct[1]))
                    container.processes.append(SimProcess(self._pid(node), device, memory, demand))
            else:
                container = SimContainer(side_names[c - n_gpu], cid)
            containers.append(container)
        lifetime = max(1.0, float(rng.exponential(self.groups[g].spec.pods.mean_lifetime)))
        pod = SimPod(name, namespace, uid, node, owner_kind, owner_name, containers, g, now, now + lifetime)
        self.pods.append(pod)
        self.version += 1
        return pod

    def _place(self, g: int, n_gpu: int) -> list[tuple[SharedDevice, int]] | None:
        """Replicas for `n_gpu` containers on one node, spread over the devices with the most room (the device
        plugin's distributed policy); None when no schedulable node has room."""
        alive = self.gpus.alive
        room: dict[str, list[SharedDevice]] = {}
        for d in self.by_group[g]:
            if alive[d.k] and d.free and not self.cluster.node(d.node).unschedulable:
                room.setdefault(d.node, []).append(d)
        best = max(room.items(), key=lambda kv: sum(d.free for d in kv[1]), default=None)
        if best is None or sum(d.free for d in best[1]) < n_gpu:
            return None
        free = {id(d): d.free for d in best[1]}
        out: list[tuple[SharedDevice, int]] = []
        taken: set[tuple[int, int]] = set()
        for _ in range(n_gpu):
            device = max(best[1], key=lambda d: free[id(d)])
            replica = next(r for r, h in enumerate(device.holders) if h is None and (id(device), r) not in taken)
            taken.add((id(device), replica))
            free[id(device)] -= 1
            out.append((device, replica))
        return out

    def _name(self, kind: str, namespace: str, workload: str, node: str) -> tuple[str, str, str]:
        """A pod name as its controller makes it, unique among the pods listed in its namespace."""
        taken = {p.name for p in self.pods if p.namespace == namespace}
        if kind == "StatefulSet":
            ordinal = next(i for i in range(len(taken) + 1) if f"{workload}-{i}" not in taken)
            return f"{workload}-{ordinal}", "StatefulSet", workload
        while True:
            suffix = "".join(self.rng.choice(list(_SUFFIX), 5))
            if kind == "Job":
                self._jobs += 1
                job = f"{workload}-{self._jobs}"
                name, owner = f"{job}-{suffix}", job
            else:
                rs = self._rs_hash.get((namespace, workload))
                if rs is None:  # one ReplicaSet (its pod-template hash) per Deployment
                    rs = self._rs_hash[(namespace, workload)] = "".join(self.rng.choice(list(_SUFFIX), 10))
                owner = f"{workload}-{rs}"
                name = f"{owner}-{suffix}"
            if name not in taken:
                return name, "Job" if kind == "Job" else "ReplicaSet", owner

    def _pid(self, node: str) -> int:
        """The next free PID of the node's block (PIDs are reused once their process is gone)."""
        base = pid_block(self.node_index[node]) + 2 * HOLDER_SLOTS
        live = {p.pid for pod in self.pods if pod.node == node for p in pod.processes}
        n = self._pid_next.get(node, 0)
        while base + n % SHARED_PIDS in live:
            n += 1
        self._pid_next[node] = n + 1
        return base + n % SHARED_PIDS

    # --- what the devices read -----------------------------------------------------------------------------------

    def _layout(self) -> _Layout:
        """Who runs where, rebuilt when the pods change: the busy devices with their processes (in one flat order
        for the tick's noise), and each GPU's memory, which stays put while its processes do."""
        if self._cached is not None and self._cached.version == self.version:
            return self._cached
        procs: dict[int, list[SimProcess]] = {}
        for pod in self.pods:
            for proc in pod.processes:
                procs.setdefault(id(proc.device), []).append(proc)
        busy: list[tuple[SharedDevice, list[SimProcess], int]] = []
        flat: list[SimProcess] = []
        fb: dict[int, float] = {}
        for d in self.devices:
            mine = procs.get(id(d), [])
            memory = sum(p.memory_mib for p in mine)
            if d.instance >= 0:
                self.instances.fb_used_mib[d.instance] = MIG_INSTANCE_OVERHEAD_MIB + memory
                self.instances.util[d.instance] = self.instances.mem_util[d.instance] = 0.0
            elif d.mode is SharingMode.mps and mine:
                memory += MPS_SERVER_MIB  # the MPS server's own context, beside its clients
            fb[d.k] = fb.get(d.k, 0.0) + memory
            if mine:
                busy.append((d, mine, len(flat)))
                flat += mine
        self._cached = _Layout(self.version, busy, flat, np.array([p.demand_pct for p in flat]), fb)
        return self._cached

    def _write_readings(self) -> None:
        """Each process's SM time this tick, and the devices' readings that follow from them."""
        if not self.devices:
            return
        layout = self._layout()
        wants = (layout.demands * (1.0 + self.rng.normal(0.0, SM_NOISE, len(layout.flat)))).clip(0.0, 100.0)
        wanted = wants.tolist()
        g, inst = self.gpus, self.instances
        util_of = dict.fromkeys(layout.fb, 0.0)
        for d, mine, at in layout.busy:
            demands = wanted[at : at + len(mine)]
            if d.mode is SharingMode.mps:
                limit = 100.0 / d.replicas  # the active-thread percentage the plugin gives each client
                shares = [min(x, limit) for x in demands]
                total = sum(shares)
                if total > 100.0:
                    shares = [x * 100.0 / total for x in shares]
            elif len(demands) == 1:
                shares = [min(demands[0], 100.0)]
            else:
                shares = time_share(demands)
            for p, x in zip(mine, shares, strict=True):
                p.sm_util, p.mem_util = x, x * MEM_UTIL_PER_SM
            util = min(100.0, sum(shares))
            if d.instance >= 0:
                inst.util[d.instance] = util
                inst.mem_util[d.instance] = util * MEM_UTIL_PER_SM
                util_of[d.k] += util * inst.compute_slices[d.instance] / COMPUTE_SLICES
            else:
                util_of[d.k] = util
        ks = np.fromiter(util_of, dtype=np.int64, count=len(util_of))
        g.demand_util[ks] = np.fromiter(util_of.values(), dtype=np.float64, count=len(ks))
        g.demand_fb_mib[ks] = np.fromiter(layout.fb.values(), dtype=np.float64, count=len(ks))
        g.allocated[self.shared_gpus] = True  # kept for sharing: no whole-GPU work lands there


@dataclass(slots=True)
class _Layout:
    version: int
    busy: list[tuple[SharedDevice, list[SimProcess], int]]  # (device, its processes, where they start in flat)
    flat: list[SimProcess]
    demands: np.ndarray
    fb: dict[int, float]  # GPU (k) -> its processes' memory
