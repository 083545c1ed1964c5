"""What a twin node answers when the agent asks who uses its GPUs, in the forms a real node gives them: the kubelet's
pod-resources answers (List, GetAllocatableResources) and its pod list (`/pods`, a v1 PodList), NVML's compute
processes, and each process's `/proc/<pid>/cgroup` (containerd with the systemd cgroup driver, cgroup v2).

Every GPU holder is a pod here, so every one goes through the same readers: the pods on shared GPUs (sim/pods.py),
each training job's ranks on a node (one pod per job and node, one process per GPU), each inference service (one
pod, one process per GPU), a GPU an idle-gpu fault holds (a pod with no process), and, on a node with MPS, the
device plugin's MPS control daemon, whose `nvidia-cuda-mps-server` is a compute process of its own on every MPS
GPU with clients (as nvidia-smi lists it beside the clients).

The agent reads these answers with its real readers (`attribution_source.py`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np

from gpufleet.model import JobState
from gpufleet.model.attribution import GpuProcess
from gpufleet.sim.gpu_state import FB_RESERVED_MIB
from gpufleet.sim.pods import (
    MPS_SERVER_MIB,
    SharedDevice,
    SimPod,
    holder_pid,
    mps_server_pid,
    stable_uid,
)
from gpufleet.sim.twin import Twin
from gpufleet.spec.scenario_spec import SharingMode

MPS_DAEMON = "nvidia-device-plugin-mps-control-daemon"  # the device plugin's MPS DaemonSet
MPS_NAMESPACE = "gpu-operator"
MPS_CONTAINER = "mps-control-daemon-ctr"
WHOLE_GPU = "nvidia.com/gpu"


@dataclass(frozen=True, slots=True)
class Holder:
    """A whole-GPU holder: the pod and container holding a GPU, and the workload that owns the pod."""

    pod: str
    namespace: str
    container: str
    workload: str
    owner_kind: str = ""
    owner_api: str = ""
    generation: int = 0  # a restarted job's pods are new pods


def whole_gpu_holders(twin: Twin) -> dict[int, Holder]:
    """GPU (the twin's index) -> the training rank, service replica or idle reservation holding it whole."""
    out: dict[int, Holder] = {}
    ts = twin.training
    for j, job in enumerate(ts.jobs):
        if job.state in (JobState.running, JobState.hung):
            for k in ts.ranks_of(j):
                node = twin.cluster.nodes[int(twin.gpus.node_of[k])].name
                out[int(k)] = Holder(
                    f"{job.name}-{node}", "training", "trainer", job.name, "PyTorchJob", "kubeflow.org/v1", job.restarts
                )
    for st in twin.services:
        name = st.service.name
        for k in st.gpus:
            out[int(k)] = Holder(f"{name}-0", "inference", "server", name, "StatefulSet", "apps/v1")
    for k in np.flatnonzero(twin.idle_override):
        if int(k) not in twin.pods.shared:
            out.setdefault(int(k), Holder(f"reserved-{int(k)}", "default", "idle", ""))
    return out


def holders_layout(twin: Twin) -> tuple[object, ...]:
    """What the whole-GPU holders depend on: equal layouts, equal holders."""
    return (
        tuple((j.name, j.state, tuple(j.nodes), j.restarts) for j in twin.cluster.jobs),
        tuple(st.service.name for st in twin.services),
        int(np.count_nonzero(twin.idle_override)),
    )


# ---- one node's pods, as views -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ContainerView:
    name: str
    container_id: str
    devices: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (resource, device IDs)


@dataclass(frozen=True, slots=True)
class PodView:
    name: str
    namespace: str
    uid: str
    node: str
    qos: str  # Guaranteed, Burstable, BestEffort
    containers: tuple[ContainerView, ...]
    owner: tuple[str, str, str] | None = None  # (apiVersion, kind, name)
    phase: str = "Running"
    started: float = 0.0
    labels: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class ProcessSlot:
    """Where a process runs and whose it is; its readings are taken when the processes are read."""

    pid: int
    node: str
    k: int  # the GPU's index in the twin's arrays
    uuid: str
    gi_id: int | None
    container_id: str
    cgroup: str
    kind: str  # holder, shared, mps-server
    source: object = None  # the SimProcess of a shared pod


def container_id(pod_uid: str, container: str) -> str:
    return hashlib.sha256(f"{pod_uid}/{container}".encode()).hexdigest()


def cgroup_text(pod_uid: str, qos: str, cid: str) -> str:
    """`/proc/<pid>/cgroup` on cgroup v2 for a containerd container under the kubelet's systemd driver: each "-"
    of the UID written "_", Guaranteed pods directly under kubepods.slice."""
    uid = pod_uid.replace("-", "_")
    if qos == "Guaranteed":
        path = f"/kubepods.slice/kubepods-pod{uid}.slice"
    else:
        level = qos.lower()
        path = f"/kubepods.slice/kubepods-{level}.slice/kubepods-{level}-pod{uid}.slice"
    return f"0::{path}/cri-containerd-{cid}.scope\n"


class NodeAnswers:
    """The pods, processes and cgroups of one twin node (or of every node, `node=None`), rebuilt when the twin's
    holders change."""

    def __init__(self, twin: Twin, node: str | None = None) -> None:
        self.twin = twin
        self.node = node
        if node is not None:
            twin.cluster.node(node)
        self._key: object = None
        self._pods: list[PodView] = []
        self._slots: list[ProcessSlot] = []
        self._cgroups: dict[int, str] = {}

    @property
    def key(self) -> object:
        """Changes whenever the node's pods do."""
        self.refresh()
        return self._key

    def nodes(self) -> list[str]:
        return [n.name for n in self.twin.cluster.nodes if n.gpus and (self.node is None or n.name == self.node)]

    def refresh(self) -> None:
        twin = self.twin
        key = (holders_layout(twin), twin.pods.version)
        if key == self._key:
            return
        self._key = key
        wanted = set(self.nodes())
        pods: list[PodView] = []
        slots: list[ProcessSlot] = []
        self._holder_pods(wanted, pods, slots)
        for pod in twin.pods.listed_pods():
            if pod.node in wanted:
                pods.append(self._shared_pod(pod, slots))
        self._mps_daemons(wanted, pods, slots)
        self._pods, self._slots = pods, slots
        self._cgroups = {s.pid: s.cgroup for s in slots}

    # -- building ------------------------------------------------------------------------------------------------

    def _holder_pods(self, wanted: set[str], pods: list[PodView], slots: list[ProcessSlot]) -> None:
        twin, g = self.twin, self.twin.gpus
        grouped: dict[tuple[str, str, str], list[int]] = {}
        holders = whole_gpu_holders(twin)
        for k, h in holders.items():
            node = twin.cluster.nodes[int(g.node_of[k])].name
            if node in wanted:
                grouped.setdefault((node, h.namespace, h.pod), []).append(k)
        for (node, _, _), ks in grouped.items():
            h = holders[ks[0]]
            uid = stable_uid("pod", h.namespace, h.pod, h.generation)
            cid = container_id(uid, h.container)
            gpus = sorted(ks, key=lambda k: int(g.index_on_node[k]))
            ids = tuple(self._gpu(k).uuid for k in gpus)
            owner = (h.owner_api, h.owner_kind, h.workload) if h.owner_kind else None
            container = ContainerView(h.container, cid, ((WHOLE_GPU, ids),))
            labels = _controller_labels(h.owner_kind, h.workload, h.pod)
            pods.append(PodView(h.pod, h.namespace, uid, node, "Guaranteed", (container,), owner, labels=labels))
            if h.container == "idle":
                continue  # a reservation with no process on its GPU
            text = cgroup_text(uid, "Guaranteed", cid)
            ni = twin.node_index[node]
            for k in gpus:
                gpu = self._gpu(k)
                slots.append(ProcessSlot(holder_pid(ni, gpu.index), node, k, gpu.uuid, None, cid, text, "holder"))

    def _shared_pod(self, pod: SimPod, slots: list[ProcessSlot]) -> PodView:
        qos = "Burstable"
        containers = []
        for c in pod.containers:
            devices: tuple[tuple[str, tuple[str, ...]], ...] = ()
            if c.device is not None:
                devices = ((c.device.resource, (c.device_id,)),)
            containers.append(ContainerView(c.name, c.container_id, devices))
            text = cgroup_text(pod.uid, qos, c.container_id)
            for p in c.processes:
                d = p.device
                slots.append(ProcessSlot(p.pid, pod.node, d.k, d.uuid, d.gi_id, c.container_id, text, "shared", p))
        owner_api = "batch/v1" if pod.owner_kind == "Job" else "apps/v1"
        return PodView(
            pod.name, pod.namespace, pod.uid, pod.node, qos, tuple(containers),
            (owner_api, pod.owner_kind, pod.owner_name), pod.phase, pod.started,
            _controller_labels(pod.owner_kind, pod.owner_name, pod.name),
        )  # fmt: skip

    def _mps_daemons(self, wanted: set[str], pods: list[PodView], slots: list[ProcessSlot]) -> None:
        twin = self.twin
        by_node: dict[str, list[SharedDevice]] = {}
        for d in twin.pods.devices:
            if d.mode is SharingMode.mps and d.node in wanted:
                by_node.setdefault(d.node, []).append(d)
        for node, devices in by_node.items():
            suffix = hashlib.sha256(node.encode()).hexdigest()[:5]
            name = f"{MPS_DAEMON}-{suffix}"
            uid = stable_uid("pod", MPS_NAMESPACE, name)
            cid = container_id(uid, MPS_CONTAINER)
            owner = ("apps/v1", "DaemonSet", MPS_DAEMON)
            pods.append(
                PodView(name, MPS_NAMESPACE, uid, node, "BestEffort", (ContainerView(MPS_CONTAINER, cid),), owner)
            )
            text = cgroup_text(uid, "BestEffort", cid)
            for d in devices:
                if _has_clients(twin, d.k):
                    slots.append(
                        ProcessSlot(
                            mps_server_pid(d.node_index, d.gpu), node, d.k, d.uuid, None, cid, text, "mps-server"
                        )
                    )

    def _gpu(self, k: int) -> Any:
        g = self.twin.gpus
        return self.twin.cluster.nodes[int(g.node_of[k])].gpus[int(g.index_on_node[k])]

    # -- the answers ---------------------------------------------------------------------------------------------

    def pods(self) -> list[PodView]:
        self.refresh()
        return list(self._pods)

    def processes(self) -> list[GpuProcess]:
        """NVML's compute processes on the node's GPUs that answer: per process its memory, the MIG instance it
        runs in, MPS clients marked, and SM samples where the driver keeps them (whole GPUs, not MIG, not MPS)."""
        self.refresh()
        g = self.twin.gpus
        mps = self.twin.pods.mps_gpus
        out = []
        for s in self._slots:
            if not g.alive[s.k]:
                continue  # a GPU off the bus answers nothing
            if s.kind == "holder":
                memory = max(0.0, float(g.fb_used_mib[s.k]) - FB_RESERVED_MIB)
                out.append(GpuProcess(s.pid, s.uuid, None, memory, float(g.util[s.k]), float(g.mem_copy_util[s.k]),
                                      name="python"))  # fmt: skip
            elif s.kind == "mps-server":
                out.append(GpuProcess(s.pid, s.uuid, None, MPS_SERVER_MIB, name="nvidia-cuda-mps-server"))
            else:
                p = s.source
                assert p is not None
                client = s.k in mps
                sampled = s.gi_id is None and not client
                out.append(
                    GpuProcess(
                        s.pid, s.uuid, s.gi_id, p.memory_mib,  # type: ignore[attr-defined]
                        p.sm_util if sampled else None,  # type: ignore[attr-defined]
                        p.mem_util if sampled else None,  # type: ignore[attr-defined]
                        mps=client, name=p.name,  # type: ignore[attr-defined]
                    )
                )  # fmt: skip
        return out

    def sampled(self) -> frozenset[str]:
        """The GPUs whose per-process utilization samples NVML returns: whole GPUs in neither MIG nor MPS mode."""
        twin = self.twin
        out = set()
        for name in self.nodes():
            node = twin.cluster.node(name)
            for gpu in node.gpus:
                k = twin.gpu_index[(name, gpu.index)]
                if (
                    gpu.vendor == "nvidia"
                    and not gpu.mig_enabled
                    and k not in twin.pods.mps_gpus
                    and twin.gpus.alive[k]
                ):
                    out.add(gpu.uuid)
        return frozenset(out)

    def cgroup(self, pid: int) -> str | None:
        """The text of `/proc/<pid>/cgroup`, or None when no such process runs (a GPU process only)."""
        return self.cgroups().get(pid)

    def cgroups(self) -> dict[int, str]:
        """Every GPU process's `/proc/<pid>/cgroup` text, by PID."""
        self.refresh()
        return self._cgroups

    def list_response(self) -> dict[str, Any]:
        """ListPodResourcesResponse in MessageToDict form: every pod, each container's devices (none left out
        empty, as proto3's JSON form does). Terminated pods that linger stay listed (kubernetes#119423)."""
        out = []
        for pod in self.pods():
            containers = []
            for c in pod.containers:
                entry: dict[str, Any] = {"name": c.name}
                if c.devices:
                    entry["devices"] = [{"resourceName": r, "deviceIds": list(ids)} for r, ids in c.devices]
                containers.append(entry)
            out.append({"name": pod.name, "namespace": pod.namespace, "containers": containers})
        return {"podResources": out} if out else {}

    def allocatable_response(self) -> dict[str, Any]:
        """AllocatableResourcesResponse in MessageToDict form: every device ID the plugin offers, per resource
        (whole GPUs as `GPU-<uuid>`, replicas as `::<n>`, MIG instances as `MIG-<uuid>`)."""
        twin = self.twin
        shared: dict[tuple[int, int | None], SharedDevice] = {(d.k, d.gi_id): d for d in twin.pods.devices}
        by_resource: dict[str, list[str]] = {}
        for name in self.nodes():
            for gpu in twin.cluster.node(name).gpus:
                if gpu.vendor != "nvidia":
                    continue
                k = twin.gpu_index[(name, gpu.index)]
                if gpu.mig_enabled:
                    for inst in gpu.mig_instances:
                        d = shared.get((k, inst.gi_id))
                        if d is not None:
                            by_resource.setdefault(d.resource, []).extend(d.device_ids)
                        else:
                            res = "nvidia.com/mig-" + inst.profile.replace("+", ".")
                            by_resource.setdefault(res, []).append(inst.uuid)
                    continue
                d = shared.get((k, None))
                if d is not None:
                    by_resource.setdefault(d.resource, []).extend(d.device_ids)
                else:
                    by_resource.setdefault(WHOLE_GPU, []).append(gpu.uuid)
        devices = [{"resourceName": r, "deviceIds": ids} for r, ids in by_resource.items()]
        return {"devices": devices} if devices else {}

    def pod_list(self) -> dict[str, Any]:
        """The kubelet's `/pods`: a v1 PodList of the node's pods (terminated ones that linger with their phase)."""
        epoch = self.twin.epoch
        return {
            "kind": "PodList",
            "apiVersion": "v1",
            "metadata": {},
            "items": [_pod_item(p, epoch) for p in self.pods()],
        }


def _controller_labels(kind: str, owner: str, pod: str) -> tuple[tuple[str, str], ...]:
    """The labels each controller puts on its pods (the ones that name the workload)."""
    if kind == "ReplicaSet":
        return (("pod-template-hash", owner.rsplit("-", 1)[-1]),)
    if kind == "Job":
        return (("batch.kubernetes.io/job-name", owner), ("job-name", owner))
    if kind == "StatefulSet":
        return (("statefulset.kubernetes.io/pod-name", pod),)
    if kind == "PyTorchJob":
        return (("training.kubeflow.org/job-name", owner), ("training.kubeflow.org/replica-type", "worker"))
    return ()


def _has_clients(twin: Twin, k: int) -> bool:
    return any(p.device.k == k for pod in twin.pods.running_pods() for p in pod.processes)


def _when(epoch: float, t: float) -> str:
    return datetime.fromtimestamp(epoch + t, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _pod_item(pod: PodView, epoch: float) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid}
    if pod.labels:
        meta["labels"] = dict(pod.labels)
    if pod.owner is not None:
        api, kind, name = pod.owner
        meta["ownerReferences"] = [
            {"apiVersion": api, "kind": kind, "name": name, "uid": stable_uid(kind, pod.namespace, name),
             "controller": True, "blockOwnerDeletion": True}
        ]  # fmt: skip
    running = pod.phase == "Running"
    started = _when(epoch, pod.started)
    statuses = []
    spec_containers = []
    for c in pod.containers:
        limits = {r: str(len(ids)) for r, ids in c.devices}
        spec_containers.append({"name": c.name, "resources": {"limits": limits, "requests": dict(limits)}})
        state: dict[str, Any] = (
            {"running": {"startedAt": started}}
            if running
            else {"terminated": {"exitCode": 0 if pod.phase == "Succeeded" else 137,
                                 "reason": "Completed" if pod.phase == "Succeeded" else "Error",
                                 "startedAt": started, "containerID": f"containerd://{c.container_id}"}}
        )  # fmt: skip
        statuses.append(
            {"name": c.name, "containerID": f"containerd://{c.container_id}", "ready": running, "restartCount": 0,
             "state": state}
        )  # fmt: skip
    return {
        "metadata": meta,
        "spec": {"nodeName": pod.node, "containers": spec_containers},
        "status": {"phase": pod.phase, "qosClass": pod.qos, "startTime": started, "containerStatuses": statuses},
    }
