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

Reading `/proc` is the agent's work: `gpufleet.sources.workload.cgroups`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["CgroupRef", "parse_cgroup_path", "parse_proc_cgroup"]

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
