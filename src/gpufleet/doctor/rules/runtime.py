"""Container runtime configuration for GPUs: the nvidia runtime handler registered in containerd, CRI-O or Docker
(GF046), RuntimeClasses that pods name and handlers the nodes lack (GF047), a runtime that has not read the
configuration the toolkit wrote, and pods that failed before it had (GF048), the deprecated nvidia-docker2 and
nvidia-container-runtime packages (GF049).

A node's runtime configuration comes from its host facts (`gpufleet doctor --host-facts` reads the files) or from
config files given to the doctor (config.toml and its drop-ins, crio.conf and crio.conf.d, daemon.json), which are
taken as one GPU node's."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from gpufleet.doctor.facts import NodeFacts, parse_version, show
from gpufleet.doctor.load import RUNTIME_CONFIG
from gpufleet.doctor.objects import as_dict, mapping, resources, selector_matches
from gpufleet.doctor.rules.base import Context, Hit, rule
from gpufleet.doctor.runtime_config import (
    CDI_DEFAULT_DIRS,
    CDI_OUTPUT_DIR,
    CONTAINERD,
    CRIO,
    DOCKER,
    RuntimeView,
    views,
)
from gpufleet.doctor.versions import operator_version, policy_bool
from gpufleet.model import Severity

CONFIGURE = {
    CONTAINERD: "sudo nvidia-ctk runtime configure --runtime=containerd && sudo systemctl restart containerd",
    CRIO: "sudo nvidia-ctk runtime configure --runtime=crio && sudo systemctl restart crio",
    DOCKER: "sudo nvidia-ctk runtime configure --runtime=docker && sudo systemctl restart docker",
}
OPERATOR_CONFIGURES = (
    "with the GPU Operator, leave toolkit.enabled on (its nvidia-container-toolkit pod writes this and restarts the"
    " runtime) and delete that pod to have it written again"
)
# The sandbox error the kubelet records when the runtime has no such handler, in containerd's, CRI-O's and
# dockershim's wording (quotes as kubectl and terminals print them).
_QUOTE = r"[\"“”\\]*"
NO_RUNTIME = re.compile(
    rf"no runtime for {_QUOTE}([\w.-]+){_QUOTE} is configured"
    r"|failed to find runtime handler ([\w.-]+) from runtime list"
    rf"|RuntimeHandler {_QUOTE}([\w.-]+){_QUOTE} not supported"
)
TOP_LEVEL = ("config.toml", "crio.conf", "daemon.json")  # the file a runtime reads first; drop-ins sit below it
LEGACY_PACKAGES = ("nvidia-docker2", "nvidia-container-runtime")
CDI_DEFAULT_OPERATOR = (25, 10)  # GPU Operator release that turns CDI on by default
CDI_DEFAULT_CONTAINERD = (2, 0)  # containerd release whose enable_cdi defaults to true


@dataclass
class Subject:
    """One node's runtime configuration: a node from the host facts, or the config files given."""

    name: str  # the node's name; "" for files given
    file: str  # where a finding points: the cluster-facts file, or the config file given
    node: NodeFacts | None
    views: dict[str, RuntimeView]
    runtime: str | None  # containerd://2.0.5 as the kubelet reports it, when known
    folder: str = ""  # for config files given: the folder of the host they were grouped under ("" for one host)

    @property
    def ref(self) -> str:
        return f"Node/{self.name}" if self.name else ""

    @property
    def where(self) -> str:
        if self.name:
            return f"node {self.name}"
        return f"the runtime configuration in {self.folder}" if self.folder else "the runtime configuration given"

    @property
    def active(self) -> list[RuntimeView]:
        """The views the kubelet's runtime reads: the one the node reports, else containerd's and CRI-O's."""
        engine = (self.runtime or "").partition("://")[0].lower()
        if engine in self.views:
            return [self.views[engine]]
        return [v for e, v in self.views.items() if e in (CONTAINERD, CRIO)]

    @property
    def is_gpu(self) -> bool:
        if self.node is None:
            return True
        return self.node.is_gpu_node or bool(self.node.host and self.node.host.driver_version)

    def hit(self, view_file: str, message: str, fix: str, severity: Severity | None = None) -> Hit:
        return Hit(message, fix, file=view_file if not self.name else self.file, object_ref=self.ref, severity=severity)


def subjects(ctx: Context) -> list[Subject]:
    out = []
    for node in ctx.facts.nodes.values():
        host = node.host
        if host is None or not host.runtime_configs:
            continue
        runtime = node.runtime or ctx.facts.container_runtime
        found = views(host.runtime_configs, _containerd(runtime))
        out.append(Subject(node.name, node.host_source, node, found, runtime))
    given = {
        d.file: str(d.data[RUNTIME_CONFIG].get("text") or "")
        for d in ctx.configs
        if isinstance(d.data.get(RUNTIME_CONFIG), dict)
    }
    runtime = ctx.facts.container_runtime
    for folder, files in _by_host(given).items():
        subject = Subject("", next(iter(files)), None, views(files, _containerd(runtime)), runtime)
        subject.folder = folder
        out.append(subject)
    return out


def _by_host(given: dict[str, str]) -> dict[str, dict[str, str]]:
    """Config files given to the doctor, grouped by the host they come from: each top-level config (config.toml,
    crio.conf, daemon.json) with the files under its folder (its conf.d drop-ins); the rest together. Several
    hosts' /etc trees can be checked in one run."""
    tops = {posixpath.dirname(p) for p in given if posixpath.basename(p) in TOP_LEVEL}
    if len(tops) <= 1:
        return {"": given} if given else {}
    groups: dict[str, dict[str, str]] = {}
    for path, text in given.items():
        folder = posixpath.dirname(path)
        while folder not in tops and posixpath.dirname(folder) != folder:
            folder = posixpath.dirname(folder)
        # a host's files sit under one folder: etc/containerd and etc/crio share the host's etc
        groups.setdefault(folder if folder in tops else "", {})[path] = text
    return _join_hosts(groups)


def _join_hosts(groups: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """containerd's, CRI-O's and Docker's folders of one host (HOST/etc/containerd, HOST/etc/crio, HOST/etc/docker)
    are one group, named by HOST."""
    out: dict[str, dict[str, str]] = {}
    for folder, files in groups.items():
        host = folder
        parent = posixpath.dirname(folder)
        if posixpath.basename(folder) in ("containerd", "crio", "docker") and posixpath.basename(parent) == "etc":
            host = posixpath.dirname(parent)
        out.setdefault(host, {}).update(files)
    return out


def _containerd(runtime: str | None) -> tuple[int, ...] | None:
    return parse_version(runtime) if runtime and runtime.lower().startswith("containerd") else None


def _name(view: RuntimeView) -> str:
    return {CONTAINERD: "containerd", CRIO: "CRI-O", DOCKER: "dockerd"}[view.engine]


def _handlers(view: RuntimeView) -> str:
    return ", ".join(f"{h.name} ({h.binary or 'no binary named'})" for h in view.handlers.values()) or "none"


# --- GF046: the nvidia runtime handler -------------------------------------------------------------------------------


def _cdi_expected(ctx: Context) -> str | None:
    """Why the GPU Operator expects the runtime to read CDI specs, or None."""
    operator = operator_version(ctx.facts)
    for policy in ctx.gpu_operator_policies:
        on = policy_bool(policy.spec, "cdi", "enabled")
        if on:
            return f"{policy.ref} sets spec.cdi.enabled: true"
        if on is None and operator and operator >= CDI_DEFAULT_OPERATOR:
            return f"{policy.ref} leaves spec.cdi.enabled at GPU Operator {show(operator)}'s default (on)"
    return None


@rule("GF046")
def nvidia_runtime_registered(ctx: Context) -> Iterator[Hit]:
    cdi_reason = _cdi_expected(ctx)
    for s in subjects(ctx):
        for view in s.views.values():
            for p in view.problems:
                yield s.hit(p.file, f"{s.where}: {p.message}", p.fix)
        for view in s.active:
            if not view.files:
                continue
            top = view.files[0]
            for h in view.handlers.values():
                if h.name.startswith("nvidia") and not h.is_nvidia:
                    yield s.hit(
                        h.file or top,
                        f"{s.where}: {_name(view)}'s runtime handler {h.name!r} ({h.file or top}) runs"
                        f" {h.binary or 'the default runc binary (no BinaryName/runtime_path)'}, not"
                        " nvidia-container-runtime: pods that select it get no GPUs injected",
                        f"point it at /usr/bin/nvidia-container-runtime (`{CONFIGURE[view.engine]}`); "
                        + OPERATOR_CONFIGURES,
                    )
            if s.is_gpu and not view.nvidia and not view.nvidia_hook:
                yield s.hit(
                    top,
                    f"{s.where}: {_name(view)} registers no runtime handler that runs nvidia-container-runtime"
                    f" (read: {', '.join(view.files)}; handlers: {_handlers(view)}): pods with runtimeClassName"
                    " nvidia fail with 'no runtime for \"nvidia\" is configured' and others get no GPUs",
                    f"`{CONFIGURE[view.engine]}` registers it (a drop-in, imported from the top-level config); "
                    + OPERATOR_CONFIGURES,
                )
            if view.engine == CONTAINERD and cdi_reason:
                yield from _cdi(s, view, top, cdi_reason)
        docker = s.views.get(DOCKER)
        if docker and docker.files and s.is_gpu and not docker.nvidia and docker not in s.active:
            yield s.hit(
                docker.files[0],
                f"{s.where}: {docker.files[0]} registers no nvidia runtime (runtimes: {_handlers(docker)}):"
                " `docker run --runtime=nvidia` fails with 'unknown or invalid runtime name: nvidia'",
                f"`{CONFIGURE[DOCKER]}` (adds runtimes.nvidia; --set-as-default also makes it default-runtime)",
                Severity.warning,
            )


def _cdi(s: Subject, view: RuntimeView, top: str, reason: str) -> Iterator[Hit]:
    version = _containerd(s.runtime)
    on = view.cdi_enabled
    if on is None and version is not None and version >= CDI_DEFAULT_CONTAINERD:
        on = True  # containerd 2.0 turned enable_cdi on by default
    if on is not True:
        state = "enable_cdi = false" if on is False else "enable_cdi is not set"
        known = f" (containerd {show(version)})" if version else ""
        yield s.hit(
            top,
            f"{s.where}: {reason}, but containerd's CRI plugin has {state}{known}: the CDI devices the device plugin"
            " asks for are not injected (containerd before 2.0 defaults to off)",
            "set enable_cdi = true under the CRI plugin's section (`nvidia-ctk runtime configure --runtime=containerd"
            " --cdi.enabled`) and restart containerd",
            Severity.warning,
        )
    dirs = view.cdi_spec_dirs
    if dirs is not None and not {CDI_OUTPUT_DIR, "/run/cdi"} & {d.rstrip("/") for d in dirs}:
        yield s.hit(
            top,
            f"{s.where}: containerd's cdi_spec_dirs = {dirs} leaves out {CDI_OUTPUT_DIR}, where the GPU Operator's"
            " toolkit writes the nvidia CDI spec: the devices it names are unknown to containerd",
            f"add {CDI_OUTPUT_DIR} (the default is {list(CDI_DEFAULT_DIRS)}) or remove cdi_spec_dirs",
            Severity.warning,
        )


# --- GF047: RuntimeClasses -------------------------------------------------------------------------------------------


@rule("GF047", reads=("RuntimeClass",))
def runtime_classes(ctx: Context) -> Iterator[Hit]:
    classes = {rc.name: rc for rc in ctx.of_kind("RuntimeClass")}
    made_by_operator = {
        str(as_dict(p.spec.get("operator")).get("runtimeClass") or "nvidia"): p.ref for p in ctx.gpu_operator_policies
    }
    known = set(classes) | set(made_by_operator)
    seen: set[tuple[str, str]] = set()
    for t in ctx.templates:
        name = str(t.spec.get("runtimeClassName") or "")
        if not name or name in known or not (classes or made_by_operator):
            continue
        if (t.obj.ref, name) in seen:
            continue
        seen.add((t.obj.ref, name))
        have = ", ".join(sorted(known)) or "none"
        yield Hit(
            f"{t.obj.ref} names runtimeClassName {name!r}, which the cluster lacks (RuntimeClasses: {have}): the"
            f' API server refuses its pods (pod rejected: RuntimeClass "{name}" not found)',
            f"create a RuntimeClass {name!r} whose handler is the runtime's handler name (the GPU Operator creates"
            " 'nvidia' with handler nvidia), or use one that exists",
            t.obj,
        )
    subs = [s for s in subjects(ctx) if s.is_gpu]
    for rc in classes.values():
        handler = str(rc.data.get("handler") or "")
        selector = mapping(as_dict(rc.data.get("scheduling")).get("nodeSelector"))
        for s in subs:
            if selector and s.node is not None and not selector_matches({"matchLabels": selector}, s.node.labels):
                continue
            for view in s.active:
                if view.files and handler and handler not in view.handlers and handler.startswith("nvidia"):
                    yield Hit(
                        f"{rc.ref}'s handler {handler!r} is not a runtime {_name(view)} registers on {s.where}"
                        f' (handlers: {_handlers(view)}): its pods there fail with \'no runtime for "{handler}" is'
                        " configured'",
                        f"register the handler (`{CONFIGURE[view.engine]}`), or set the RuntimeClass's handler to"
                        " one the node has",
                        rc,
                    )
    yield from _default_runtime(ctx, subs)


def _default_runtime(ctx: Context, subs: list[Subject]) -> Iterator[Hit]:
    """GPU pods that name no RuntimeClass run under the default handler: without nvidia there, nothing injects the
    GPUs the device plugin allocated (only CDI through the CRI, with a device plugin set for it, does)."""
    plain = [(s, v) for s in subs for v in s.active if v.files and v.nvidia and not _default_is_nvidia(v)]
    if not plain:
        return
    where = "; ".join(f"{s.where} ({_name(v)} default: {v.default or 'the built-in default'})" for s, v in plain)
    for t in ctx.templates:
        if t.spec.get("runtimeClassName") or t.gpu_request() <= 0:
            continue
        if not any(k.startswith("nvidia.com/") for c in t.containers() for k in as_dict(resources(c, "limits"))):
            continue
        yield Hit(
            f"{t.obj.ref} asks for NVIDIA GPUs without a runtimeClassName, and the default runtime handler is not"
            f" nvidia on {where}: the device plugin's NVIDIA_VISIBLE_DEVICES reaches the container but no hook"
            " mounts the devices, so CUDA finds no GPU",
            "set runtimeClassName: nvidia on the pod, or make nvidia the default handler (`nvidia-ctk runtime"
            " configure --set-as-default`; the GPU Operator's toolkit does by default)",
            t.obj,
            severity=Severity.warning,
        )


def _default_is_nvidia(view: RuntimeView) -> bool:
    if view.nvidia_hook:
        return True  # CRI-O's hook mode: the hook runs in every container, whatever its handler
    handler = view.default_handler()
    return handler is not None and handler.is_nvidia


# --- GF048: the runtime configured after it started; pods that met it unconfigured ------------------------------------


def _time(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


@rule("GF048", reads=("Event",))
def configured_after_start(ctx: Context) -> Iterator[Hit]:
    subs = subjects(ctx)
    for s in subs:
        host = s.node.host if s.node else None
        if host is None or not host.runtime_started or not host.runtime_config_modified:
            continue
        for view in s.active:
            process = {CONTAINERD: "containerd", CRIO: "crio", DOCKER: "dockerd"}[view.engine]
            started = host.runtime_started.get(process)
            if started is None:
                continue
            wanted = {h.file for h in view.nvidia} | ({view.default_file} if view.default_file else set())
            late = sorted(
                (p, host.runtime_config_modified[p])
                for p in wanted
                if p in host.runtime_config_modified and host.runtime_config_modified[p] > started
            )
            if late:
                shown = ", ".join(f"{p} (written {_time(at)})" for p, at in late)
                yield s.hit(
                    late[0][0],
                    f"{s.where}: {process} started at {_time(started)}, before {shown} was written: the running"
                    f" {process} has not read it, so the nvidia handler it registers is not there yet (the race"
                    " between the toolkit writing the config and the runtime's restart)",
                    f"sudo systemctl restart {process} (the GPU Operator's toolkit restarts it itself unless"
                    f" {process.upper()}_RESTART_MODE is none), then delete the GPU pods that failed meanwhile",
                    Severity.critical,
                )
    by_node = {s.name: s for s in subs if s.name}
    for event in ctx.of_kind("Event"):
        text = str(event.data.get("message") or event.data.get("note") or "")
        found = NO_RUNTIME.search(text)
        if not found:
            continue
        handler = next(g for g in found.groups() if g)
        said = found.group(0).replace("\\", "")
        involved = as_dict(event.data.get("involvedObject") or event.data.get("regarding"))
        pod = f"{involved.get('kind', 'Pod')}/{involved.get('namespace', event.namespace)}/{involved.get('name', '')}"
        node_name = str(as_dict(event.data.get("source")).get("host") or event.data.get("reportingInstance") or "")
        on = by_node.get(node_name)
        registered = [v for v in on.active if handler in v.handlers] if on else []
        count = event.data.get("count") or as_dict(event.data.get("series")).get("count")
        times = f" ({count} times)" if count else ""
        if on is not None and registered:
            yield Hit(
                f"{pod} failed to start on node {node_name}{times}: '{said}',"
                f" yet {_name(registered[0])} there registers {handler!r} now: the pod met the runtime before the"
                " toolkit had configured it and the runtime restarted (the known race after a node boots or the"
                " toolkit is redeployed)",
                f"delete the pod so it is recreated (kubectl delete pod -n {involved.get('namespace', '')}"
                f" {involved.get('name', '')}); if it recurs, check that the runtime restarts after the toolkit"
                " writes its config (see GF048's host-facts check)",
                event,
                severity=Severity.warning,
            )
        else:
            state = f" and {on.where}'s configuration has no {handler!r} handler either" if on is not None else ""
            yield Hit(
                f"{pod} failed to start{' on node ' + node_name if node_name else ''}{times}: '{said}'{state}:"
                f" the runtime on that node has no handler named {handler!r}"
                " (not configured, or configured after the runtime last started)",
                "on the node: `nvidia-ctk runtime configure` for its runtime and restart the runtime"
                f" ({OPERATOR_CONFIGURES}); then delete the pod. `gpufleet doctor --host-facts` on the node shows"
                " which it is",
                event,
                severity=Severity.critical if on is not None else None,
            )


# --- GF049: legacy packages ---------------------------------------------------------------------------------------


@rule("GF049")
def legacy_packages(ctx: Context) -> Iterator[Hit]:
    for node in ctx.facts.nodes.values():
        packages = node.host.container_packages if node.host else None
        if not packages:
            continue
        legacy = [f"{p} {packages[p]}".strip() for p in LEGACY_PACKAGES if p in packages]
        if not legacy:
            continue
        toolkit = packages.get("nvidia-container-toolkit")
        beside = f" beside nvidia-container-toolkit {toolkit}" if toolkit else ""
        yield Hit(
            f"node {node.name} has {', '.join(legacy)} installed{beside}: these packages are deprecated and no longer"
            " published (NVIDIA container toolkit 1.15.0 removed them), so they get no fixes; everything they did"
            " is in nvidia-container-toolkit and `nvidia-ctk runtime configure`",
            "remove them (apt-get purge nvidia-docker2 nvidia-container-runtime, or dnf remove), install"
            " nvidia-container-toolkit, and register the runtime with `nvidia-ctk runtime configure`",
            file=node.host_source,
            object_ref=f"Node/{node.name}",
        )
