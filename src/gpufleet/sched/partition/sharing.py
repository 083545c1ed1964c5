"""What a node advertises under a device-plugin config, and whether a pod's GPU request is admitted.

Covers the MIG strategies (none/single/mixed), time-slicing and MPS replicas, MPS memory and thread limits, and
per-GPU milli-shares (the openb trace's `gpu_milli`). The GPU Feature Discovery labels that follow are in gfd.py.
Capacity counts every device; allocatable only healthy ones (kubelet's device manager does the same).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from gpufleet.errors import UserError
from gpufleet.model.gpu import Gpu
from gpufleet.model.node import Node
from gpufleet.model.workload import GpuRequest, GpuSharing, Pod
from gpufleet.sched.partition.device_plugin import (
    GPU_RESOURCE,
    DevicePluginConfig,
    MigStrategy,
    SharingStrategy,
    mig_resource_name,
)


@dataclass(frozen=True, slots=True)
class Device:
    """One device the plugin lists: a full GPU or a MIG instance, before replication."""

    id: str
    gpu_index: int
    healthy: bool
    profile: str | None = None  # MIG profile, None for a full GPU


@dataclass(slots=True)
class Advertised:
    """A node's device-plugin resources: capacity and allocatable per resource name, and why anything is missing."""

    capacity: dict[str, int] = field(default_factory=dict)
    allocatable: dict[str, int] = field(default_factory=dict)
    replicas: dict[str, int] = field(default_factory=dict)  # per advertised name; 1 when not shared
    devices: dict[str, list[Device]] = field(default_factory=dict)  # per advertised name, before replication
    errors: list[str] = field(default_factory=list)  # plugin start-up errors: nothing is advertised then
    shared: set[str] = field(default_factory=set)


def _full(gpu: Gpu) -> Device:
    return Device(gpu.uuid, gpu.index, gpu.schedulable)


def _mig_devices(gpu: Gpu) -> list[Device]:
    return [Device(i.uuid, gpu.index, gpu.schedulable, i.profile) for i in gpu.mig_instances]


def _devices_by_resource(node: Node, strategy: MigStrategy) -> tuple[dict[str, list[Device]], list[str]]:
    """Base resources per strategy, with the plugin's own validation errors (it advertises nothing on error)."""
    if strategy is MigStrategy.none:
        return ({GPU_RESOURCE: [_full(g) for g in node.gpus]} if node.gpus else {}), []
    mig_on = [g for g in node.gpus if g.mig_enabled]
    empty = [g for g in mig_on if not g.mig_instances]
    if empty:
        return {}, [
            "invalid MIG configuration: at least one device with migEnabled=true was not configured correctly: "
            f"device {empty[0].index} has no MIG devices configured"
        ]
    out: dict[str, list[Device]] = {}
    full = [_full(g) for g in node.gpus if not g.mig_enabled]
    if strategy is MigStrategy.single:
        if not mig_on:
            return ({GPU_RESOURCE: full} if full else {}), []
        profiles = {i.profile for g in mig_on for i in g.mig_instances}
        if len(profiles) > 1:
            return {}, ["invalid MIG configuration: more than one MIG device type present on node"]
        if full:
            return {}, ["all devices on the node must be configured with the same migEnabled value"]
        return {GPU_RESOURCE: [d for g in mig_on for d in _mig_devices(g)]}, []
    if full:
        out[GPU_RESOURCE] = full
    for gpu in mig_on:
        for dev in _mig_devices(gpu):
            out.setdefault(mig_resource_name(dev.profile or ""), []).append(dev)
    return out, []


def advertise(node: Node, config: DevicePluginConfig) -> Advertised:
    """Resources the device plugin would register on `node` (8 GPUs x replicas 10 -> nvidia.com/gpu: 80)."""
    base, errors = _devices_by_resource(node, config.mig_strategy)
    adv = Advertised(errors=errors)
    sharing = config.sharing
    rep = sharing.replicated
    if rep is not None:
        for entry in rep.resources:
            if sharing.strategy is SharingStrategy.mps and entry.name != GPU_RESOURCE:
                adv.errors.append(f"MPS sharing supports only {GPU_RESOURCE}, not {entry.name}")
            elif entry.name != GPU_RESOURCE and not entry.name.startswith("nvidia.com/mig-"):
                adv.errors.append(f"{entry.name} cannot be shared: only {GPU_RESOURCE} and MIG resources can")
        if sharing.strategy is SharingStrategy.mps and any(g.mig_enabled for g in node.gpus):
            adv.errors.append("MPS sharing is not supported on devices with MIG enabled")
    if adv.errors:
        return adv
    for name, devices in base.items():
        replicated = sharing.replicas_for(name)
        replicas = replicated.replicas if replicated else 1
        shown = sharing.shared_name(name)
        adv.devices[shown] = devices
        adv.replicas[shown] = replicas
        adv.capacity[shown] = len(devices) * replicas
        adv.allocatable[shown] = sum(d.healthy for d in devices) * replicas
        if replicated:
            adv.shared.add(shown)
    return adv


@dataclass(frozen=True, slots=True)
class MpsLimits:
    """Per-client limits the plugin's MPS control daemon sets: memory/replicas and 100/replicas percent of SMs."""

    pinned_memory_limit_mib: int
    active_thread_percentage: int

    def control_commands(self, device_index: int) -> list[str]:
        return [
            f"set_default_active_thread_percentage {self.active_thread_percentage}",
            f"set_default_device_pinned_mem_limit {device_index} {self.pinned_memory_limit_mib}M",
        ]


def mps_limits(gpu: Gpu, replicas: int) -> MpsLimits:
    if replicas < 1:
        raise UserError(f"MPS replicas must be at least 1, got {replicas}")
    return MpsLimits(gpu.memory_mib // replicas, 100 // replicas)


# --- admission -----------------------------------------------------------------------------------------------

_QUANTITY = re.compile(r"^([+-]?\d+(?:\.\d+)?)(m|k|M|G|Ki|Mi|Gi)?$")
_SCALE: dict[str | None, int | Fraction] = {
    None: 1, "m": Fraction(1, 1000), "k": 1000, "M": 10**6, "G": 10**9, "Ki": 1024, "Mi": 2**20, "Gi": 2**30,
}  # fmt: skip


def extended_resource_count(resource: str, value: str | int | float, field: str = "limits") -> int:
    """An extended resource quantity as an integer; fractions ("0.5", "500m") are rejected as Kubernetes does."""
    text = str(value).strip()
    match = _QUANTITY.match(text)
    if not match:
        raise UserError(f"{field}[{resource}]: Invalid value: {text!r}: not a quantity", fix="write a whole number")
    amount = Fraction(match.group(1)) * _SCALE[match.group(2)]
    if amount.denominator != 1:
        raise UserError(
            f"{field}[{resource}]: Invalid value: {text!r}: must be an integer",
            fix=f"extended resources such as {resource} are whole devices; use MIG, time-slicing, MPS or a DRA "
            "claim for a share of a GPU",
        )
    if amount < 0:
        raise UserError(f"{field}[{resource}]: Invalid value: {text!r}: must be greater than or equal to 0")
    return int(amount)


def pod_extended_resources(requests: Mapping[str, object], limits: Mapping[str, object]) -> dict[str, int]:
    """Extended resources of a container: they live in limits; a request, if given, must equal the limit."""
    out: dict[str, int] = {}
    for name in sorted(set(requests) | set(limits)):
        if "/" not in name or name.startswith(("kubernetes.io/", "requests.")):
            continue
        if name not in limits:
            raise UserError(
                f"limits[{name}]: Required value: extended resources must be set in limits",
                fix=f"put {name} under resources.limits (requests default to limits)",
            )
        limit = extended_resource_count(name, limits[name])  # type: ignore[arg-type]
        if name in requests and extended_resource_count(name, requests[name], "requests") != limit:  # type: ignore[arg-type]
            raise UserError(f"requests[{name}]: Invalid value: must be equal to {name} limit of {limit}")
        out[name] = limit
    return out


def requested_resource(request: GpuRequest, config: DevicePluginConfig) -> tuple[str, int]:
    """The device-plugin resource name and count a GpuRequest asks for under `config`."""
    strategy, sharing = config.mig_strategy, config.sharing
    if request.sharing is GpuSharing.exclusive:
        return GPU_RESOURCE, request.count
    if request.sharing is GpuSharing.mig:
        if not request.mig_profile:
            raise UserError("a MIG request needs a profile", fix="set mig_profile, e.g. 1g.10gb")
        if strategy is MigStrategy.none:
            raise UserError(
                f"MIG profile {request.mig_profile} requested but the device plugin runs migStrategy=none",
                fix="set flags.migStrategy to mixed (or single with one profile per node)",
            )
        base = GPU_RESOURCE if strategy is MigStrategy.single else mig_resource_name(request.mig_profile)
        return sharing.shared_name(base), request.count
    if request.sharing in (GpuSharing.time_slicing, GpuSharing.mps):
        wanted = SharingStrategy.mps if request.sharing is GpuSharing.mps else SharingStrategy.time_slicing
        if sharing.strategy is not wanted:
            raise UserError(
                f"the request wants {wanted} replicas but the device plugin shares GPUs by {sharing.strategy}",
                fix=f"configure sharing.{'mps' if wanted is SharingStrategy.mps else 'timeSlicing'}",
            )
        return sharing.shared_name(GPU_RESOURCE), request.count
    raise UserError(
        f"{request.sharing} requests are not device-plugin resources",
        fix="milli-shares go through MilliShares, DRA claims through the DRA allocator",
    )


def admit(
    request: GpuRequest, node: Node, config: DevicePluginConfig, in_use: Mapping[str, int] | None = None
) -> tuple[str, int]:
    """Check a request against what the node advertises; returns (resource, count) or raises a UserError."""
    resource, count = requested_resource(request, config)
    adv = advertise(node, config)
    if adv.errors:
        raise UserError(f"node {node.name}: the device plugin advertises nothing: {adv.errors[0]}")
    if resource in adv.shared and count > 1 and config.sharing.fail_requests_greater_than_one:
        raise UserError(
            f"request for '{resource}: {count}' too large: maximum request size for shared resources is 1",
            fix="request 1 replica per container (UnexpectedAdmissionError; the pod must be recreated)",
        )
    if resource not in adv.allocatable:
        have = ", ".join(f"{k}: {v}" for k, v in adv.allocatable.items()) or "no GPU resources"
        raise UserError(f"node {node.name} does not advertise {resource} (it has {have})")
    free = adv.allocatable[resource] - (in_use or {}).get(resource, 0)
    if count > free:
        raise UserError(
            f"requested number of devices unavailable for {resource}. Requested: {count}, Available: {max(free, 0)}"
        )
    return resource, count


def admit_pod(pod: Pod, node: Node, config: DevicePluginConfig, in_use: Mapping[str, int] | None = None) -> str:
    """Admit a pod's GPU request on `node` (milli-shares against the node's free thousandths); the resource taken."""
    if pod.gpu.sharing is GpuSharing.milli:
        chosen = MilliShares.for_node(node).fit(pod.gpu)
        if chosen is None:
            raise UserError(f"pod {pod.namespace}/{pod.name}: no GPU on {node.name} has {pod.gpu.milli} milli free")
        return "gpu-milli"
    if pod.gpu.count == 0 and pod.gpu.sharing is GpuSharing.exclusive:
        return ""
    try:
        resource, _count = admit(pod.gpu, node, config, in_use)
    except UserError as exc:
        raise UserError(f"pod {pod.namespace}/{pod.name}: {exc.message}", fix=exc.fix) from None
    return resource


# --- milli-shares (openb gpu_milli) --------------------------------------------------------------------------


@dataclass(slots=True)
class MilliShares:
    """Free thousandths of each GPU on a node: a pod takes `milli` of one GPU, or whole (1000) GPUs."""

    free: list[int]

    @classmethod
    def for_node(cls, node: Node) -> MilliShares:
        return cls([1000 if g.schedulable else 0 for g in node.gpus])

    def fit(self, request: GpuRequest) -> list[int] | None:
        """GPU indices the request would take (best fit for a share, emptiest-first never), or None."""
        count, milli = max(request.count, 1), request.milli
        if request.sharing is GpuSharing.exclusive:
            milli = 1000
        if not 0 < milli <= 1000:
            raise UserError(f"gpu_milli must be in 1..1000, got {milli}")
        if milli < 1000 and count > 1:
            raise UserError(f"a {milli}-milli share is of one GPU; {count} GPUs were asked for", fix="set count 1")
        if milli == 1000:
            whole = [i for i, f in enumerate(self.free) if f == 1000]
            return whole[:count] if len(whole) >= count else None
        fitting = [i for i, f in enumerate(self.free) if f >= milli]
        if not fitting:
            return None
        return [min(fitting, key=lambda i: (self.free[i], i))]

    def take(self, request: GpuRequest) -> list[int]:
        chosen = self.fit(request)
        if chosen is None:
            raise UserError(f"no GPU has {request.milli} milli free (free: {self.free})")
        each = 1000 if request.sharing is GpuSharing.exclusive or request.milli == 1000 else request.milli
        for i in chosen:
            self.free[i] -= each
        return chosen
