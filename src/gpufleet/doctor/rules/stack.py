"""Rules on the GPU Operator's versions: its life cycle, its platform matrix (Kubernetes, containerd, the runtimes
its NRI plugin needs) and the feature gate CDI device injection depends on. The facts are data (data/stack.yaml
through doctor.versions), each with its source; this module only applies them."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from gpufleet.doctor.facts import ClusterFacts, Version, show
from gpufleet.doctor.load import Document
from gpufleet.doctor.objects import K8sObject, as_dict, as_list
from gpufleet.doctor.rules.base import Context, Hit, rule
from gpufleet.doctor.versions import (
    Release,
    Runtime,
    Span,
    major_minor,
    operator_version,
    policy_bool,
    release_of,
    runtimes,
    span_for,
    stack,
    stack_nodes,
    ver,
    within,
)
from gpufleet.model import Severity

# --- GF009: the NRI plugin on runtimes it does not support ----------------------------------------------------------


def _nri_containerd_text(operator: Version | None) -> str:
    entries = [e for e in stack().gpu_operator.nri_plugin.containerd if operator is None or ver(e.since) <= operator]
    return ", ".join(f"{e.min} or a later {e.series}.x" if e.min else f"{e.series}.x" for e in entries)


def nri_problem(runtime: Runtime, operator: Version | None) -> str | None:
    """Why the NRI plugin cannot work with this runtime, or None (also when its version cannot be read)."""
    nri = stack().gpu_operator.nri_plugin
    version = runtime.version
    if runtime.name == "cri-o":
        if operator and operator < ver(nri.crio.since):
            return f"the NRI plugin supports CRI-O only from GPU Operator {nri.crio.since}"
        if version and len(version) >= 2 and version[:2] < ver(nri.crio.min):
            return f"the NRI plugin needs CRI-O {nri.crio.min} or later"
        return None
    if runtime.name != "containerd":
        return "the NRI plugin supports only containerd and CRI-O" if runtime.name == "docker" else None
    if not version or len(version) < 2:
        return None
    entry = next((e for e in nri.containerd if ver(e.series) == version[:2]), None)
    if entry is None:
        if version[:2] > max(ver(e.series) for e in nri.containerd):
            return None  # newer than the data: not judged
        return f"the NRI plugin supports containerd {_nri_containerd_text(operator)} only"
    if entry.min and version < ver(entry.min):
        return f"the NRI plugin needs containerd {entry.min} or later in the {entry.series} series"
    if operator and operator < ver(entry.since):
        return f"the NRI plugin supports containerd {entry.series} from GPU Operator {entry.since}"
    return None


@rule("GF009", reads=("ClusterPolicy",))
def nri_plugin_runtime(ctx: Context) -> Iterator[Hit]:
    nri = stack().gpu_operator.nri_plugin
    operator = operator_version(ctx.facts)
    for policy in ctx.gpu_operator_policies:
        if policy_bool(policy.spec, "cdi", "nriPluginEnabled") is not True:
            continue
        if operator and operator[:2] < ver(nri.since)[:2]:
            yield Hit(
                f"{policy.ref} turns the NRI plugin on (spec.cdi.nriPluginEnabled: true), but GPU Operator"
                f" {show(operator)} has none (it came in {nri.since}): the setting does nothing",
                f"remove the setting, or upgrade the GPU Operator to {nri.since} or later first",
                policy,
                severity=Severity.warning,
            )
            continue
        if policy_bool(policy.spec, "cdi", "enabled") is False:
            yield Hit(
                f"{policy.ref} turns the NRI plugin on (spec.cdi.nriPluginEnabled: true) with CDI off"
                " (spec.cdi.enabled: false): the NRI plugin injects GPUs as CDI devices and needs CDI on",
                "set spec.cdi.enabled: true (the default from GPU Operator 25.10), or turn the NRI plugin off",
                policy,
            )
        problems = [(r, why) for r in runtimes(ctx.facts) if (why := nri_problem(r, operator))]
        if not problems:
            continue
        shown = "; ".join(f"{r.where}: {why}" for r, why in problems)
        known = f"GPU Operator {show(operator)}" if operator else "the GPU Operator (version not known here)"
        yield Hit(
            f"{policy.ref} turns the NRI plugin on (spec.cdi.nriPluginEnabled: true) with {known}, but the"
            f" runtime cannot serve it on {shown}. With the NRI plugin on, the operator neither creates the nvidia"
            " RuntimeClass nor configures the runtime, so GPUs are not injected into management containers that"
            " rely on NVIDIA_VISIBLE_DEVICES (the operator's own validator, device plugin and exporter pods among"
            " them)",
            f"upgrade the runtime to a supported version (containerd {_nri_containerd_text(None)}; CRI-O"
            f" {nri.crio.min} or later, with GPU Operator {nri.crio.since} or later), or turn the NRI plugin off:"
            ' kubectl patch clusterpolicies.nvidia.com/cluster-policy --type=json -p=\'[{"op": "replace", "path":'
            ' "/spec/cdi/nriPluginEnabled", "value": false}]\' (the nvidia RuntimeClass comes back)',
            policy,
        )


# --- GF011: GPU Operator life cycle ---------------------------------------------------------------------------------


def _majors() -> list[Version]:
    facts = stack().gpu_operator
    names = {r.major for r in facts.releases}
    for table in facts.life_cycle:
        names |= {table.supported, table.deprecated, table.end_of_support_through}
    return sorted({ver(n) for n in names})


def _upgrade_path(current: Version, target: Version) -> str:
    steps = [show(m) for m in _majors() if current < m <= target]
    return " -> ".join([major_minor(current), *steps])


@rule("GF011")
def operator_life_cycle(ctx: Context) -> Iterator[Hit]:
    operator = operator_version(ctx.facts)
    if not operator:
        return
    table = stack().gpu_operator.life_cycle[-1]
    major, newest = operator[:2], max(_majors())
    supported, deprecated, gone = ver(table.supported), ver(table.deprecated), ver(table.end_of_support_through)
    printed = f' (printed "{table.printed_supported}")' if table.printed_supported else ""
    status = (
        f"NVIDIA's newest life-cycle table ({table.published}) lists {table.supported}.x{printed} as supported,"
        f" {table.deprecated}.x as deprecated and {table.end_of_support_through}.x and older as end of support"
    )
    upgrades = stack().gpu_operator.upgrades.rule.rstrip(".").lower()
    severity: Severity | None
    if major == supported:
        return
    if major == deprecated:
        severity = Severity.warning
        message = f"is deprecated: {status}; a deprecated major gets only critical and CVE fixes"
        fix = f"plan the upgrade to {table.supported}.x ({upgrades})"
    elif major <= gone:
        severity = None
        message = f"is out of support: {status}; it gets no fixes, not even for CVEs"
        fix = f"upgrade one major version at a time, {_upgrade_path(major, supported)} ({upgrades})"
    elif major > newest:
        severity = Severity.info
        message = (
            f"is newer than the doctor's data (newest life-cycle table {table.published}, newest release"
            f" {show(newest)}): its support status and platform matrix are not checked"
        )
        fix = "nothing to do here; a newer gpufleet knows more"
    else:
        severity = Severity.info
        message = f"is not a release the doctor knows ({status})"
        fix = "check the version; GPU Operator releases are YY.MM.PP, e.g. 26.3.2"
    facts = ctx.facts
    source = next(
        (o for o in ctx.objects if o.ref == facts.gpu_operator_ref and o.doc.file == facts.gpu_operator_source), None
    )
    where = facts.gpu_operator_source if source is None else ""
    yield Hit(f"GPU Operator {show(operator)} {message}", fix, source, file=where, severity=severity)


# --- GF012 and GF019: the operator's platform matrix ----------------------------------------------------------------


def _later_patch(spans: tuple[Span, ...], operator: Version, version: Version) -> Span | None:
    return next((s for s in spans if ver(s.since) > operator and within(version, s.min, s.max)), None)


def _release_covering(version: Version, kind: str, newer_than: Version) -> Release | None:
    """The oldest release newer than `newer_than` whose newest span of `kind` covers `version`."""
    for release in stack().gpu_operator.releases:
        span = getattr(release, kind)[-1]
        if ver(release.major) > newer_than[:2] and within(version, span.min, span.max):
            return release
    return None


@rule("GF012")
def kubernetes_outside_matrix(ctx: Context) -> Iterator[Hit]:
    operator, kube = operator_version(ctx.facts), ctx.facts.kubernetes_version
    if not operator or not kube or len(kube) < 2:
        return
    release = release_of(operator)
    if release is None:
        return  # GF011 says what is known about it
    span = span_for(release.kubernetes, operator)
    if within(kube, span.min, span.max):
        return
    images = {n.os_image or "" for n in stack_nodes(ctx.facts)}
    for row in release.kubernetes_by_os:
        if images and all(i.startswith(row.os) for i in images) and within(kube, row.min, row.max):
            return  # every node runs the OS whose row admits this version
    message = (
        f"Kubernetes {show(kube[:3])} is outside GPU Operator {show(operator)}'s platform matrix: {release.major}"
        f" is validated with Kubernetes {span.min}-{span.max}"
    )
    message += "".join(f" ({row.min}-{row.max} on {row.os})" for row in release.kubernetes_by_os)
    later = _later_patch(release.kubernetes, operator, kube)
    if later:
        fix = f"upgrade the GPU Operator to {later.since} or later (Kubernetes {major_minor(kube)} support came then)"
    elif kube[:2] > ver(span.max):
        newer = _release_covering(kube, "kubernetes", operator)
        target = f"{newer.major}, validated with it" if newer else "a release validated with it"
        fix = f"upgrade the GPU Operator to {target} (one major version at a time), or stay on Kubernetes {span.max}"
    else:
        fix = f"upgrade Kubernetes to {span.min} or later (one minor version at a time)"
    yield Hit(message, fix, file=ctx.facts.kubernetes_source)


@rule("GF019")
def containerd_outside_matrix(ctx: Context) -> Iterator[Hit]:
    operator = operator_version(ctx.facts)
    release = release_of(operator) if operator else None
    if not operator or release is None:
        return
    span = span_for(release.containerd, operator)
    outside = [
        r
        for r in runtimes(ctx.facts)
        if r.name == "containerd" and (v := r.version) and len(v) >= 2 and not within(v, span.min, span.max)
    ]
    if not outside:
        return
    versions = [r.version or () for r in outside]
    message = (
        f"containerd on {'; '.join(r.where for r in outside)} is outside GPU Operator {show(operator)}'s platform"
        f" matrix: {release.major} is validated with containerd {span.min}-{span.max}"
        + (f" ({span.note})" if span.note else "")
        + "; the Container Toolkit configures a runtime it was not tested with"
    )
    later = [s for v in versions if (s := _later_patch(release.containerd, operator, v))]
    if later:
        fix = f"upgrade the GPU Operator to {later[0].since} or later, which covers this containerd"
    elif any(v[:2] > ver(span.max) for v in versions):
        newer = _release_covering(max(versions), "containerd", operator)
        fix = f"run containerd {span.max} or older on these nodes, or upgrade the GPU Operator" + (
            f" to {newer.major}" if newer else ""
        )
    else:
        fix = f"upgrade containerd on these nodes to {span.min} or later (within {span.min}-{span.max})"
    yield Hit(message, fix, file=outside[0].file, object_ref=outside[0].object_ref)


# --- GF020: CDI devices through the CRI without the feature gate ----------------------------------------------------

GATE = "DevicePluginCDIDevices"
_GATE_KEYS = {"kubelet": ("kubelet",), "kube-apiserver": ("apiserver", "kube-apiserver")}
_GATE_FIX = {
    "kubelet": f"featureGates: {{{GATE}: true}} in the KubeletConfiguration (or --feature-gates={GATE}=true),"
    " then restart the kubelet",
    "kube-apiserver": f"--feature-gates={GATE}=true in the kube-apiserver manifest"
    " (/etc/kubernetes/manifests/kube-apiserver.yaml)",
}


def _strategies(value: Any) -> list[str]:
    items = value if isinstance(value, list) else re.split(r"[,\s]+", str(value or ""))
    return [str(s).strip().lower() for s in items if str(s).strip()]


@dataclass(frozen=True)
class CdiUser:
    """Something in the input that has the device plugin hand out GPUs as CDI devices through the CRI."""

    what: str
    strategies: list[str]
    obj: K8sObject | None = None
    doc: Document | None = None


def _env_value(items: Any, name: str) -> str | None:
    values = [e.get("value") for e in as_list(items) if isinstance(e, dict) and e.get("name") == name]
    return str(values[-1]) if values and values[-1] is not None else None


def cdi_cri_users(ctx: Context) -> list[CdiUser]:
    """Device plugins set to DEVICE_LIST_STRATEGY cdi-cri: containers (env or --device-list-strategy),
    ClusterPolicies (spec.devicePlugin.env, else what the operator sets with CDI on) and device-plugin configs
    (flags.plugin.deviceListStrategy)."""
    out: list[CdiUser] = []
    for template in ctx.templates:
        for c in template.containers():
            value = _env_value(c.get("env"), "DEVICE_LIST_STRATEGY")
            for arg in [*as_list(c.get("command")), *as_list(c.get("args"))]:
                if isinstance(arg, str) and arg.startswith("--device-list-strategy="):
                    value = arg.partition("=")[2]
            if "cdi-cri" in _strategies(value):
                out.append(CdiUser(f"container {c.get('name', '?')!r}", _strategies(value), obj=template.obj))
    operator = operator_version(ctx.facts)
    release = release_of(operator) if operator else None
    for policy in ctx.gpu_operator_policies:
        if policy_bool(policy.spec, "devicePlugin", "enabled") is False:
            continue
        value = _env_value(as_dict(policy.spec.get("devicePlugin")).get("env"), "DEVICE_LIST_STRATEGY")
        what = f"{policy.ref}'s device plugin (spec.devicePlugin.env)"
        cdi = policy_bool(policy.spec, "cdi", "enabled")
        # From 25.10 the operator gives its device plugin cdi-annotations,cdi-cri when CDI is on (devicePlugin.env
        # still wins); before, CDI meant envvar,cdi-annotations.
        operator_sets = release is not None and ver(release.major) >= (25, 10)
        if value is None and operator and release and operator_sets and (cdi or (cdi is None and release.cdi_default)):
            value = "cdi-annotations,cdi-cri"
            what = f"{policy.ref}'s device plugin (GPU Operator {show(operator)} sets this with CDI on)"
        if "cdi-cri" in _strategies(value):
            out.append(CdiUser(what, _strategies(value), obj=policy))
    for doc in ctx.configs:
        value = as_dict(as_dict(doc.data.get("flags")).get("plugin")).get("deviceListStrategy")
        if "cdi-cri" in _strategies(value):
            out.append(
                CdiUser("the device-plugin config (flags.plugin.deviceListStrategy)", _strategies(value), doc=doc)
            )
    return out


def _gate(facts: ClusterFacts, component: str) -> tuple[bool | None, str]:
    """Whether the gate is set on for a component (None: not set, the default applies), and where it is set."""
    for key in _GATE_KEYS[component]:
        if GATE in facts.feature_gates.get(key, {}):
            return facts.feature_gates[key][GATE], facts.gate_sources.get(key, "")
    return None, ""


def _gate_problem(facts: ClusterFacts, kube: Version) -> tuple[str, str] | None:
    """(what is wrong, the fix) when this Kubernetes version does not pass CDI device names on, or None."""
    gate = stack().feature_gates[GATE]
    version = f"Kubernetes {show(kube[:3])}"
    if kube[:2] < ver(gate.alpha):
        return (
            f"{version} has no {GATE} (alpha in {gate.alpha}): the kubelet drops the CDI device names",
            f"upgrade Kubernetes to {gate.beta} or later (GA in {gate.ga}), or use DEVICE_LIST_STRATEGY"
            " cdi-annotations (a CDI-enabled runtime) or envvar (the nvidia runtime)",
        )
    alpha = kube[:2] < ver(gate.beta)
    off: list[str] = []
    said: list[str] = []
    for component in gate.components:
        on, source = _gate(facts, component)
        if on is False or (alpha and on is None):
            off.append(component)
            said.append(f"{component}: " + ("off by default" if on is None else f"turned off in {source}"))
    if not off:
        return None
    stage = "alpha (off unless turned on)" if alpha else "beta (on by default)"
    return (
        f"on {version} the {GATE} gate is {stage} and must be on for both the kubelet and the kube-apiserver"
        f" ({'; '.join(said)}): the kubelet drops the CDI device names the device plugin returns",
        "turn the gate on: " + "; ".join(f"{c}: {_GATE_FIX[c]}" for c in off),
    )


@rule("GF020", reads=("ClusterPolicy", "device-plugin-config"))
def cdi_devices_gated_off(ctx: Context) -> Iterator[Hit]:
    kube = ctx.facts.kubernetes_version
    if not kube or len(kube) < 2 or kube[:2] >= ver(stack().feature_gates[GATE].ga):
        return
    users = cdi_cri_users(ctx)
    found = _gate_problem(ctx.facts, kube) if users else None
    if not found:
        return
    problem, fix = found
    for user in users:
        others = [s for s in user.strategies if s != "cdi-cri"]
        severity: Severity | None = None
        if others:
            severity = Severity.warning
            message = (
                f"{user.what} uses DEVICE_LIST_STRATEGY {','.join(user.strategies)}, but {problem}; GPUs still"
                f" reach containers through {', '.join(others)}, so cdi-cri does nothing"
            )
        else:
            message = (
                f"{user.what} hands out GPUs only as CDI devices through the CRI (DEVICE_LIST_STRATEGY=cdi-cri),"
                f" but {problem}, so containers start without their GPUs"
            )
        if user.obj is not None:
            yield Hit(message, fix, user.obj, severity=severity)
        elif user.doc is not None:
            yield Hit(
                message,
                fix,
                file=user.doc.file,
                line=user.doc.line,
                object_ref="DevicePluginConfig",
                severity=severity,
            )
