"""The agent's attribution readers on a twin node: the real parsers and resolvers, fed what the twin node answers
(`gpu_holder_answers.py`).

- `TwinPodResources` is the real pod-resources reader (sources.podresources) over the twin's kubelet, which answers
  List and GetAllocatableResources in their MessageToDict form.
- `TwinProcesses` hands over NVML's compute processes as the twin's GPUs run them.
- `TwinOwners` reads each process's `/proc/<pid>/cgroup` text with the real `parse_proc_cgroup` and resolves it
  through the real `PodIndex` built from the twin kubelet's pod list; like the real reader it says which pods
  the list has as ended, so the agent drops a terminated pod that lingers in pod-resources' List.

`attribution_source(twin, node)` puts the three behind the agent's `AttributionSource`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpufleet.agent.attribution import AttributionSource
from gpufleet.model.attribution import Attribution, ProcessReading
from gpufleet.parsers.cgroups import CgroupRef, parse_proc_cgroup
from gpufleet.sim.gpu_holder_answers import NodeAnswers
from gpufleet.sim.twin import Twin
from gpufleet.sources.workload.kubelet_pods import PodIndex
from gpufleet.sources.workload.podresources import PodResourcesReader

__all__ = ["TwinKubelet", "TwinOwners", "TwinPodResources", "TwinProcesses", "attribution_source"]


class TwinKubelet:
    """The twin node's kubelet, as the pod-resources client and the `/pods` reader see it."""

    def __init__(self, answers: NodeAnswers) -> None:
        self.answers = answers

    def list(self) -> Mapping[str, Any]:
        return self.answers.list_response()

    def allocatable(self) -> Mapping[str, Any]:
        return self.answers.allocatable_response()

    def pods(self) -> Mapping[str, Any]:
        return self.answers.pod_list()

    def close(self) -> None:
        pass


class TwinPodResources(PodResourcesReader):
    """The pod-resources reader (name "pod-resources") over the twin's kubelet; GetAllocatableResources is asked
    on the twin's clock."""

    def __init__(self, twin: Twin, node: str | None = None, answers: NodeAnswers | None = None) -> None:
        self.answers = answers or NodeAnswers(twin, node)
        super().__init__(client=TwinKubelet(self.answers), clock=lambda: twin.time)


class TwinProcesses:
    """NVML's compute processes on the twin node's GPUs, and which GPUs keep per-process samples."""

    name = "nvml-processes"

    def __init__(self, twin: Twin, node: str | None = None, answers: NodeAnswers | None = None) -> None:
        self.answers = answers or NodeAnswers(twin, node)

    def read(self) -> ProcessReading:
        return ProcessReading(tuple(self.answers.processes()), self.answers.sampled())


class TwinOwners:
    """Each process's workload from its cgroup, resolved through the node's pod list."""

    name = "cgroups"

    def __init__(self, twin: Twin, node: str | None = None, answers: NodeAnswers | None = None) -> None:
        self.answers = answers or NodeAnswers(twin, node)
        self.kubelet = TwinKubelet(self.answers)
        self._index: PodIndex | None = None
        self._key: object = None
        self._refs: dict[int, tuple[str, CgroupRef]] = {}  # a live PID's cgroup is read once, as a real reader does

    def index(self) -> PodIndex:
        """The node's pods, as the real index reads the kubelet's pod list (rebuilt when the pods change)."""
        key = self.answers.key
        if self._index is None or key != self._key:
            self._index = PodIndex.from_pod_list(self.kubelet.pods())
            self._key = key
        return self._index

    def owners(self, pids: Iterable[int]) -> dict[int, Attribution]:
        index = self.index()
        texts = self.answers.cgroups()
        refs: dict[int, tuple[str, CgroupRef]] = {}
        out: dict[int, Attribution] = {}
        for pid in pids:
            text = texts.get(pid)
            if text is None:
                continue  # gone since NVML listed it
            seen = self._refs.get(pid)
            ref = seen[1] if seen is not None and seen[0] == text else parse_proc_cgroup(text)
            refs[pid] = (text, ref)
            owner = index.owner(ref)
            if owner is not None:
                out[pid] = owner
        self._refs = refs
        return out

    def pod_list(self) -> PodIndex:
        """The node's pod list, the same object while the pods stay the same (the agent keeps what it derived)."""
        return self.index()

    def ended(self, holder: Attribution) -> bool:
        """Whether the pod list says this holder's pod has ended (the agent then drops its lingering allotments)."""
        return bool(holder.pod) and self.index().ended(holder.namespace, holder.pod)

    def running(self, namespace: str, pod: str) -> bool:
        return self.index().running(namespace, pod)


def attribution_source(twin: Twin, node: str | None = None) -> AttributionSource:
    """The agent's attribution over the twin node's readers (one NodeAnswers shared by the three)."""
    answers = NodeAnswers(twin, node)
    return AttributionSource(
        allotments=[TwinPodResources(twin, node, answers)],
        processes=TwinProcesses(twin, node, answers),
        owners=TwinOwners(twin, node, answers),
        clock=lambda: twin.time,
    )
