"""Kubernetes resource quantities and the API server's rules for container resources.

Per-container requests default to limits; an extended resource (a name with a domain other than kubernetes.io, such
as ``nvidia.com/gpu``) is an integer, must have a limit, and a request different from its limit is invalid; the pod's
effective request is ``max(sum(containers), max(initContainers))`` plus its overhead.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from functools import cache
from typing import Any

from gpufleet.catalog.vendors import vendor_of_resource
from gpufleet.errors import ParseError
from gpufleet.sched.partition.amd_partition import is_partition_resource

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1), "k": Decimal(10**3)}
_DECIMAL.update({"M": Decimal(10**6), "G": Decimal(10**9), "T": Decimal(10**12), "P": Decimal(10**15)})
_DECIMAL["E"] = Decimal(10**18)
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
MIG_PREFIX = "nvidia.com/mig-"
SHARED_SUFFIX = ".shared"  # NVIDIA's time-sliced or MPS replicas under renameByDefault
# what to request instead of a fraction, by vendor
_WHOLE_FIX = {
    "nvidia": "request whole GPUs, or a MIG profile / shared replica resource",
    "amd": "request whole GPUs, or a partition (amd.com/cpx_nps4) where the device plugin uses mixed naming",
    "intel": "request whole Gaudi devices: the device plugin does not share them",
}


def parse_quantity(text: str | int | float, *, what: str = "quantity") -> Decimal:
    """A Kubernetes resource.Quantity ("500m", "16Gi", "1e3", "1.5") as an exact decimal."""
    if isinstance(text, int | float):
        return Decimal(str(text))
    raw = text.strip()
    number, suffix = raw, ""
    for suf in sorted(_BINARY, key=len, reverse=True):
        if raw.endswith(suf):
            number, suffix = raw[: -len(suf)], suf
            break
    else:
        if raw and raw[-1] in "numkMGTPE":
            number, suffix = raw[:-1], raw[-1]
    if not _NUMBER.fullmatch(number):
        raise ParseError(
            f"{what}: {text!r} is not a Kubernetes quantity", fix='write e.g. "500m", "2", "16Gi" or "1e3"'
        )
    value = Decimal(number)
    if suffix in _BINARY:
        return value * _BINARY[suffix]
    return value * _DECIMAL[suffix]


def is_extended_resource(name: str) -> bool:
    """Extended resources have a domain that is not kubernetes.io (nvidia.com/gpu, example.com/foo)."""
    if "/" not in name:
        return False
    domain = name.split("/", 1)[0]
    return not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))


@cache
def accelerator_vendor(name: str) -> str | None:
    """The vendor whose accelerators a resource asks for: a whole device (nvidia.com/gpu, amd.com/gpu,
    habana.ai/gaudi), an NVIDIA MIG slice or shared replica, an AMD partition (amd.com/cpx_nps4); None otherwise."""
    spec = vendor_of_resource(name.removesuffix(SHARED_SUFFIX))
    if spec is not None:
        return spec.name
    if name.startswith(MIG_PREFIX):
        return "nvidia"
    if is_partition_resource(name):
        return "amd"
    return None


def accelerators(requests: dict[str, int]) -> dict[str, int]:
    """The accelerator resources among a pod's requests (or a node's allocatable), the ones it has some of."""
    return {k: v for k, v in requests.items() if v and accelerator_vendor(k) is not None}


def resource_int(name: str, quantity: Any, where: str) -> int:
    """cpu in millicores, memory and storage in bytes, everything else a whole count."""
    value = parse_quantity(quantity, what=f"{where}[{name}]")
    if name == "cpu":
        return math.ceil(value * 1000)
    if is_extended_resource(name):
        if value != value.to_integral_value():
            vendor = accelerator_vendor(name)
            raise ParseError(
                f'{where}[{name}]: Invalid value: "{quantity}": must be an integer',
                fix=_WHOLE_FIX.get(vendor or "", "extended resources are whole numbers"),
            )
        return int(value)
    return math.ceil(value)


def container_resources(container: dict[str, Any], where: str) -> dict[str, int]:
    """One container's effective requests, with the API server's defaulting and validation."""
    res = container.get("resources") or {}
    limits = {k: resource_int(k, v, f"{where}.resources.limits") for k, v in (res.get("limits") or {}).items()}
    requests = {k: resource_int(k, v, f"{where}.resources.requests") for k, v in (res.get("requests") or {}).items()}
    for name, req in requests.items():
        if not is_extended_resource(name):
            continue
        if name not in limits:
            raise ParseError(
                f"{where}.resources.limits: Required value: Limit must be set for non overcommitable resources",
                fix=f"put {name} in limits (requests default to limits)",
            )
        if req != limits[name]:
            raise ParseError(
                f'{where}.resources.requests[{name}]: Invalid value: "{req}": must be equal to {name} limit of '
                f"{limits[name]}",
                fix="extended resources cannot be overcommitted: set the request equal to the limit, or omit it",
            )
    effective = dict(limits)
    effective.update(requests)
    return {k: v for k, v in effective.items() if v}


def pod_requests(spec: dict[str, Any], where: str) -> dict[str, int]:
    total: dict[str, int] = {}
    for i, ctr in enumerate(spec.get("containers") or []):
        for k, v in container_resources(ctr, f"{where}.spec.containers[{i}]").items():
            total[k] = total.get(k, 0) + v
    for i, ctr in enumerate(spec.get("initContainers") or []):
        for k, v in container_resources(ctr, f"{where}.spec.initContainers[{i}]").items():
            total[k] = max(total.get(k, 0), v)
    for k, v in (spec.get("overhead") or {}).items():
        total[k] = total.get(k, 0) + resource_int(k, v, f"{where}.spec.overhead")
    return total
