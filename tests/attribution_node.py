"""A GPU node for per-workload attribution, built from a declarative case and read through the agent's real readers:
a pod-resources gRPC service on a unix socket (tests.kubelet), NVML (tests.sources.gpu.fake_nvml: nvidia-ml-py with
the driver replaced by data), a /proc tree of cgroup and stat files, the node's pod list as the kubelet answers it,
and, for Slurm, a job-map directory. A case says what runs where; `expected` says what attribution must find, from
the case alone.
"""

from __future__ import annotations

import hashlib
import math
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufleet.agent.attribution import AllotmentReader, AttributionSource
from gpufleet.sources.gpu.nvml import NvmlSource
from gpufleet.sources.gpu.nvml_processes import NvmlProcesses
from gpufleet.sources.workload.cgroups import CgroupOwners
from gpufleet.sources.workload.kubelet_pods import PodIndex
from gpufleet.sources.workload.podresources import PodResourcesReader
from gpufleet.sources.workload.slurm_jobmap import JobMapAllotments
from gpufleet.telemetry.attribution import COMPUTE_TOLERANCE_PCT
from gpufleet.telemetry.frame import MetricFrame
from tests.kubelet import Kubelet
from tests.sources.gpu.fake_nvml import FakeGpu, FakeMig, FakeNvml, FakeProcess

GPU_NAME = "NVIDIA H100 80GB HBM3"
GPU_MIB = 81_559.0
MPS_SERVER_PID = 4_000
MPS_SERVER_MIB = 30.0
SECOND_US = 1_000_000
POD_LIST_REFRESH_S = 10  # CgroupOwners' default


@dataclass(frozen=True)
class Proc:
    pid: int
    gpu: int
    mem_mib: float | None
    sm: float | None = None  # this interval's SM sample (None: no sample: it ran no kernel)
    gi: int | None = None  # the MIG GPU instance it runs in
    mps: bool = False
    owner: str = ""  # "namespace/pod/container", "job:<id>", or "" (a host process)


@dataclass(frozen=True)
class Container:
    name: str
    devices: tuple[str, ...] = ()
    resource: str = "nvidia.com/gpu"


@dataclass(frozen=True)
class Pod:
    name: str
    namespace: str
    containers: tuple[Container, ...]
    phase: str = "Running"


@dataclass(frozen=True)
class Gpu:
    uuid: str
    mig: tuple[tuple[int, str, float], ...] = ()  # (GPU instance id, profile, memory MiB)
    util: float | None = None  # the device's utilization (None: derived from the processes' samples)
    power_w: float = 350.0
    overhead_mib: float = 400.0  # what the driver and contexts hold beyond the processes' accounting

    def mig_uuid(self, gi: int) -> str:
        return f"MIG-{hashlib.sha1(f'{self.uuid}/{gi}'.encode()).hexdigest()[:8]}-0000-0000-0000-{gi:012d}"


@dataclass
class Case:
    name: str
    gpus: list[Gpu]
    pods: list[Pod] = field(default_factory=list)
    procs: list[Proc] = field(default_factory=list)
    replicas: dict[str, int] = field(default_factory=dict)  # device uuid -> replicas offered
    slurm: dict[str, tuple[str, ...]] = field(default_factory=dict)  # job map file name -> job ids
    readers: frozenset[str] = frozenset({"pod-resources", "nvml", "cgroups"})


def container_id(owner: str) -> str:
    return hashlib.sha256(owner.encode()).hexdigest()


def pod_uid(namespace: str, pod: str) -> str:
    h = hashlib.md5(f"{namespace}/{pod}".encode()).hexdigest()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def cgroup_text(owner: str) -> str:
    """/proc/<pid>/cgroup as a containerd node with the systemd driver and cgroup v2 writes it."""
    if owner.startswith("job:"):
        return f"0::/system.slice/slurmstepd.scope/job_{owner[4:]}/step_0/user/task_0\n"
    if not owner:
        return "0::/system.slice/sshd.service\n"
    namespace, pod, _ = owner.split("/")
    uid = pod_uid(namespace, pod).replace("-", "_")
    return (
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid}.slice/"
        f"cri-containerd-{container_id(owner)}.scope\n"
    )


def list_answer(pods: list[Pod]) -> dict[str, Any]:
    """ListPodResourcesResponse in MessageToDict form."""
    out = []
    for pod in pods:
        containers = []
        for c in pod.containers:
            entry: dict[str, Any] = {"name": c.name}
            if c.devices:
                entry["devices"] = [{"resourceName": c.resource, "deviceIds": list(c.devices)}]
            containers.append(entry)
        out.append({"name": pod.name, "namespace": pod.namespace, "containers": containers})
    return {"podResources": out}


def allocatable_answer(case: Case) -> dict[str, Any]:
    devices = []
    for uuid, n in case.replicas.items():
        ids = [f"{uuid}::{k}" for k in range(n)] if n > 1 else [uuid]
        devices.append({"resourceName": "nvidia.com/gpu", "deviceIds": ids})
    return {"devices": devices}


def pod_list(pods: list[Pod]) -> dict[str, Any]:
    """The kubelet's /pods answer (a v1 PodList)."""
    items = []
    for pod in pods:
        statuses = [
            {"name": c.name, "containerID": f"containerd://{container_id(f'{pod.namespace}/{pod.name}/{c.name}')}"}
            for c in pod.containers
        ]
        items.append(
            {
                "kind": "Pod",
                "apiVersion": "v1",
                "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod_uid(pod.namespace, pod.name)},
                "status": {"phase": pod.phase, "containerStatuses": statuses},
            }
        )
    return {"kind": "PodList", "apiVersion": "v1", "items": items}


def stat_line(pid: int, start: int) -> str:
    # fields 3-21, then starttime (22)
    return f"{pid} (worker) S 1 {pid} {pid} 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 {start} 0 0\n"


def load_fake(fake: FakeNvml, case: Case) -> dict[int, list[tuple[int, int]]]:
    """Put the case's processes, MIG layout and readings on the fake driver; per GPU, the (pid, SM %) samples each
    interval leaves."""
    sampling: dict[int, list[tuple[int, int]]] = {}
    for i, (spec, gpu) in enumerate(zip(case.gpus, fake.gpus, strict=True)):
        procs = [p for p in case.procs if p.gpu == i]
        if any(p.mps for p in procs):
            procs.append(Proc(MPS_SERVER_PID + i, i, MPS_SERVER_MIB))
        gpu.processes = [
            FakeProcess(p.pid, p.mem_mib, p.gi, 0 if p.gi is not None else None, compute=not p.mps, mps=p.mps)
            for p in procs
        ]
        sampling[i] = [(p.pid, int(p.sm)) for p in procs if p.sm is not None and not p.mps]
        gpu.total_mib = GPU_MIB
        gpu.used_mib = sum(p.mem_mib or 0.0 for p in procs) + spec.overhead_mib
        gpu.util_pct = spec.util if spec.util is not None else min(100.0, sum(p.sm or 0.0 for p in procs))
        gpu.power_w = spec.power_w
        gpu.temperature_c = 45.0  # answers every device reading, as a driver does
        if spec.mig:
            gpu.mig_mode = (1, 1)
            gpu.migs = [
                FakeMig(
                    slot,
                    gi,
                    0,
                    spec.mig_uuid(gi),
                    profile,
                    f"{GPU_NAME} MIG {profile}",
                    sum(p.mem_mib or 0.0 for p in procs if p.gi == gi) + spec.overhead_mib / len(spec.mig),
                    total,
                )
                for slot, (gi, profile, total) in enumerate(spec.mig)
            ]
    return sampling


def write_proc_tree(proc: Path, case: Case) -> None:
    """/proc/<pid>/{cgroup,stat} for every process of the case (and nothing else)."""
    for old in proc.iterdir():
        for f in old.iterdir():
            f.unlink()
        old.rmdir()
    pids = {p.pid: p.owner for p in case.procs}
    pids.update({MPS_SERVER_PID + p.gpu: "" for p in case.procs if p.mps})
    for pid, owner in pids.items():
        d = proc / str(pid)
        d.mkdir()
        (d / "cgroup").write_text(cgroup_text(owner))
        (d / "stat").write_text(stat_line(pid, 1000 + pid))


def write_job_map(directory: Path, case: Case) -> None:
    directory.mkdir(exist_ok=True)
    for old in directory.iterdir():
        old.unlink()
    for key, jobs in case.slurm.items():
        (directory / key).write_text("".join(f"{j}\n" for j in jobs))


class Node:
    """One node's readers over a case; `update` replaces what runs (pods starting and ending between scrapes)."""

    def __init__(self, case: Case, root: Path) -> None:
        self.root = root
        self.proc = root / "proc"
        self.proc.mkdir()
        self.job_map = root / "job-map"
        self.tick = 0
        self.fake = FakeNvml([FakeGpu(uuid=g.uuid, name=GPU_NAME, minor=i) for i, g in enumerate(case.gpus)])
        self.kubelet = Kubelet(root / "kubelet.sock")
        self.index = PodIndex.from_pod_list(pod_list([]))
        self.sampling: dict[int, list[tuple[int, int]]] = {}  # per GPU: (pid, SM %) NVML samples each interval
        self.case = case
        self.update(case)
        self.kubelet.start()
        self.nvml = NvmlSource("node-1", self.fake)  # the MIG layout is read now, as an agent reads it at start
        self.frame = self.nvml.new_frame()
        allotments: list[AllotmentReader] = []
        if "pod-resources" in case.readers:
            allotments.append(PodResourcesReader(str(self.kubelet.socket)))
        if "job-map" in case.readers:
            allotments.append(JobMapAllotments(self.job_map))
        processes = NvmlProcesses.of(self.nvml) if "nvml" in case.readers else None
        owners = None
        if "cgroups" in case.readers:
            # the pod list is read every POD_LIST_REFRESH_S of this node's clock (one second a collection)
            owners = CgroupOwners(pods=lambda: self.index, proc_root=self.proc, clock=lambda: float(self.tick))
        self.attribution = AttributionSource(allotments, processes, owners)

    def update(self, case: Case) -> None:
        """Make the node run `case` from the next collection on."""
        self.case = case
        self.sampling = load_fake(self.fake, case)
        self.kubelet.list_answer = list_answer(case.pods)
        self.kubelet.allocatable_answer = allocatable_answer(case)
        self.index = PodIndex.from_pod_list(pod_list(case.pods))
        write_proc_tree(self.proc, case)
        write_job_map(self.job_map, case)

    def collect(self) -> MetricFrame:
        """One collection; each process with an SM figure in the case leaves a sample in the interval before it."""
        self.tick += 1
        for i, gpu in enumerate(self.fake.gpus):
            gpu.samples = [(pid, self.tick * SECOND_US, sm, 0) for pid, sm in self.sampling.get(i, [])]
        self.frame.clear_values()
        self.nvml.collect(self.frame)
        self.attribution.collect(self.frame)
        return self.frame

    def close(self) -> None:
        self.kubelet.stop()


@contextmanager
def running(case: Case) -> Iterator[Node]:
    with tempfile.TemporaryDirectory(prefix="attr") as tmp:  # short: a unix socket path fits 108 bytes
        node = Node(case, Path(tmp))
        try:
            yield node
        finally:
            node.close()


# ---- what the case says attribution must find -------------------------------------------------------------------


@dataclass(frozen=True)
class Expected:
    """One workload's part of one entity (a GPU, or a MIG instance by its GPU instance id)."""

    gpu: int
    gi: int | None
    owner: str  # "namespace/pod/container" or "job:<id>"
    memory_mib: float | None  # None: not knowable with the case's readers
    compute_pct: float | None  # None: estimated (checked by the split rule, not a value)
    allotted: bool = True


def holder_devices(case: Case) -> dict[str, set[tuple[int, int | None]]]:
    """Which entities each workload was given, from the case's device IDs."""
    by_id: dict[str, tuple[int, int | None]] = {}
    for i, g in enumerate(case.gpus):
        by_id[g.uuid] = (i, None)
        for gi, _, _ in g.mig:
            by_id[g.mig_uuid(gi)] = (i, gi)
    out: dict[str, set[tuple[int, int | None]]] = {}
    if "pod-resources" in case.readers:
        for pod in case.pods:
            for c in pod.containers:
                for d in c.devices:
                    out.setdefault(f"{pod.namespace}/{pod.name}/{c.name}", set()).add(by_id[d.split("::")[0]])
    if "job-map" in case.readers:
        for key, jobs in case.slurm.items():
            idx, _, gi = key.partition(".")
            for job in jobs:
                out.setdefault(f"job:{job}", set()).add((int(idx), int(gi) if gi else None))
    return out


def expected(case: Case) -> list[Expected]:
    """Every (entity, workload) share the case implies, with its exact memory and, where measured, compute."""
    given = holder_devices(case)
    running = {f"{p.namespace}/{p.name}" for p in case.pods if p.phase in ("Running", "Pending")}
    out = []
    entities: dict[tuple[int, int | None], list[str]] = {}
    for owner, devices in given.items():
        if not owner.startswith("job:") and owner.rsplit("/", 1)[0] not in running:
            continue
        for dev in devices:
            entities.setdefault(dev, []).append(owner)
    for p in case.procs:
        if p.owner and p.owner not in entities.setdefault((p.gpu, p.gi), []):
            entities[(p.gpu, p.gi)].append(p.owner)  # using a GPU it was not given
    for (gpu, gi), owners in entities.items():
        procs = [p for p in case.procs if p.gpu == gpu and p.gi == gi]
        mps = any(p.mps for p in procs)
        for owner in owners:
            mine = [p for p in procs if p.owner == owner]
            pid_map = "cgroups" in case.readers or len(owners) == 1
            memory = None
            if "nvml" in case.readers and pid_map and all(p.mem_mib is not None for p in mine):
                memory = sum(p.mem_mib or 0.0 for p in mine)
            compute = None
            if gi is None and not mps and "nvml" in case.readers and "cgroups" in case.readers and len(owners) > 1:
                compute = sum(p.sm or 0.0 for p in mine)
            allotted = (gpu, gi) in given.get(owner, set()) or not case.readers & {"pod-resources", "job-map"}
            out.append(Expected(gpu, gi, owner, memory, compute, allotted))
    return out


def owner_of(share: Any) -> str:
    h = share.holder
    return f"job:{h.hpc_job}" if h.hpc_job else f"{h.namespace}/{h.pod}/{h.container}"


def check(frame: MetricFrame, case: Case) -> list[str]:
    """What the frame's attribution gets wrong against the case (empty: all right)."""
    problems: list[str] = []
    want = {(e.gpu, e.gi, e.owner): e for e in expected(case)}
    got: dict[tuple[int, int | None, str], Any] = {}
    for entity, dev in zip(frame.entities, frame.shares, strict=True):
        for share in dev.shares if dev is not None else ():
            got[(entity.gpu, entity.gpu_instance_id if entity.mig_profile else None, owner_of(share))] = (share, dev)
    for key in sorted(set(got) - set(want), key=str):
        problems.append(f"{key}: attributed but the case has no such workload there (stale or wrong label)")
    for key in sorted(set(want) - set(got), key=str):
        problems.append(f"{key}: missing")
    for key in sorted(set(want) & set(got), key=str):
        exp, (share, dev) = want[key], got[key]
        if exp.allotted != share.allotted:
            problems.append(f"{key}: allotted {share.allotted}, expected {exp.allotted}")
        if exp.memory_mib is None:
            if not math.isnan(share.memory_mib):
                problems.append(f"{key}: memory {share.memory_mib} where it cannot be known")
        elif share.memory_mib != exp.memory_mib:
            problems.append(f"{key}: memory {share.memory_mib} MiB, expected exactly {exp.memory_mib}")
        if exp.compute_pct is not None:
            if share.compute_method != "measured" or abs(share.compute_pct - exp.compute_pct) > COMPUTE_TOLERANCE_PCT:
                problems.append(
                    f"{key}: compute {share.compute_pct} ({share.compute_method}), expected {exp.compute_pct}"
                )
        elif share.compute_method not in ("measured", "estimated", ""):
            problems.append(f"{key}: compute method {share.compute_method!r}")
    for i, dev in enumerate(frame.shares):
        if dev is None:
            continue
        device_memory = frame.gpu("DCGM_FI_DEV_FB_USED")[i]
        parts = [s.memory_mib for s in dev.shares]
        known = not any(math.isnan(m) for m in parts) and not math.isnan(dev.unattributed_memory_mib)
        if known and abs(sum(parts) + dev.unattributed_memory_mib - device_memory) > 1.0:  # NVML reports bytes
            problems.append(f"entity {i}: memory parts {sum(parts)} + {dev.unattributed_memory_mib} != {device_memory}")
        compute = [s.compute_pct for s in dev.shares]
        util = float(dev.unattributed_compute_pct)
        if not any(math.isnan(c) for c in compute) and not math.isnan(util):
            device_util = sum(compute) + util
            reading = frame.gpu("DCGM_FI_DEV_GPU_UTIL")[i]
            if not math.isnan(reading) and abs(device_util - reading) > COMPUTE_TOLERANCE_PCT:
                problems.append(f"entity {i}: compute parts sum to {device_util}, device {reading}")
    return problems
