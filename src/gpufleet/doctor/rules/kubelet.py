"""Kubelet configurations that cannot give GPU pods aligned resources: the Topology Manager's policy and scope, the
CPU manager's static policy, CPUs and memory per GPU, and NIC resources nothing aligns.

A kubelet's configuration comes as a KubeletConfiguration (its config file, kubelet.config.k8s.io/v1beta1) or as
`kubectl get --raw /api/v1/nodes/NODE/proxy/configz`, which wraps the same fields in {"kubeletconfig": {...}}.
Unset fields take the kubelet's defaults (v1beta1, as configz prints them): topologyManagerPolicy none,
topologyManagerScope container, cpuManagerPolicy none. A configuration is checked against the GPU pods and the
GPU nodes in the same input: it is taken to be the configuration of those nodes.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from gpufleet.doctor.facts import NodeFacts
from gpufleet.doctor.objects import (
    K8sObject,
    PodTemplate,
    as_dict,
    container_gpus,
    node_selection_matches,
    quantity,
    resources,
)
from gpufleet.doctor.rules.base import Context, Hit, rule
from gpufleet.model import Severity

ALIGNING = ("restricted", "single-numa-node")  # policies that refuse a pod whose resources are not aligned
# NIC resources device plugins advertise: rdma/<pool> (k8s-rdma-shared-dev-plugin), nvidia.com/<...>hca / rdma
# (NVIDIA Network Operator), SR-IOV pools (sriov in the name, openshift.io/<pool>), AWS EFA
_NIC = re.compile(r"^(rdma/.+|nvidia\.com/.*(hca|rdma|sriov).*|.*sriov.*|openshift\.io/.+|vpc\.amazonaws\.com/efa)$")


@dataclass(frozen=True, slots=True)
class KubeletConfig:
    """One kubelet's configuration as given: where from, and its fields (configz's unwrapped)."""

    fields: dict[str, Any]
    file: str
    line: int
    obj: K8sObject | None  # the KubeletConfiguration object; None for a configz capture

    def get(self, name: str, default: str) -> str:
        value = self.fields.get(name)
        return str(value) if isinstance(value, str) and value else default

    @property
    def topology_policy(self) -> str:
        return self.get("topologyManagerPolicy", "none")

    @property
    def topology_scope(self) -> str:
        return self.get("topologyManagerScope", "container")

    @property
    def cpu_policy(self) -> str:
        return self.get("cpuManagerPolicy", "none")

    @property
    def reserved_cpus(self) -> float:
        """CPUs the kubelet keeps from pods: reservedSystemCPUs (a CPU list) wins over kube- and systemReserved."""
        listed = self.fields.get("reservedSystemCPUs")
        if isinstance(listed, str) and listed.strip():
            return float(_count_cpus(listed))
        return sum(quantity(as_dict(self.fields.get(k)).get("cpu")) for k in ("kubeReserved", "systemReserved"))

    def hit(self, message: str, fix: str, severity: Severity | None = None) -> Hit:
        if self.obj is not None:
            return Hit(message, fix, obj=self.obj, severity=severity)
        return Hit(message, fix, file=self.file, line=self.line, severity=severity, object_ref="configz")


def _count_cpus(text: str) -> int:
    count = 0
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        if lo.isdigit() and (not hi or hi.isdigit()):
            count += int(hi or lo) - int(lo) + 1
    return count


def kubelet_configs(ctx: Context) -> list[KubeletConfig]:
    found = [KubeletConfig(o.data, o.doc.file, o.doc.line, o) for o in ctx.of_kind("KubeletConfiguration")]
    for doc in ctx.configs:
        wrapped = doc.data.get("kubeletconfig")
        if isinstance(wrapped, dict):
            found.append(KubeletConfig(wrapped, doc.file, doc.line, None))
    return found


def gpu_templates(ctx: Context) -> list[PodTemplate]:
    return [t for t in ctx.templates if t.gpu_request() > 0]


def gpu_nodes(ctx: Context) -> list[NodeFacts]:
    return [n for n in ctx.facts.nodes.values() if n.is_gpu_node and n.gpus > 0]


def nic_resources(container: dict[str, Any]) -> list[str]:
    names = {*resources(container, "limits"), *resources(container, "requests")}
    return sorted(str(n) for n in names if _NIC.match(str(n)))


def _where(template: PodTemplate) -> str:
    return template.obj.ref


# -- GF042: the Topology Manager's policy and scope ------------------------------------------------------------------


@rule("GF042", reads=("KubeletConfiguration", "kubelet-configz"))
def topology_policy(ctx: Context) -> Iterator[Hit]:
    templates = gpu_templates(ctx)
    nodes = gpu_nodes(ctx)
    for config in kubelet_configs(ctx):
        policy = config.topology_policy
        if policy == "none":
            yield config.hit(
                "topologyManagerPolicy is none (the default): the kubelet hands a GPU pod its GPUs, NICs and CPUs each"
                " on its own, and a GPU's traffic may leave through a NIC on the other socket",
                "set topologyManagerPolicy: restricted (or single-numa-node for pods that fit one NUMA node) with"
                " cpuManagerPolicy: static, then drain the node and restart the kubelet",
            )
        elif policy == "best-effort":
            yield config.hit(
                "topologyManagerPolicy is best-effort: a GPU pod whose GPUs, NICs and CPUs cannot be aligned is still"
                " admitted, misaligned, and nothing says so",
                "set topologyManagerPolicy: restricted so a misaligned pod is refused and rescheduled",
                Severity.info,
            )
        if policy in ALIGNING and config.topology_scope == "container":
            for t in templates:
                sharing = [c for c in t.containers(init=False) if _asks_aligned(c)]
                if len(sharing) > 1:
                    names = ", ".join(str(c.get("name", "?")) for c in sharing)
                    yield config.hit(
                        f"topologyManagerScope is container (the default) and {_where(t)} has {len(sharing)}"
                        f" containers asking for GPUs, NICs or whole CPUs ({names}): each is aligned on its own,"
                        " so the pod as a whole may straddle NUMA nodes",
                        "set topologyManagerScope: pod, so the pod's containers get resources from the same NUMA"
                        " node(s)",
                    )
        if policy == "single-numa-node":
            yield from _too_big_for_one_numa_node(config, templates, nodes)


def _asks_aligned(container: dict[str, Any]) -> bool:
    """A container the Topology Manager has hints for: devices (GPUs, NICs) or exclusive (whole) CPUs."""
    cpu = quantity(resources(container, "requests").get("cpu", resources(container, "limits").get("cpu")))
    return container_gpus(container) > 0 or bool(nic_resources(container)) or (cpu >= 1 and cpu == int(cpu))


def _too_big_for_one_numa_node(
    config: KubeletConfig, templates: list[PodTemplate], nodes: list[NodeFacts]
) -> Iterator[Hit]:
    known = [n.host.gpus_per_numa_node for n in nodes if n.host is not None and n.host.gpus_per_numa_node]
    per_numa = max(known) if known else None
    most = max((n.gpus for n in nodes), default=0.0)
    for t in templates:
        asked = t.gpu_request()
        if per_numa is not None and asked > per_numa:
            yield config.hit(
                f"topologyManagerPolicy is single-numa-node and {_where(t)} asks for {asked:g} GPUs, more than one NUMA"
                f" node holds ({per_numa}, from the nodes' host facts): the kubelet refuses it (TopologyAffinityError)",
                "use topologyManagerPolicy: restricted (aligned to the fewest NUMA nodes that fit), or ask for at most"
                f" {per_numa} GPUs per pod",
                Severity.critical,
            )
        elif per_numa is None and most >= 2 and asked >= most:
            yield config.hit(
                f"topologyManagerPolicy is single-numa-node and {_where(t)} asks for all {asked:g} GPUs of a node: on"
                " a two-socket node (DGX/HGX: 4 GPUs per socket) the kubelet refuses it (TopologyAffinityError)",
                "use topologyManagerPolicy: restricted for whole-node pods, or check with `nvidia-smi topo -m` (or"
                " `gpufleet doctor --host-facts`, gpuNumaNodes) that every GPU shares one NUMA node",
            )


# -- GF043: the CPU manager ------------------------------------------------------------------------------------------


@rule("GF043", reads=("KubeletConfiguration", "kubelet-configz"))
def cpu_manager(ctx: Context) -> Iterator[Hit]:
    templates = gpu_templates(ctx)
    for config in kubelet_configs(ctx):
        static = config.cpu_policy == "static"
        if static and config.reserved_cpus <= 0:
            yield config.hit(
                "cpuManagerPolicy is static with no CPU reserved (no reservedSystemCPUs, no cpu in kubeReserved or"
                " systemReserved): the kubelet will not start, since the shared CPU pool could become empty",
                'reserve CPUs for the system: reservedSystemCPUs: "0-1" (whole cores, on each socket\'s first'
                ' core for two sockets) or kubeReserved/systemReserved cpu: "1"',
                Severity.critical,
            )
        if not static and config.topology_policy in ALIGNING:
            yield config.hit(
                f"topologyManagerPolicy is {config.topology_policy} but cpuManagerPolicy is none: CPUs give the"
                " Topology Manager no hints, so a GPU pod's GPUs and NICs are aligned and its CPUs are not",
                "set cpuManagerPolicy: static (with reservedSystemCPUs), drain the node, remove"
                " /var/lib/kubelet/cpu_manager_state and restart the kubelet",
            )
        if static:
            for t in templates:
                why = _not_pinned(t)
                if why:
                    yield config.hit(
                        f"cpuManagerPolicy is static but {_where(t)} gets no exclusive CPUs: {why}; its CPUs come"
                        " from the shared pool and are not aligned with its GPUs",
                        "make the pod Guaranteed (every container: requests equal to limits for cpu and memory)"
                        " with a whole number of CPUs",
                        Severity.info,
                    )


def _not_pinned(template: PodTemplate) -> str:
    """Why the static CPU manager would give this pod no exclusive CPUs ("" when it would)."""
    for c in template.containers():
        limits, requests = resources(c, "limits"), resources(c, "requests")
        for name in ("cpu", "memory"):
            limit = limits.get(name)
            request = requests.get(name, limit)
            if limit is None or quantity(request) != quantity(limit):
                return f"container {c.get('name', '?')} has no {name} limit equal to its request (not Guaranteed)"
    cpus = [quantity(resources(c, "limits").get("cpu")) for c in template.containers(init=False)]
    if not any(cpu >= 1 and cpu == int(cpu) for cpu in cpus):
        return "no container asks for a whole number of CPUs"
    return ""


# -- GF044: CPUs and memory per GPU ----------------------------------------------------------------------------------


@rule("GF044", reads=("KubeletConfiguration", "kubelet-configz"))
def cpus_per_gpu(ctx: Context) -> Iterator[Hit]:
    reserved = max((c.reserved_cpus for c in kubelet_configs(ctx)), default=0.0)
    # nodes alike in GPUs, CPUs and memory are judged once, named together
    shapes: dict[tuple[float, float, float], list[NodeFacts]] = {}
    for node in gpu_nodes(ctx):
        cpus = node.allocatable.get("cpu") or max(0.0, node.capacity.get("cpu", 0.0) - reserved)
        memory = node.allocatable.get("memory") or node.capacity.get("memory", 0.0)
        shapes.setdefault((node.gpus, cpus, memory), []).append(node)
    for t in gpu_templates(ctx):
        asked = t.gpu_request()
        containers = list(t.containers(init=False))
        need_cpu = sum(_request(c, "cpu") for c in containers)
        need_mem = sum(_request(c, "memory") for c in containers)
        for (gpus, cpus, memory), alike in shapes.items():
            nodes = [n for n in alike if node_selection_matches(t.spec, n.name, n.labels)]
            if not nodes or asked > gpus:
                continue
            pods = int(gpus // asked)  # pods of this shape the node's GPUs take
            for what, need, have, unit in (("CPUs", need_cpu, cpus, ""), ("memory", need_mem, memory, "B")):
                if need <= 0 or have <= 0 or pods * need <= have:
                    continue
                fit = int(have // need)
                names = ", ".join(n.name for n in nodes[:3]) + (f" and {len(nodes) - 3} more" if len(nodes) > 3 else "")
                yield Hit(
                    f"{names} {'has' if len(nodes) == 1 else 'have'} {_show(have, unit)} allocatable {what} for"
                    f" {gpus:g} GPUs; {_where(t)} asks {_show(need, unit)} with {asked:g} GPU(s), so only {fit} such"
                    f" pod(s) fit per node and {(pods - fit) * asked:g} GPU(s) stay idle",
                    f"ask at most {_show(have / pods, unit)} {what} per pod ({_show(have / gpus, unit)} per GPU), or"
                    " lower the kubelet's reservations",
                    file=nodes[0].source,
                    object_ref=f"Node/{nodes[0].name}",
                    severity=Severity.critical if fit == 0 else None,
                )


def _request(container: dict[str, Any], name: str) -> float:
    """What the scheduler counts: the request, else the limit (which the request defaults to)."""
    value = resources(container, "requests").get(name, resources(container, "limits").get(name))
    return quantity(value)


def _show(value: float, unit: str) -> str:
    if unit == "B":
        return f"{value / 2**30:.0f}Gi"
    return f"{value:g}"


# -- GF045: NIC resources without an aligning policy -----------------------------------------------------------------


@rule("GF045", reads=("KubeletConfiguration", "kubelet-configz"))
def nics_unaligned(ctx: Context) -> Iterator[Hit]:
    asking = []
    for t in gpu_templates(ctx):
        names = sorted({n for c in t.containers() for n in nic_resources(c)})
        if names:
            asking.append((t, names))
    offered = sorted({str(r) for n in gpu_nodes(ctx) for r in n.capacity if _NIC.match(str(r))})
    for config in kubelet_configs(ctx):
        if config.topology_policy in ALIGNING:
            continue
        for t, names in asking:
            yield config.hit(
                f"{_where(t)} asks for GPUs and NIC resources ({', '.join(names)}) but topologyManagerPolicy is"
                f" {config.topology_policy}: the device manager may give it a NIC on the other socket from its GPUs",
                "set topologyManagerPolicy: restricted (or single-numa-node) and topologyManagerScope: pod, so the"
                " GPU and the NIC come from the same NUMA node",
            )
        if offered and not asking:
            yield config.hit(
                f"GPU nodes offer NIC resources ({', '.join(offered)}) but topologyManagerPolicy is"
                f" {config.topology_policy}: pods asking for GPUs and NICs get them without alignment",
                "set topologyManagerPolicy: restricted (or single-numa-node) and topologyManagerScope: pod",
                Severity.info,
            )
