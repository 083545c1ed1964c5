"""Which workload a process belongs to, from its cgroup: the Kubernetes pod and container, or the Slurm job and step,
that `/proc/<pid>/cgroup` names. Attribution asks this of every process on a GPU, so a GPU that several workloads
share can give each its own memory and compute.

Every line of the file is `hierarchy-id:controllers:path` (cgroup v1: one per hierarchy; v2: one `0::/path`);
a hybrid host has both. The path forms come from the components that make them:

- the kubelet (pkg/kubelet/cm): `kubepods[/burstable|/besteffort]/pod<uid>` with the cgroupfs driver; with the
  systemd driver each level becomes a slice whose name joins its ancestors with "-" after turning every "-" of a
  part into "_" (escapeSystemdCgroupName), so `kubepods.slice/kubepods-burstable.slice/
  kubepods-burstable-pod<uid_with_underscores>.slice`. Guaranteed pods have no QoS level. A static pod's UID is
  its config hash (32 hex digits). kind puts the kubelet under `kubelet.slice`, so every slice carries "kubelet-".
- the runtimes, below the pod: containerd `cri-containerd-<id>.scope` (systemd) or `<id>` (cgroupfs), and the
  literal runc form `<pod slice>:cri-containerd:<id>` when the runtime does not hand that to systemd; CRI-O
  `crio-<id>.scope` (its sandbox: `crio-<id>`), with `crio-conmon-<id>.scope` holding CRI-O's container monitor,
  which is no container; Docker and cri-dockerd `docker-<id>.scope` or `<id>`; plain Docker `/docker/<id>`.
- Slurm (src/plugins/cgroup): v1 `/slurm[_<node>]/uid_<uid>/job_<id>/step_<step>/task_<n>`, v2
  `/system.slice/[<node>_]slurmstepd.scope/job_<id>/step_<step>/{user/task_<n>|slurm}`, where a step is a number,
  `batch`, `extern`, `interactive`, `TBD` or, in a heterogeneous job, `<n>+<component>`. From Slurm 26.05 the v2
  job level is named by the job's SLUID (`s` and 13 Crockford base-32 digits) unless CgroupJobIdPaths=yes.
  Array tasks and heterogeneous components each have their own numeric job id, which is the one in the path.

A reader in a private cgroup namespace (an agent pod on cgroup v2) sees other pods' paths relative to its own, with
`..` for every level above the common ancestor: the names below are intact, so `..` parts are passed over. The
innermost container below the pod wins, so a Kubernetes node that is itself a container (kind, minikube) names the
pod's container, not the node's.

`CgroupOwners` is the agent's PID-to-workload reader: it reads `<proc>/<pid>/cgroup` (the agent needs hostPID to see
other containers' processes), names Slurm jobs straight from the path and pods through the node's pod list.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from gpufleet.errors import BackendError, GpufleetError
from gpufleet.telemetry.frame import Attribution

__all__ = ["CgroupOwners", "CgroupRef", "PodLookup", "parse_cgroup_path", "parse_proc_cgroup", "start_time"]

log = logging.getLogger("gpufleet.agent")

MAX_TEXT = 64 * 1024  # a real file is a few hundred bytes to a few KiB
MAX_LINES = 64

_UID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}|[0-9a-f]{32}"
_ID = r"[0-9a-f]{64}"
# pod<uid> (cgroupfs) or [kubelet-]kubepods[-<qos>]-pod<uid>.slice (systemd)
_POD = re.compile(rf"^(?:(?P<prefix>[a-z0-9_.-]*?)-)?pod(?P<uid>{_UID})(?:\.slice)?$")
_QOS_SLICE = re.compile(r"(?:^|-)kubepods-(burstable|besteffort)(?:-|\.slice$)")
_QOS_NAMES = ("burstable", "besteffort")
# a container's own cgroup under its pod, per runtime; crio-conmon is CRI-O's monitor, not a container
_CONTAINER = re.compile(rf"^(?:(?P<prefix>cri-containerd|crio|docker|libpod)-)?(?P<id>{_ID})(?:\.scope)?$")
_CONMON = re.compile(rf"^crio-conmon-{_ID}(?:\.scope)?$")
# runc's systemd cgroupsPath written literally: <slice>:<prefix>:<name>
_COLON = re.compile(rf"^(?P<slice>[^:]*\.slice):(?P<prefix>[a-z-]+):(?P<id>{_ID})$")
_DOCKER_ROOT = {"docker", "docker.slice", "system.slice"}  # parents of a container outside Kubernetes

_SLURM_V1 = re.compile(r"^slurm(?:_[^/]+)?$")
_SLURM_V2 = re.compile(r"^(?:[^/]+_)?slurmstepd\.scope$")
_JOB = re.compile(r"^job_(\d{1,12})$")
_SLUID = re.compile(r"^[sS][0-9A-HJKMNP-TV-Z]{13}$")
_STEP = re.compile(r"^step_(\d{1,10}(?:\+\d{1,5})?|batch|extern|interactive|TBD)$")


@dataclass(frozen=True, slots=True)
class CgroupRef:
    """The workload a cgroup path names: a Kubernetes pod (and container) or a Slurm job (and step). Empty when it
    names none (a host service, a user session)."""

    pod_uid: str = ""  # with dashes, as the API spells it (or a static pod's 32-digit config hash)
    container_id: str = ""  # the runtime's 64-hex container ID, without the runtime's prefix
    qos: str = ""  # guaranteed, burstable, besteffort (Kubernetes); "" when no pod
    slurm_job: str = ""  # the numeric job id
    slurm_step: str = ""  # 0, 1+0, batch, extern, interactive
    slurm_sluid: str = ""  # Slurm 26.05+ cgroup v2: the job's SLUID when the path has no job id

    @property
    def is_kubernetes(self) -> bool:
        return bool(self.pod_uid)

    @property
    def is_slurm(self) -> bool:
        return bool(self.slurm_job or self.slurm_sluid)

    @property
    def empty(self) -> bool:
        return not (self.pod_uid or self.container_id or self.slurm_job or self.slurm_sluid)

    def _weight(self) -> int:
        return sum(bool(v) for v in (self.pod_uid, self.container_id, self.slurm_job or self.slurm_sluid,
                                     self.slurm_step))  # fmt: skip


def parse_proc_cgroup(text: str) -> CgroupRef:
    """The workload the content of `/proc/<pid>/cgroup` names. On a v1 or hybrid host the controllers may disagree
    (Slurm's proctrack puts only the freezer in the job; a v2 line may stay in a service): the line that names the
    most wins, the v2 line on a tie. Anything that is not a cgroup line is passed over; never raises."""
    best = CgroupRef()
    best_v2 = False
    for line in text[:MAX_TEXT].splitlines()[:MAX_LINES]:
        parts = line.strip().split(":", 2)
        if len(parts) != 3 or not parts[0].isdigit() or not parts[2].startswith("/"):
            continue
        ref = parse_cgroup_path(parts[2])
        v2 = parts[0] == "0" and parts[1] == ""
        weight, best_weight = ref._weight(), best._weight()
        if weight > best_weight or (weight == best_weight and v2 and not best_v2):
            best, best_v2 = ref, v2
    return best


def parse_cgroup_path(path: str) -> CgroupRef:
    """The workload one cgroup path names (the third field of a `/proc/<pid>/cgroup` line, or a memcg path the
    kernel prints)."""
    names = [n for n in path.strip().split("/") if n not in ("", ".", "..")]
    pod_uid = container_id = qos = ""
    kube_at = pod_at = -1
    for i, name in enumerate(names):
        if "kubepods" in name and kube_at < 0:
            kube_at = i
        colon = _COLON.match(name)
        slice_name = colon["slice"] if colon else name
        m = _POD.match(slice_name)
        if m and kube_at >= 0 and not pod_uid:
            pod_uid, pod_at = m["uid"].replace("_", "-"), i
            qos = _qos(names[: i + 1] if not colon else [*names[:i], slice_name])
            if colon:
                container_id = colon["id"]
                break
            continue
        if pod_uid and not container_id:
            if _CONMON.match(name):
                break
            c = _CONTAINER.match(name)
            if c:
                container_id = c["id"]
            break  # the innermost level below the pod is the container's (or none)
    if not pod_uid:
        container_id = _plain_container(names)
    job, step, sluid = _slurm(names[pod_at + 1 :] if pod_at >= 0 else names)
    return CgroupRef(pod_uid, container_id, qos, job, step, sluid)


def _qos(names: list[str]) -> str:
    for name in names:
        if name in _QOS_NAMES:
            return name
        m = _QOS_SLICE.search(name)
        if m:
            return m[1]
    return "guaranteed"


def _plain_container(names: list[str]) -> str:
    """A container outside Kubernetes (plain Docker, Podman): the last runtime-named level, or a bare ID under
    docker/. A cgroup of no pod but a container is still worth naming: it is not a host process."""
    for i in range(len(names) - 1, -1, -1):
        m = _CONTAINER.match(names[i])
        if m and (m["prefix"] or (i > 0 and names[i - 1] in _DOCKER_ROOT)):
            return m["id"]
    return ""


def _slurm(names: list[str]) -> tuple[str, str, str]:
    """(job id, step, SLUID) from the levels below Slurm's root: v1 slurm[_node]/uid_N/job_N/step_S, v2
    [node_]slurmstepd.scope/(job_N|SLUID)/step_S."""
    for i, name in enumerate(names):
        rest = names[i + 1 :]
        if _SLURM_V1.match(name) and rest and rest[0].startswith("uid_"):
            rest = rest[1:]
        elif not _SLURM_V2.match(name):
            continue
        if not rest:
            return "", "", ""
        job = _JOB.match(rest[0])
        sluid = "" if job else (rest[0] if _SLUID.match(rest[0]) else "")
        if not job and not sluid:
            return "", "", ""
        step = _STEP.match(rest[1]) if len(rest) > 1 else None
        return (job[1] if job else ""), (step[1] if step else ""), sluid
    return "", "", ""


# ---------------------------------------------------------------- the agent's reader: PIDs to workloads

STALE_FACTOR = 6  # a pod list this many refresh periods old is too old to answer from when a refresh fails
MISSING_TO_SAY = 3  # collections in a row in which no GPU process is under /proc before that is an error
_SLURM_JOB_ID = re.compile(rb"(?:^|\0)SLURM_JOB_ID=(\d{1,12})(?:\0|$)")


class PodLookup(Protocol):
    """What CgroupOwners needs of a pod list (kubelet_pods.PodIndex is one)."""

    def owner(self, ref: CgroupRef) -> Attribution | None: ...

    def has_container(self, container_id: str) -> bool: ...

    def ended(self, namespace: str, pod: str) -> bool: ...


@dataclass(frozen=True, slots=True)
class _Seen:
    start: int  # the process's start time (field 22 of /proc/<pid>/stat): a reused PID has another
    ref: CgroupRef
    checked: float = 0.0  # when the start time was last read


def start_time(proc_root: Path, pid: int) -> int | None:
    """Field 22 of `<proc>/<pid>/stat` (clock ticks after boot), or None when the process is gone."""
    try:  # read every collection for every GPU process: os-level calls, a tenth of pathlib's cost
        fd = os.open(f"{proc_root}/{pid}/stat", os.O_RDONLY)
        try:
            data = os.read(fd, 4096)
        finally:
            os.close(fd)
        fields = data[data.rindex(b")") + 1 :].split()
        return int(fields[19])  # fields after the command start at field 3
    except (OSError, ValueError, IndexError):
        return None


class CgroupOwners:
    """The workload of each process (an OwnerReader for agent.attribution): a Slurm job straight from its cgroup,
    a pod's container through the node's pod list. A process that has ended, or whose cgroup names no workload (a
    host daemon, a login session, a container outside Kubernetes), is absent from the answer.

    The pod list is read through `pods` when a pod's process needs it and the last read is `refresh_s` old, and at
    once when a container ID is not in it (a pod that just started); without `pods` only Slurm jobs are named (a
    Slurm node). Each PID's cgroup is read once while the process lives: its start time tells a reused PID."""

    name = "cgroups"

    def __init__(
        self,
        pods: Callable[[], PodLookup] | None = None,
        proc_root: str | Path = "/proc",
        refresh_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        verify_s: float = 5.0,
    ) -> None:
        self.pods = pods
        self.proc_root = Path(proc_root)
        self.refresh_s = refresh_s
        self.verify_s = verify_s  # how often a PID seen before has its start time read again (PID reuse)
        self.clock = clock
        self.loads = 0  # pod-list reads, for the curious
        self._index: PodLookup | None = None
        self._loaded = 0.0
        self._missed: set[str] = set()  # container IDs the current list was read for and lacks
        self._seen: dict[int, _Seen] = {}
        self._all_missing = 0
        self._said: str = ""

    def owners(self, pids: Iterable[int]) -> dict[int, Attribution]:
        refs = self._refs(pids)
        out: dict[int, Attribution] = {}
        kube: dict[int, CgroupRef] = {}
        for pid, ref in refs.items():
            if ref.is_slurm:  # Slurm in a pod (Slurm on Kubernetes): the job is the workload, not slurmd's pod
                out[pid] = Attribution(hpc_job=ref.slurm_job or ref.slurm_sluid)
            elif ref.is_kubernetes and self.pods is not None:
                kube[pid] = ref
        if kube:
            index = self._index_for(kube.values())
            for pid, ref in kube.items():
                owner = index.owner(ref)
                if owner is not None:
                    out[pid] = owner
        return out

    def ended(self, holder: Attribution) -> bool:
        """Whether the pod list says this holder's pod has ended: kubelets that still list a terminated pod's
        devices in pod-resources would otherwise keep its labels on the GPU."""
        if self.pods is None or not holder.pod:
            return False
        now = self.clock()
        if self._index is None or now - self._loaded >= self.refresh_s:
            self._load(now)
        return self._need_index().ended(holder.namespace, holder.pod)

    # ---- processes

    def _refs(self, pids: Iterable[int]) -> dict[int, CgroupRef]:
        now = self.clock()
        seen: dict[int, _Seen] = {}
        asked = found = 0
        for pid in dict.fromkeys(pids):
            if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
                continue
            asked += 1
            cached = self._seen.get(pid)
            if cached is not None and now - cached.checked < self.verify_s:
                # NVML lists it again: still the process read; a reused PID is caught at the next check
                seen[pid] = cached
                found += 1
                continue
            start = start_time(self.proc_root, pid)
            if start is None:  # ended
                continue
            found += 1
            if cached is not None and cached.start == start:
                seen[pid] = replace(cached, checked=now)
                continue
            ref = self._read(pid, start)
            if ref is not None:
                seen[pid] = _Seen(start, ref, now)
        self._seen = seen  # what was not asked about this time is forgotten: the map stays the GPU's processes
        self._check_visible(asked, found)
        return {pid: s.ref for pid, s in seen.items() if not s.ref.empty}

    def _read(self, pid: int, start: int) -> CgroupRef | None:
        base = self.proc_root / str(pid)
        try:
            text = (base / "cgroup").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
        if start_time(self.proc_root, pid) != start:  # the PID was reused while it was read
            return None
        ref = parse_proc_cgroup(text)
        if ref.slurm_sluid and not ref.slurm_job:  # Slurm 26.05+ names the job's cgroup by SLUID, not by job id
            job = _environ_job(base)
            if job:
                ref = replace(ref, slurm_job=job)
        return ref

    def _check_visible(self, asked: int, found: int) -> None:
        self._all_missing = self._all_missing + 1 if asked and not found else 0
        if self._all_missing >= MISSING_TO_SAY:
            raise BackendError(
                f"none of the {asked} GPU processes is under {self.proc_root}: the agent sees another PID namespace",
                fix="run the agent's pod with hostPID: true (or mount the host's /proc and set proc_root to it)",
            )

    # ---- the pod list

    def _index_for(self, refs: Iterable[CgroupRef]) -> PodLookup:
        now = self.clock()
        fresh = False
        if self._index is None or now - self._loaded >= self.refresh_s:
            self._load(now)
            fresh = True
        index = self._need_index()
        wanted = {r.container_id for r in refs if r.container_id}
        unknown = {cid for cid in wanted if not index.has_container(cid)} - self._missed
        if unknown and not fresh:  # a pod that started since the last read
            self._load(now)
            index = self._need_index()
        self._missed |= {cid for cid in unknown if not index.has_container(cid)}
        return index

    def _load(self, now: float) -> None:
        assert self.pods is not None
        try:
            index = self.pods()
        except GpufleetError as exc:
            if self._index is not None and now - self._loaded < STALE_FACTOR * self.refresh_s:
                if self._said != exc.message:
                    self._said = exc.message
                    log.warning("attribution: reading the pod list failed, answering from the last one: %s", exc)
                return
            self._index = None
            raise
        self.loads += 1
        self._index, self._loaded, self._missed, self._said = index, now, set(), ""

    def _need_index(self) -> PodLookup:
        if self._index is None:  # pragma: no cover - _load raised before
            raise BackendError("no pod list has been read", fix="check the pod-list reader")
        return self._index


def _environ_job(base: Path) -> str:
    """SLURM_JOB_ID from the process's environment (root may read any process's), or ""."""
    try:
        data = (base / "environ").read_bytes()[: 1 << 20]
    except OSError:
        return ""
    m = _SLURM_JOB_ID.search(data)
    return m[1].decode() if m else ""
