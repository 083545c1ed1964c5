"""Rules that hold accelerator vendors apart: device plugins with the host access their vendor gives them, pods that
ask for one vendor's devices but select another's nodes or run another's image, and device-selection variables
written over the device plugin's choice. Which resource, label and image belongs to which vendor is
gpufleet.doctor.accelerators (the catalog's vendors, and the `signals` of data/rules/vendors.yaml)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from gpufleet.catalog.vendors import get_vendor
from gpufleet.doctor.accelerators import display, image_stack, label_vendor, resource_vendor, signals, split_image
from gpufleet.doctor.objects import (
    PodTemplate,
    as_dict,
    as_list,
    container_accelerators,
    container_env,
    host_mounts,
    host_path_reaches,
    privileged,
)
from gpufleet.doctor.rules.base import Context, Hit, rule
from gpufleet.model import Severity

KUBELET_PLUGINS = "/var/lib/kubelet/device-plugins"
POSITIVE = {"In", "Exists", "Gt", "Lt"}  # requirements a node must carry the key for
_AMD_PLUGIN_IMAGE = re.compile(r"(^|/)rocm/k8s-device-plugin$")
_LIBDRM_LABELS = ("family", "product-name", "firmware")  # the labeller reads these through /dev/dri/card*
_INTEGERS = re.compile(r"^\s*\d+(\s*,\s*\d+)*\s*$")


def _name(c: dict[str, Any]) -> str:
    return str(c.get("name", "?"))


def _command_line(c: dict[str, Any]) -> str:
    return " ".join(str(p) for p in [*as_list(c.get("command")), *as_list(c.get("args"))])


def vendors_asked(c: dict[str, Any]) -> dict[str, float]:
    """Vendor -> how many of its devices (whole, slices or partitions) a container asks for."""
    out: dict[str, float] = {}
    for name, amount in container_accelerators(c).items():
        vendor = resource_vendor(name)
        if vendor:
            out[vendor] = out.get(vendor, 0.0) + amount
    return out


def pods_of(t: PodTemplate) -> str:
    """How a finding names the pods of a template: "the pod", or "each pod of <where the template is>"."""
    return "the pod" if t.obj.kind == "Pod" else f"each pod of {t.path}"


def pod_vendors(t: PodTemplate) -> set[str]:
    return {v for c in t.containers() for v in vendors_asked(c)}


# --- GF023: device plugins and labeller without their host access ----------------------------------------------------


def plugin_role(c: dict[str, Any]) -> str | None:
    """What vendor component a container runs: amd-plugin, amd-labeller, gaudi-plugin, or None."""
    repository, tag = split_image(str(c.get("image") or ""))
    line = _command_line(c)
    if _AMD_PLUGIN_IMAGE.search(repository):
        return "amd-labeller" if tag.startswith("labeller") or "k8s-node-labeller" in line else "amd-plugin"
    if "habana" in repository and repository.endswith("k8s-device-plugin"):
        return "gaudi-plugin"
    return None


_SOCKET_FIX = (
    "mount the kubelet's socket directory: volumes: [{name: dp, hostPath: {path: /var/lib/kubelet/device-plugins}}]"
    " and volumeMounts: [{name: dp, mountPath: /var/lib/kubelet/device-plugins}] (under the kubelet's --root-dir"
    " when it is not /var/lib/kubelet)"
)
_SYS_FIX = (
    "mount the host's /sys: volumes: [{name: sys, hostPath: {path: /sys}}], volumeMounts: [{name: sys, mountPath:"
    " /sys}]"
)


def _host_access(t: PodTemplate, c: dict[str, Any], role: str) -> Iterator[tuple[str, str, Severity]]:
    mounts = host_mounts(t, c)
    what = {"amd-plugin": "the AMD device plugin", "amd-labeller": "the AMD node labeller"}.get(
        role, "the Intel Gaudi device plugin"
    )
    where = f"container {_name(c)!r} ({t.path}) runs {what}"
    if role in ("amd-plugin", "gaudi-plugin") and host_path_reaches(mounts, KUBELET_PLUGINS) is None:
        yield (
            f"{where} without the host's {KUBELET_PLUGINS} mounted: it cannot create its socket where the kubelet"
            " looks, nor reach kubelet.sock to register, so the nodes never advertise"
            f" {'amd.com/gpu' if role == 'amd-plugin' else 'habana.ai/gaudi'} and every pod asking for it stays"
            " Pending",
            _SOCKET_FIX,
            Severity.critical,
        )
    if role in ("amd-plugin", "amd-labeller") and host_path_reaches(mounts, "/sys") != "/sys":
        yield (
            f"{where} without the host's /sys mounted: it reads the GPUs, their partition modes, NUMA nodes and"
            " KFD topology there (AMD lists /sys among the essential mounts of its manifests)",
            _SYS_FIX,
            Severity.warning,
        )
    line = _command_line(c)
    # with no arguments of its own it runs with the operator's defaults, which include family and product-name
    drm = [x for x in _LIBDRM_LABELS if f"-{x}" in line] if "-" in line else list(_LIBDRM_LABELS)
    if role == "amd-labeller" and drm and not privileged(c):
        yield (
            f"{where} unprivileged: it opens /dev/dri/card* through libdrm for the {', '.join(drm)} label(s), and"
            " the device cgroup of an unprivileged container refuses that, so those labels are missing (selectors"
            " on them match no node)",
            "run it as AMD's manifest does: securityContext: {privileged: true} with the host's /dev mounted"
            " (volumes: [{name: dev, hostPath: {path: /dev}}], volumeMounts: [{name: dev, mountPath: /dev}])",
            Severity.warning,
        )


@rule("GF023")
def device_plugin_host_access(ctx: Context) -> Iterator[Hit]:
    for t in ctx.templates:
        if t.obj.kind != "DaemonSet":
            continue
        for c in t.containers(init=False):
            role = plugin_role(c)
            if role:
                for message, fix, severity in _host_access(t, c, role):
                    yield Hit(message, fix, t.obj, severity=severity)


# --- GF028: one vendor's devices, another vendor's nodes -------------------------------------------------------------


def _requirement_vendors(requirement: dict[str, Any]) -> set[str]:
    """The vendor a node must be of to meet this requirement (none for one any node may meet)."""
    if requirement.get("operator") not in POSITIVE:
        return set()
    values = [str(v).lower() for v in as_list(requirement.get("values"))]
    if values and all(v == "false" for v in values):
        return set()
    vendor = label_vendor(str(requirement.get("key", "")))
    return {vendor} if vendor else set()


def required_vendors(spec: dict[str, Any]) -> tuple[dict[str, str], list[dict[str, str]]]:
    """(the nodeSelector's vendor-bound keys, each required affinity term's) as key -> vendor."""
    selector = {
        str(k): v
        for k, val in as_dict(spec.get("nodeSelector")).items()
        if str(val).lower() != "false" and (v := label_vendor(str(k)))
    }
    required = as_dict(
        as_dict(as_dict(spec.get("affinity")).get("nodeAffinity")).get("requiredDuringSchedulingIgnoredDuringExecution")
    )
    terms = []
    for term in map(as_dict, as_list(required.get("nodeSelectorTerms"))):
        expressions = [as_dict(e) for e in as_list(term.get("matchExpressions"))]
        if not expressions and not as_list(term.get("matchFields")):
            continue  # an empty term matches nothing
        terms.append({str(e.get("key")): v for e in expressions for v in _requirement_vendors(e)})
    return selector, terms


@rule("GF028")
def selects_another_vendor(ctx: Context) -> Iterator[Hit]:
    for t in ctx.templates:
        asked = pod_vendors(t)
        if len(asked) != 1:
            continue
        vendor = next(iter(asked))
        selector, terms = required_vendors(t.spec)
        foreign = {k: v for k, v in selector.items() if v != vendor}
        where = "nodeSelector"
        if not foreign and terms and all(any(v != vendor for v in term.values()) for term in terms):
            foreign = {k: v for term in terms for k, v in term.items() if v != vendor}
            where = "required node affinity (every term)"
        if not foreign:
            continue
        shown = ", ".join(f"{k} ({display(v)})" for k, v in sorted(foreign.items()))
        resources = sorted({n for c in t.containers() for n in container_accelerators(c)})
        yield Hit(
            f"{pods_of(t)} asks for {', '.join(resources)} ({display(vendor)}) but its {where} requires {shown}: no"
            " node carries both, so it stays Pending (FailedScheduling)",
            f"select {display(vendor)} nodes instead (e.g. a nodeSelector on {get_vendor(vendor).product_label}),"
            " or ask for the resource of the vendor the selector means",
            t.obj,
        )


# --- GF029: another vendor's image -----------------------------------------------------------------------------------


@rule("GF029")
def image_for_another_vendor(ctx: Context) -> Iterator[Hit]:
    for t in ctx.templates:
        for c in t.containers():
            asked = vendors_asked(c)
            stack = image_stack(str(c.get("image") or ""))
            if len(asked) != 1 or stack is None or stack[0] in asked:
                continue
            vendor = next(iter(asked))
            built, what = stack
            yield Hit(
                f"container {_name(c)!r} ({t.path}) asks for {display(vendor)} devices"
                f" ({', '.join(sorted(container_accelerators(c)))}) but its image {c.get('image')} is likely built for"
                f" {display(built)} ({what}): the framework in it likely finds no device it can use and falls back"
                " to the CPU or fails at start",
                f"use the {display(vendor)} build of the image (ROCm: rocm/pytorch, rocm/vllm; CUDA: NGC or"
                " vllm/vllm-openai; Gaudi: vault.habana.ai/gaudi-docker), or ask for the vendor the image is built"
                " for",
                t.obj,
            )


# --- GF030: device-selection variables written over the plugin's choice --------------------------------------------


# When the plugin passes its choice through the variable (NVIDIA's can use CDI or volume mounts instead).
_STRATEGY = {"nvidia": " (device-list strategy envvar, the plugin's default)"}


def _plugin_env(t: PodTemplate, where: str, vendor: str, count: float, env: dict[str, str]) -> Iterator[Hit]:
    for var in signals().plugin_env.get(vendor, ()):
        if var not in env:
            continue
        how = _STRATEGY.get(vendor, "")
        yield Hit(
            f"{where} asks for {count:g} {display(vendor)} device(s) and sets {var}={env[var]!r} itself: the device"
            f" plugin puts the devices it allocated in that variable{how}, and the value in the pod spec replaces it,"
            " so the container runtime sets up the devices named here (all: every device on the node) instead of the"
            " allocated ones, or none that match",
            f"remove {var} from the pod spec and let the device plugin set it; to use fewer devices, ask for fewer",
            t.obj,
        )


def _ordinals(t: PodTemplate, where: str, vendor: str, count: float, env: dict[str, str]) -> Iterator[Hit]:
    for var in signals().ordinal_env.get(vendor, ()):
        value = env.get(var, "")
        if not _INTEGERS.match(value):
            continue  # UUIDs, "all", empty or -1 (deliberately none): not indexes to check
        beyond = sorted({int(p) for p in value.split(",")} - set(range(int(count))))
        if beyond:
            yield Hit(
                f"{where} asks for {count:g} {display(vendor)} device(s), numbered 0 to {int(count) - 1} inside the"
                f" container, but sets {var}={value!r}: index(es) {beyond} name no device, so the runtime sees fewer"
                " devices than the pod holds (none at all when every index is out of range)",
                f"index from 0 within the devices the container asks for, or remove {var} (the device plugin already"
                " gives the container only its own devices)",
                t.obj,
                severity=Severity.critical,
            )


@rule("GF030")
def visible_devices_by_hand(ctx: Context) -> Iterator[Hit]:
    for t in ctx.templates:
        for c in t.containers():
            env, where = container_env(c), f"container {_name(c)!r} ({t.path})"
            for vendor, count in sorted(vendors_asked(c).items()):
                yield from _plugin_env(t, where, vendor, count, env)
                yield from _ordinals(t, where, vendor, count, env)
