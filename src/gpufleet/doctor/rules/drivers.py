"""Rules on the drivers under the workloads: an R570 bug with mixed MIG, container CUDA newer than the node
drivers support, and host facts the driver needs (nouveau unloaded, kernel headers for the running kernel). The
facts are data (data/stack.yaml through doctor.versions); this module only applies them."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from gpufleet.doctor.facts import NodeFacts, Version, parse_version, show
from gpufleet.doctor.objects import K8sObject, as_dict, as_list, gpu_resource_names, node_selection_matches
from gpufleet.doctor.rules.base import Context, Hit, rule
from gpufleet.doctor.versions import (
    listed,
    operator_version,
    policy_bool,
    release_of,
    stack,
    ver,
)
from gpufleet.model import Severity

# --- GF010: R570 drivers with mixed MIG ----------------------------------------------------------------------------


def mixed_mig_bug(driver: str | None) -> bool:
    version = parse_version(driver)
    if not version or len(version) < 2:
        return False  # a branch alone ("570") names no driver
    return any(ver(s.min) <= version < ver(s.below) for s in stack().mixed_mig_issue.affected)


def mixed_mig(node: NodeFacts) -> str:
    """Why the node mixes MIG slices and full GPUs, or ""."""
    if node.labels.get("nvidia.com/mig.strategy") == "mixed":
        return "nvidia.com/mig.strategy=mixed"
    slices = sorted(k for k, v in node.capacity.items() if k.startswith("nvidia.com/mig-") and v > 0)
    if slices and node.capacity.get("nvidia.com/gpu", 0) > 0:
        return f"capacity has {slices[0]} next to whole nvidia.com/gpu"
    return ""


def _mixed_mig_fix(drivers: Iterable[str]) -> str:
    issue = stack().mixed_mig_issue
    branches = {d.split(".")[0] for d in drivers}
    life = [
        f"R{b.branch} reaches end of life in {b.end_of_life}"
        for b in stack().driver_branches.branches
        if b.branch in branches
    ] + [f"R{b} is end of life" for b in sorted(branches) if b in stack().driver_branches.end_of_life]
    return (
        f"upgrade the driver to {issue.fixed[0]} or later, or to R580 ({issue.fixed[1]} or later; ClusterPolicy"
        f" spec.driver.version with the GPU Operator){'; ' + ', '.join(life) if life else ''}. If pods still hang"
        " after the upgrade, restart the kubelet on those nodes (threads stuck from before can remain)"
    )


@rule("GF010", reads=("ClusterPolicy",))
def mixed_mig_driver(ctx: Context) -> Iterator[Hit]:
    issue = stack().mixed_mig_issue
    spans = [f"R{s.min}" if len(ver(s.min)) == 1 else f"{s.min} to before {s.below}" for s in issue.affected]
    consequence = (
        f"with drivers {' and '.join(spans)} (NVIDIA lists {', '.join(issue.listed)}; the maintainers add that"
        " 575.57.08 predates the fix), GPU pods cannot be scheduled on nodes that mix MIG slices and full GPUs:"
        f" they stay Pending ({issue.issue.replace('https://github.com/', '').replace('/issues/', ' issue #')})"
    )
    affected = [
        (n, d, why) for n in ctx.facts.nodes.values() if mixed_mig_bug(d := n.driver_version) and (why := mixed_mig(n))
    ]
    if affected:
        first = affected[0][0]
        shown = listed(f"{n.name} (driver {d}; {why})" for n, d, why in affected)
        yield Hit(
            f"nodes with mixed MIG run an affected driver: {shown}; {consequence}",
            _mixed_mig_fix(str(d) for _, d, _ in affected),
            file=first.host_source if first.host and first.host.driver_version else first.source,
            object_ref=f"Node/{first.name}",
        )
        return
    operator = operator_version(ctx.facts)
    for policy in ctx.gpu_operator_policies:
        if as_dict(policy.spec.get("mig")).get("strategy") != "mixed":
            continue
        driver = as_dict(policy.spec.get("driver"))
        if driver.get("enabled") is False or policy_bool(policy.spec, "driver", "usePrecompiled"):
            continue  # a host-installed driver (node facts tell) or a branch, not a driver version
        version, whence = driver.get("version"), "spec.driver.version"
        if not version and operator:
            release = release_of(operator)
            version = release.default_driver.get(show(operator)) if release else None
            whence = f"the default of GPU Operator {show(operator)}, spec.driver.version being unset"
        if version and mixed_mig_bug(str(version)):
            yield Hit(
                f"{policy.ref} sets spec.mig.strategy: mixed and deploys driver {version} ({whence}); {consequence}",
                _mixed_mig_fix([str(version)]),
                policy,
            )


# --- GF016: container CUDA newer than the node driver ---------------------------------------------------------------

_CUDA_IMAGE_TAG = re.compile(r"^(\d+\.\d+(?:\.\d+)?)")  # nvidia/cuda:12.4.1-runtime-ubuntu22.04
_CUDA_IN_TAG = re.compile(r"(?<![a-z])cuda[-_]?(\d{2})\.(\d+)(?:\.(\d+))?")  # pytorch/pytorch:2.3.0-cuda12.1-...
_CU_IN_TAG = re.compile(r"(?<![a-z])cu(\d{2})(\d)(?!\d)")  # ...-cu124
_REQUIRE_CUDA = re.compile(r"cuda>=(\d+\.\d+(?:\.\d+)?)")


def container_cuda(container: dict[str, Any]) -> tuple[Version, str] | None:
    """The CUDA version a container is built for, and what says so: env CUDA_VERSION or NVIDIA_REQUIRE_CUDA in the
    manifest, else the image (nvidia/cuda:X.Y.Z-*, a tag naming cudaX.Y or cuXYZ)."""
    env = {
        str(e.get("name")): str(e.get("value"))
        for e in as_list(container.get("env"))
        if isinstance(e, dict) and e.get("value") is not None
    }
    if (v := parse_version(env.get("CUDA_VERSION"))) and len(v) >= 2:
        return v, f"env CUDA_VERSION={env['CUDA_VERSION']}"
    if (found := _REQUIRE_CUDA.search(env.get("NVIDIA_REQUIRE_CUDA", ""))) and (v := parse_version(found.group(1))):
        return v, f"env NVIDIA_REQUIRE_CUDA={found.group(0)}"
    image = str(container.get("image") or "").strip().partition("@")[0]
    name, _, tag = image.rpartition("/")[2].partition(":")
    tag = tag.lower()
    if name == "cuda" and (found := _CUDA_IMAGE_TAG.match(tag)):
        return ver(found.group(1)), f"image {image}"
    if found := _CUDA_IN_TAG.search(tag):
        return tuple(int(p) for p in found.groups() if p is not None), f"image {image}"
    if found := _CU_IN_TAG.search(tag):
        return (int(found.group(1)), int(found.group(2))), f"image {image}"
    return None


def toolkit_driver(cuda: Version) -> tuple[str, str] | None:
    """(listed CUDA release, the driver it ships with) for the nearest listed release at or below `cuda` in its
    major (a lower bound for releases the table does not list)."""
    wanted = (*cuda, 0, 0, 0)[:3]
    for entry in sorted(stack().cuda.toolkit_drivers, key=lambda e: ver(e.cuda), reverse=True):
        listed_cuda = ver(entry.cuda)
        if listed_cuda[0] == cuda[0] and listed_cuda <= wanted:
            return entry.cuda, entry.driver
    return None


@dataclass
class _Shortfall:
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


@rule("GF016")
def cuda_newer_than_driver(ctx: Context) -> Iterator[Hit]:
    floors = {f.major: f.driver for f in stack().cuda.minor_version_floors}
    nodes = [n for n in ctx.facts.nodes.values() if parse_version(n.driver_version)]
    if not nodes:
        return
    for template in ctx.templates:
        candidates = [n for n in nodes if node_selection_matches(template.spec, n.name, n.labels)]
        for c in template.containers():
            if not any(r.startswith("nvidia.com/") for r in gpu_resource_names(c)):
                continue
            found = container_cuda(c)
            if not found or found[0][0] not in floors:
                continue
            cuda, evidence = found
            floor, shipped = floors[cuda[0]], toolkit_driver(cuda)
            short = _Shortfall()
            for node in candidates:
                driver = parse_version(node.driver_version) or ()
                if shipped and driver >= ver(shipped[1]):
                    continue
                if driver < ver(floor):
                    short.errors.append(f"{node.name} ({node.driver_version})")
                elif shipped:
                    short.warnings.append(f"{node.name} ({node.driver_version})")
            what = f"container {c.get('name', '?')!r} (CUDA {show(cuda)}, from {evidence})"
            full = f"{shipped[1]} or later (the driver CUDA {shipped[0]} ships with)" if shipped else ""
            if short.errors:
                yield Hit(
                    f"{what} can land on GPU nodes whose driver is below the CUDA {cuda[0]}.x floor of {floor}:"
                    f" {listed(short.errors)}. CUDA calls fail there with cudaErrorInsufficientDriver (35), unless"
                    " the image carries the forward-compatibility libraries (cuda-compat) and the GPUs are"
                    " data-center GPUs",
                    f"upgrade those nodes' driver to {full or floor + ' or later'}, keep the pod off them"
                    " (nodeSelector or node affinity on nodes with a new enough driver), or use an image built for"
                    " the CUDA the driver supports",
                    template.obj,
                )
            if short.warnings:
                yield Hit(
                    f"{what} can land on GPU nodes whose driver is older than the one its CUDA release ships with:"
                    f" {listed(short.warnings)}. It runs through minor-version compatibility with a limited feature"
                    " set (PTX JIT of newer code fails)",
                    f"upgrade those nodes' driver to {full}, or make sure the image ships machine code (SASS) for"
                    " the nodes' GPUs rather than relying on PTX",
                    template.obj,
                    severity=Severity.warning,
                )


# --- GF017: nouveau and kernel headers ------------------------------------------------------------------------------

_NOUVEAU_FIX = (
    "denylist nouveau on each host: /etc/modprobe.d/blacklist-nouveau.conf with `blacklist nouveau` and `options"
    " nouveau modeset=0`, then rebuild the initramfs (update-initramfs -u on Ubuntu, dracut --force on RHEL) and"
    " reboot"
)


def _node_hit(nodes: list[NodeFacts], message: str, fix: str, severity: Severity | None = None) -> Hit:
    first = nodes[0]
    return Hit(message, fix, file=first.host_source, object_ref=f"Node/{first.name}", severity=severity)


def _compiles_driver(policies: list[K8sObject]) -> bool | None:
    """Whether a ClusterPolicy has the operator compile the driver (driver.enabled and not usePrecompiled, both the
    defaults); None without a ClusterPolicy."""
    if not policies:
        return None
    return any(
        policy_bool(p.spec, "driver", "enabled") is not False
        and policy_bool(p.spec, "driver", "usePrecompiled") is not True
        for p in policies
    )


@rule("GF017", reads=("ClusterPolicy",))
def host_kernel_facts(ctx: Context) -> Iterator[Hit]:
    policies = ctx.gpu_operator_policies
    vgpu = any(policy_bool(p.spec, "vgpuManager", "enabled") for p in policies)
    loaded: list[NodeFacts] = []
    loaded_denylisted: list[NodeFacts] = []
    vgpu_allowed: list[NodeFacts] = []
    headerless: list[NodeFacts] = []
    for node in ctx.facts.nodes.values():
        host = node.host
        if host is None:
            continue
        if host.nouveau_loaded:
            (loaded_denylisted if host.nouveau_blacklisted else loaded).append(node)
        elif vgpu and host.nouveau_blacklisted is False:
            vgpu_allowed.append(node)
        if host.kernel_headers is False:
            headerless.append(node)
    vgpu_note = (
        "; with vGPU (ClusterPolicy spec.vgpuManager.enabled) nouveau must be denylisted, or the driver fails with"
        " 'Failed to enable MSI-X' and every operator pod stays in Init"
        if vgpu
        else ""
    )
    if loaded:
        yield _node_hit(
            loaded,
            f"nouveau is loaded and not denylisted on {listed(n.name for n in loaded)}: it holds the GPUs, so the"
            " NVIDIA driver cannot load. The GPU Operator's driver manager unloads it at install, but that fails"
            f" while nouveau is in use and does not last: it loads again at the next boot{vgpu_note}",
            _NOUVEAU_FIX,
        )
    if loaded_denylisted:
        yield _node_hit(
            loaded_denylisted,
            f"nouveau is denylisted but still loaded on {listed(n.name for n in loaded_denylisted)}: the initramfs"
            " was not rebuilt or the host not rebooted since, and while it holds the GPUs the NVIDIA driver cannot"
            f" load{vgpu_note}",
            "rebuild the initramfs (update-initramfs -u on Ubuntu, dracut --force on RHEL) and reboot",
        )
    if vgpu_allowed:
        yield _node_hit(
            vgpu_allowed,
            f"nouveau is not denylisted on {listed(n.name for n in vgpu_allowed)} while a ClusterPolicy turns vGPU"
            " on (spec.vgpuManager.enabled): with vGPU it must be denylisted, or the driver fails with 'Failed to"
            " enable MSI-X' and every operator pod stays in Init",
            _NOUVEAU_FIX,
        )
    compiles = _compiles_driver(policies)
    if not headerless or compiles is False:
        return
    shown = listed(
        f"{n.name} ({(n.host.kernel if n.host else None) or n.kernel or 'kernel not known'})" for n in headerless
    )
    why = (
        "The GPU Operator compiles the driver there (ClusterPolicy driver.usePrecompiled is false, the default)"
        if compiles
        else "This matters when the driver is compiled for this kernel: by the GPU Operator's driver container (its"
        " default, driver.usePrecompiled: false) or by DKMS on the host; not with precompiled driver images or a"
        " driver already built for this kernel. The operator's driver container"
    )
    yield _node_hit(
        headerless,
        f"kernel headers for the running kernel are missing on {shown}: no /lib/modules/<kernel>/build. {why}"
        f"{': its driver container' if compiles else ''} installs linux-headers-<kernel> (kernel-devel on RHEL)"
        " from the OS package repositories instead of using the host's, so the driver pod fails ('Could not"
        " resolve Linux kernel version') when the repositories no longer carry headers for this kernel, which"
        " missing local headers often hint at (an outdated or custom kernel)",
        "install the headers (apt-get install linux-headers-$(uname -r), dnf install kernel-devel-$(uname -r)) to"
        " confirm the repositories still carry them; if they do not, give the driver container a repository that"
        " does (ClusterPolicy spec.driver.repoConfig.configMapName), move to a kernel with published headers, or"
        " use precompiled drivers (spec.driver.usePrecompiled: true, spec.driver.version: <branch>)",
        Severity.warning,
    )
