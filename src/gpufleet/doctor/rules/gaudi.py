"""Rules on Intel Gaudi: multi-node jobs kept off the cards' own scale-out ports, and huge pages (Gaudi pods without
them, Gaudi nodes that reserve none)."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any

from gpufleet.catalog.vendors import get_vendor
from gpufleet.doctor.facts import NodeFacts
from gpufleet.doctor.objects import (
    PodTemplate,
    as_dict,
    container_accelerators,
    container_env,
    exact_quantity,
    node_selection_matches,
    resources,
)
from gpufleet.doctor.rules.base import Context, Hit, rule
from gpufleet.doctor.rules.vendors import pods_of
from gpufleet.doctor.rules.workloads import ON, TRAINING_KINDS
from gpufleet.model import Severity

GAUDI = get_vendor("intel").resource  # habana.ai/gaudi
EFA = "vpc.amazonaws.com/efa"
HUGEPAGES = "hugepages-2Mi"
MIB = Decimal(2**20)
GANG_KINDS = TRAINING_KINDS | {"Job"}  # kinds whose pods work as one job (a Job when parallelism is above 1)
AWS_GAUDI_INSTANCES = ("dl1.",)  # EC2 instance types with Gaudi (DL1: 8 first-generation Gaudi, EFA for scale-out)
INSTANCE_LABELS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")


def _name(c: dict[str, Any]) -> str:
    return str(c.get("name", "?"))


def gaudis(c: dict[str, Any]) -> float:
    return container_accelerators(c).get(GAUDI, 0.0)


def gaudi_nodes(ctx: Context) -> list[NodeFacts]:
    return [n for n in ctx.facts.nodes.values() if n.capacity.get(GAUDI, 0.0) > 0]


def _usable(t: PodTemplate, nodes: list[NodeFacts]) -> list[NodeFacts]:
    return [n for n in nodes if node_selection_matches(t.spec, n.name, n.labels)]


def _listed(nodes: list[NodeFacts]) -> str:
    names = [n.name for n in nodes]
    return ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")


# --- GF025: multi-node jobs off the scale-out ports ------------------------------------------------------------------


def gangs(ctx: Context) -> Iterator[tuple[list[PodTemplate], int]]:
    """(the Gaudi templates of one job, how many Gaudi pods the job runs) for jobs of more than one such pod."""
    by_object: dict[int, list[PodTemplate]] = {}
    for t in ctx.templates:
        if t.obj.kind in GANG_KINDS and any(gaudis(c) > 0 for c in t.containers()):
            by_object.setdefault(id(t.obj), []).append(t)
    for templates in by_object.values():
        pods = sum(t.replicas for t in templates)
        if pods > 1:
            yield templates, pods


def _on_aws(t: PodTemplate, nodes: list[NodeFacts]) -> str:
    """Why the pod runs on AWS Gaudi instances (where EFA is the scale-out network), or ""."""
    for key in INSTANCE_LABELS:
        value = str(as_dict(t.spec.get("nodeSelector")).get(key, ""))
        if value.startswith(AWS_GAUDI_INSTANCES):
            return f"it selects {key}={value}"
    usable = _usable(t, nodes)
    if usable and all(n.capacity.get(EFA, 0.0) > 0 for n in usable):
        return f"the Gaudi nodes it may use ({_listed(usable)}) offer {EFA}"
    return ""


@rule("GF025", reads=("RuntimeClass",))
def gaudi_scale_out(ctx: Context) -> Iterator[Hit]:
    handlers = {rc.name: str(rc.data.get("handler") or "") for rc in ctx.of_kind("RuntimeClass")}
    nodes = gaudi_nodes(ctx)
    for templates, pods in gangs(ctx):
        for t in templates:
            job = f"{pods_of(t)} ({pods} Gaudi pods in all, one job)"
            efa = any(EFA in resources(c, "limits") or EFA in resources(c, "requests") for c in t.containers())
            runtime_class = str(t.spec.get("runtimeClassName") or "")
            handler = handlers.get(runtime_class, "")
            if runtime_class and "habana" not in f"{runtime_class} {handler}".lower() and not t.spec.get("hostNetwork"):
                shown = f"{runtime_class} (handler {handler})" if handler else runtime_class
                yield Hit(
                    f"{job} runs with runtimeClassName {shown}, not the habana container runtime: its hook, which"
                    " moves the allocated cards' scale-out interfaces into the pod and mounts their uverbs devices,"
                    " never runs, so HCCL finds no Gaudi scale-out NIC and falls back to host NICs (or has no"
                    " scale-out at all)",
                    "drop runtimeClassName so the pods use the habana runtime the Intel Gaudi Base Operator makes the"
                    " default, or point it at a RuntimeClass whose handler is habana",
                    t.obj,
                )
            for c in t.containers():
                value = container_env(c).get("HCCL_OVER_OFI", "")
                if value.lower() in ON and not efa:
                    yield Hit(
                        f"{job}: container {_name(c)!r} sets HCCL_OVER_OFI={value}: this turns HCCL's"
                        " auto-detection off and forces scale-out through host NICs with host memory (libfabric),"
                        " skipping the cards' own RoCE ports and Gaudi Direct over host NICs",
                        "remove HCCL_OVER_OFI so HCCL's auto-detection takes the fastest path there is (the Gaudi"
                        " NICs when connected, else Gaudi Direct over verbs or EFA, else host memory)",
                        t.obj,
                    )
            aws = _on_aws(t, nodes)
            if aws and not efa:
                yield Hit(
                    f"{job} runs on AWS Gaudi instances ({aws}) without asking for {EFA}: EFA is their"
                    " scale-out network, and without it HCCL falls back to TCP over the ENA interface",
                    f"ask for the EFA devices in every Gaudi container: resources.limits: {{{EFA}: 4}} (next to"
                    f" {GAUDI}: 8 on dl1.24xlarge), as Habana's EKS examples do",
                    t.obj,
                )


# --- GF026: huge pages ---------------------------------------------------------------------------------------------

HUGEPAGES_FIX = (
    "give every Gaudi container 2 MiB huge pages, with memory: resources: {limits: {habana.ai/gaudi: N, memory:"
    " <M>, hugepages-2Mi: <H>}} (Habana's examples: 95000Mi with memory 409Gi; 42000Mi for 8 cards on EKS; size it"
    " to the workload), and reserve them on the Gaudi nodes"
)


def _hugepages(c: dict[str, Any]) -> tuple[Any, Any]:
    return resources(c, "limits").get(HUGEPAGES), resources(c, "requests").get(HUGEPAGES)


def _container_hits(t: PodTemplate, c: dict[str, Any]) -> Iterator[Hit]:
    where = f"container {_name(c)!r} ({t.path}) asks for {gaudis(c):g} {GAUDI}"
    limit, request = _hugepages(c)
    names = set(resources(c, "limits")) | set(resources(c, "requests"))
    if limit is None and request is None:
        if not any(n.startswith("hugepages-") for n in names):
            yield Hit(
                f"{where} without huge pages: its huge-page limit is 0, and Gaudi workloads that map host memory"
                " through 2 MiB pages fail to allocate it (Habana's Kubernetes examples give every Gaudi pod"
                " hugepages-2Mi)",
                HUGEPAGES_FIX,
                t.obj,
            )
        return
    if not names & {"cpu", "memory"}:
        yield Hit(
            f"{where} and {HUGEPAGES} without any cpu or memory request or limit: the API server refuses it"
            ' ("HugePages require cpu or memory"), so no pod is created',
            f"add memory (or cpu) to the container's resources next to {HUGEPAGES}",
            t.obj,
            severity=Severity.critical,
        )
    if request is not None and (limit is None or exact_quantity(limit) != exact_quantity(request)):
        limited = "without a limit" if limit is None else f"but {limit} in limits"
        yield Hit(
            f"{where} and {HUGEPAGES}: {request} in requests {limited}: huge pages cannot be overcommitted, so the"
            " API server refuses a request that is not equal to the limit",
            f"set resources.limits[{HUGEPAGES!r}] (requests may be left out: they default to the limit)",
            t.obj,
            severity=Severity.critical,
        )


@rule("GF026")
def gaudi_hugepages(ctx: Context) -> Iterator[Hit]:
    nodes = gaudi_nodes(ctx)
    without = [n for n in nodes if n.allocatable.get(HUGEPAGES, 0.0) <= 0]
    if without:
        first = without[0]
        yield Hit(
            f"Gaudi nodes {_listed(without)} have no {HUGEPAGES} allocatable: pods that ask for huge pages (as"
            " Habana's examples do) cannot be scheduled there, and pods that do not get none",
            "reserve 2 MiB huge pages on the Gaudi nodes (sysctl vm.nr_hugepages=<pages> persisted in"
            " /etc/sysctl.d, or hugepagesz=2M hugepages=<pages> on the kernel command line; the Intel Gaudi Base"
            " Operator's ClusterPolicy sets them with driver.driver_loader.hugepages), then restart the kubelet so"
            " allocatable shows them",
            file=first.source,
            object_ref=f"Node/{first.name}",
        )
    for t in ctx.templates:
        gaudi_containers = [c for c in t.containers() if gaudis(c) > 0]
        for c in gaudi_containers:
            yield from _container_hits(t, c)
        wanted = sum((exact_quantity(_hugepages(c)[0] or _hugepages(c)[1]) or Decimal(0)) for c in t.containers())
        usable = _usable(t, nodes)
        if not gaudi_containers or wanted <= 0 or not usable:
            continue
        most = Decimal(int(max(n.allocatable.get(HUGEPAGES, 0.0) for n in usable)))
        if most < wanted:
            yield Hit(
                f"{pods_of(t)} asks for {wanted / MIB:g}Mi of {HUGEPAGES} but the Gaudi nodes it may use"
                f" ({_listed(usable)}) have at most {most / MIB:g}Mi allocatable: it stays Pending"
                f" (Insufficient {HUGEPAGES})",
                f"ask for at most {most / MIB:g}Mi, or reserve more 2 MiB pages on the Gaudi nodes",
                t.obj,
                severity=Severity.critical,
            )
