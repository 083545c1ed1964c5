"""`CgroupOwners` is the agent's PID-to-workload reader: it reads `<proc>/<pid>/cgroup` (the agent needs hostPID to see
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
from gpufleet.model.attribution import Attribution
from gpufleet.parsers.cgroups import CgroupRef, parse_proc_cgroup

__all__ = ["CgroupOwners", "PodLookup", "start_time"]

log = logging.getLogger("gpufleet.agent")

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
        # each PID's workload as the current pod list names it, with the cgroup it was resolved from: looked up
        # again only when the list is read again or the PID's cgroup changes
        self._resolved: dict[int, tuple[CgroupRef, Attribution | None]] = {}
        self._resolved_by: PodLookup | None = None
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
            index = self._index_for(kube)
            resolved: dict[int, tuple[CgroupRef, Attribution | None]] = {}
            for pid, ref in kube.items():
                known = self._resolved.get(pid)
                owner = known[1] if known is not None and known[0] is ref else index.owner(ref)
                resolved[pid] = (ref, owner)
                if owner is not None:
                    out[pid] = owner
            self._resolved = resolved
        return out

    def pod_list(self) -> PodLookup | None:
        """The node's pod list (read again when `refresh_s` old), or None without one. The same object comes back
        until it is read again, so a caller may keep what it derived from it."""
        if self.pods is None:
            return None
        now = self.clock()
        if self._index is None or now - self._loaded >= self.refresh_s:
            self._load(now)
        return self._current()

    def ended(self, holder: Attribution) -> bool:
        """Whether the pod list says this holder's pod has ended: kubelets that still list a terminated pod's
        devices in pod-resources would otherwise keep its labels on the GPU."""
        pods = self.pod_list() if holder.pod else None
        return pods is not None and pods.ended(holder.namespace, holder.pod)

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

    def _index_for(self, refs: dict[int, CgroupRef]) -> PodLookup:
        now = self.clock()
        fresh = False
        if self._index is None or now - self._loaded >= self.refresh_s:
            self._load(now)
            fresh = True
        index = self._current()
        # a PID resolved through this list before has had its container looked up in it already
        known = self._resolved
        wanted = {
            r.container_id for pid, r in refs.items() if r.container_id and (pid not in known or known[pid][0] is not r)
        }
        unknown = {cid for cid in wanted if not index.has_container(cid)} - self._missed
        if unknown and not fresh:  # a pod that started since the last read
            self._load(now)
            index = self._current()
        self._missed |= {cid for cid in unknown if not index.has_container(cid)}
        return index

    def _current(self) -> PodLookup:
        """The pod list, forgetting what an earlier one resolved when it was read again."""
        index = self._need_index()
        if index is not self._resolved_by:
            self._resolved, self._resolved_by = {}, index
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
