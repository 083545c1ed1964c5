"""Container runtime configurations as the runtime reads them: containerd's config.toml with the drop-ins its
`imports` name (config versions 1, 2 and containerd 2.x's 3), CRI-O's crio.conf with the crio.conf.d drop-ins,
and Docker's daemon.json. Each becomes one view of the runtime handlers it registers (name -> the binary it runs),
the default handler and the CDI settings, with the problems that make a section or a drop-in count for nothing.

Key names and files are the ones `nvidia-ctk runtime configure` writes (NVIDIA container toolkit
pkg/config/engine/{containerd,crio,docker}, v1.20.0-27-gd34b304): containerd
`plugins.<CRI plugin>.containerd.runtimes.<name>.options.BinaryName` (plus `options.Runtime` in v1) where the CRI
plugin is `cri` (v1), `io.containerd.grpc.v1.cri` (v2) or `io.containerd.cri.v1.runtime` (v3),
`containerd.default_runtime_name`, `enable_cdi`, and the drop-in /etc/containerd/conf.d/99-nvidia.toml imported
as /etc/containerd/conf.d/*.toml; CRI-O `crio.runtime.runtimes.<name>.runtime_path` and `crio.runtime.default_runtime`
in /etc/crio/crio.conf.d/99-nvidia.toml; Docker `runtimes.<name>.path` and `default-runtime`."""

from __future__ import annotations

import fnmatch
import json
import posixpath
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

CONTAINERD, CRIO, DOCKER = "containerd", "cri-o", "docker"
OCI_HOOK = "oci-hook"  # an OCI hooks.d file: CRI-O's (and podman's) hook mode, used instead of a runtime handler
NVIDIA_HOOK = "nvidia-container-runtime-hook"
# The CRI plugin that holds the runtimes, by config version (the toolkit's criRuntimePluginName).
CRI_PLUGIN = {1: "cri", 2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}
NVIDIA_BINARY = re.compile(r"(?:^|/)nvidia-container-runtime(?:\.(?:cdi|legacy|real))?$")
CDI_DEFAULT_DIRS = ("/etc/cdi", "/var/run/cdi")  # containerd's and CRI-O's default cdi_spec_dirs
CDI_OUTPUT_DIR = "/var/run/cdi"  # where the GPU Operator's toolkit writes the nvidia CDI spec
CONTAINERD_DEEP_MERGE = (2, 1)  # before 2.1 an imported file replaces each plugin section it names wholesale


@dataclass(frozen=True, slots=True)
class Handler:
    """A runtime handler (what a RuntimeClass's `handler` names) and the OCI runtime binary it runs."""

    name: str
    binary: str  # "" when the section names none
    file: str  # the file whose section is in force

    @property
    def is_nvidia(self) -> bool:
        return bool(NVIDIA_BINARY.search(self.binary))


@dataclass(frozen=True, slots=True)
class Problem:
    file: str
    message: str
    fix: str


@dataclass
class RuntimeView:
    """What one runtime (containerd, CRI-O or Docker) reads from its files, in the order it reads them."""

    engine: str
    files: list[str] = field(default_factory=list)
    handlers: dict[str, Handler] = field(default_factory=dict)
    default: str = ""  # the default handler's name; "" where the runtime's built-in default applies
    default_file: str = ""
    cdi_enabled: bool | None = None  # None: not set (containerd 2.x enables it by default, 1.x does not)
    cdi_spec_dirs: list[str] | None = None
    problems: list[Problem] = field(default_factory=list)
    nvidia_hook: str = ""  # CRI-O: the OCI hook file that runs nvidia-container-runtime-hook for every container

    @property
    def nvidia(self) -> list[Handler]:
        return [h for h in self.handlers.values() if h.is_nvidia]

    def default_handler(self) -> Handler | None:
        name = self.default or {CONTAINERD: "runc", DOCKER: "runc"}.get(self.engine, "")
        return self.handlers.get(name)


def kind_of(path: str, data: Mapping[str, Any]) -> str | None:
    """Which runtime a parsed file configures, or None for anything else (a pyproject.toml in a repository)."""
    if isinstance(data.get("crio"), dict):
        return CRIO
    if isinstance(data.get("plugins"), dict) or "imports" in data or ("version" in data and "containerd" in path):
        return CONTAINERD
    if path.endswith(".json") and ("runtimes" in data or "default-runtime" in data):
        return DOCKER
    return None


def parse(path: str, text: str) -> dict[str, Any]:
    """A runtime config's text as data: daemon.json as JSON, the others as TOML. Raises ValueError."""
    if path.endswith(".json"):
        data = json.loads(text) if text.strip() else {}
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        return data
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"not valid TOML: {exc}") from None


def is_hook_file(path: str) -> bool:
    """An OCI hook definition: a .json file in a hooks.d folder (/usr/share/containers/oci/hooks.d,
    /etc/containers/oci/hooks.d)."""
    return path.endswith(".json") and posixpath.basename(posixpath.dirname(path)) == "hooks.d"


def is_runtime_json(path: str) -> bool:
    """A JSON file the runtime rules read: Docker's daemon.json, or an OCI hook."""
    return posixpath.basename(path) == "daemon.json" or is_hook_file(path)


def looks_like_runtime_config(path: str) -> bool:
    """Whether a file's name says it is a runtime config (so a file that does not parse is worth a finding)."""
    parts = path.replace("\\", "/").split("/")
    name, folder = parts[-1], (parts[-2] if len(parts) > 1 else "")
    return (
        name in ("crio.conf", "daemon.json")
        or (name == "config.toml" and "containerd" in path)
        or (folder in ("crio.conf.d", "conf.d") and ("containerd" in path or "crio" in path))
        or name.startswith("99-nvidia")
    )


def _dig(data: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def as_mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _version(data: Mapping[str, Any]) -> int:
    value = data.get("version")
    return value if isinstance(value, int) and not isinstance(value, bool) else 1  # no version: 1


def _merge(into: dict[str, Any], extra: Mapping[str, Any]) -> None:
    """Deep merge, `extra` winning (containerd 2.1 and later; CRI-O's drop-ins)."""
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def _import_matches(pattern: str, path: str) -> bool:
    """Whether an `imports` entry names `path`: the same path, or (for files given apart from their host) the same
    folder name and file-name pattern."""
    if fnmatch.fnmatch(path, pattern):
        return True
    pat_dir, pat_name = posixpath.split(pattern)
    dir_, name = posixpath.split(path)
    return posixpath.basename(pat_dir) == posixpath.basename(dir_) and fnmatch.fnmatch(name, pat_name)


def _version_mismatch(path: str, version: int, runtime: tuple[int, ...] | None) -> Problem | None:
    """A config version the running containerd does not read: 3 on containerd 1.x (1.6.32 and 1.7.17 refuse it,
    "containerd config version `3` is not supported, the max version is `2`"), 1 on containerd 2.x (removed)."""
    if runtime is None:
        return None
    shown = ".".join(map(str, runtime))
    if version >= 3 and runtime < (2, 0):
        return Problem(
            path,
            f"{path} is a version {version} config (containerd 2.x's layout), which containerd {shown} does not read:"
            " 1.6.32, 1.7.17 and later refuse to start ('containerd config version `3` is not supported, the max"
            " version is `2`'), earlier ones misread it",
            'write it as version 2 (the runtimes under plugins."io.containerd.grpc.v1.cri"), or upgrade containerd'
            " to 2.x",
        )
    if version == 1 and runtime >= (2, 0):
        return Problem(
            path,
            f"{path} is a version 1 config (no `version` line), which containerd {shown} no longer reads: 2.0 removed"
            " version 1 configs and refuses their short plugin names such as `cri`",
            "convert it (`containerd config migrate` prints it as version 3) and restart containerd",
        )
    return None


def containerd_view(files: Mapping[str, str], runtime_version: tuple[int, ...] | None = None) -> RuntimeView:
    """containerd's config from its files (path -> text): the top-level config.toml, then each file its `imports`
    name, in order. On containerd older than 2.1 (when its version is known) an imported file replaces every plugin
    section it names; otherwise sections merge key by key."""
    view = RuntimeView(CONTAINERD)
    parsed: dict[str, dict[str, Any]] = {}
    for path, text in files.items():
        try:
            parsed[path] = parse(path, text)
        except ValueError as exc:
            view.problems.append(Problem(path, f"containerd cannot read {path}: {exc}", "fix the TOML syntax"))
    if not parsed:
        return view
    tops = [p for p in parsed if "imports" in parsed[p]] or [p for p in parsed if p.endswith("/config.toml")]
    top = tops[0] if tops else sorted(parsed)[0]
    order = [top]
    imports = [str(i) for i in parsed[top].get("imports") or [] if isinstance(i, str)]
    for pattern in imports:
        order.extend(sorted(p for p in parsed if p not in order and _import_matches(pattern, p)))
    if imports and _version(parsed[top]) == 1:
        view.problems.append(
            Problem(
                top,
                f"{top} is a version 1 config (no `version = 2` line): version 1 configs take no imports, so "
                f"{', '.join(imports)} {'is' if len(imports) == 1 else 'are'} not read",
                "add `version = 2` (containerd 1.x) or `version = 3` (containerd 2.x) at the top and move its "
                "sections to that version's plugin names (`containerd config migrate` prints them)",
            )
        )
        order = [top]
    for path in order if runtime_version is not None else ():
        mismatch = _version_mismatch(path, _version(parsed[path]), runtime_version)
        if mismatch:
            view.problems.append(mismatch)
    replace = runtime_version is not None and runtime_version < CONTAINERD_DEEP_MERGE
    cri: dict[str, Any] = {}
    cri_file: dict[str, str] = {}  # handler name or setting -> the file that set it
    for path in order:
        data = parsed[path]
        version = _version(data)
        plugin = CRI_PLUGIN.get(version, CRI_PLUGIN[3])
        plugins = as_mapping(data.get("plugins"))
        for other_version, other in CRI_PLUGIN.items():
            if other != plugin and isinstance(_dig(plugins, other, "containerd", "runtimes"), dict):
                view.problems.append(
                    Problem(
                        path,
                        f"{path} is a version {version} config, which reads the runtimes under "
                        f'[plugins."{plugin}"]; its [plugins."{other}".containerd.runtimes] (version '
                        f"{other_version}'s name) is ignored",
                        f'move the section under [plugins."{plugin}".containerd.runtimes], or set the file\'s '
                        f"`version = {other_version}` if that is the layout it was written for; `nvidia-ctk runtime "
                        "configure --runtime=containerd` writes the right one for the file's version",
                    )
                )
        section = plugins.get(plugin)
        if not isinstance(section, dict):
            continue
        if replace and path != top:
            cri = json.loads(json.dumps(section))  # a copy: the section as this file has it, nothing kept
            cri_file = {}
        else:
            _merge(cri, section)
        for name in _dig(section, "containerd", "runtimes") or {}:
            cri_file[f"runtime:{name}"] = path
        for key in ("default_runtime_name", "default_runtime"):
            if _dig(section, "containerd", key) is not None:
                cri_file[key] = path
        view.files.append(path)
    for path in order:
        if path not in view.files and path != top:
            view.files.append(path)
    for path in parsed:
        if path not in order and isinstance(_dig(parsed[path], "plugins"), dict):
            view.problems.append(
                Problem(
                    path,
                    f"{path} is not read: {top}'s imports ({', '.join(imports) if imports else 'none'}) do not name it",
                    f'add its folder to {top}\'s imports (imports = ["/etc/containerd/conf.d/*.toml"], with '
                    "version = 2 or 3), as `nvidia-ctk runtime configure --runtime=containerd` does, and restart "
                    "containerd",
                )
            )
    runtimes = _dig(cri, "containerd", "runtimes") or {}
    for name, spec in runtimes.items() if isinstance(runtimes, dict) else ():
        options = _dig(spec, "options") or {}
        binary = options.get("BinaryName") or options.get("Runtime") or ""
        view.handlers[str(name)] = Handler(str(name), str(binary), cri_file.get(f"runtime:{name}", top))
    default = _dig(cri, "containerd", "default_runtime_name")
    if isinstance(default, str) and default:
        view.default, view.default_file = default, cri_file.get("default_runtime_name", top)
    legacy = _dig(cri, "containerd", "default_runtime", "options")
    if isinstance(legacy, dict) and not view.default:  # containerd 1.3's default_runtime section (gone in 2.0)
        binary = str(legacy.get("BinaryName") or legacy.get("Runtime") or "")
        where = cri_file.get("default_runtime", top)
        view.handlers.setdefault("default_runtime", Handler("default_runtime", binary, where))
        view.default, view.default_file = "default_runtime", where
    cdi = cri.get("enable_cdi")
    if cdi is None:  # where the toolkit's version 1 writer puts it
        cdi = _dig(cri, "containerd", "enable_cdi")
    view.cdi_enabled = cdi if isinstance(cdi, bool) else None
    dirs = cri.get("cdi_spec_dirs")
    view.cdi_spec_dirs = [str(d) for d in dirs] if isinstance(dirs, list) else None
    return view


def crio_view(files: Mapping[str, str]) -> RuntimeView:
    """CRI-O's config: crio.conf, then the crio.conf.d drop-ins in file-name order, each overriding the keys it
    sets."""
    view = RuntimeView(CRIO)
    merged: dict[str, Any] = {}
    runtime_file: dict[str, str] = {}
    ordered = sorted(files, key=lambda p: (not p.endswith("/crio.conf") and p != "crio.conf", posixpath.basename(p)))
    for path in ordered:
        try:
            data = parse(path, files[path])
        except ValueError as exc:
            view.problems.append(Problem(path, f"CRI-O cannot read {path}: {exc}", "fix the TOML syntax"))
            continue
        if posixpath.basename(posixpath.dirname(path)) == "conf.d":
            view.problems.append(
                Problem(
                    path,
                    f"{path} is not read: CRI-O reads its drop-ins from /etc/crio/crio.conf.d, not conf.d (the"
                    " toolkit's `nvidia-ctk runtime configure --runtime=crio` wrote its drop-in to"
                    " /etc/crio/conf.d/99-nvidia.toml in releases 1.18 and 1.19; 1.20.0 writes crio.conf.d)",
                    "move it to /etc/crio/crio.conf.d/ (or run `nvidia-ctk runtime configure --runtime=crio` from"
                    " toolkit 1.20 or later) and restart crio",
                )
            )
            continue
        view.files.append(path)
        _merge(merged, data)
        for name in _dig(data, "crio", "runtime", "runtimes") or {}:
            runtime_file[str(name)] = path
        if _dig(data, "crio", "runtime", "default_runtime") is not None:
            view.default_file = path
    runtimes = _dig(merged, "crio", "runtime", "runtimes") or {}
    for name, spec in runtimes.items() if isinstance(runtimes, dict) else ():
        binary = _dig(spec, "runtime_path") or ""
        view.handlers[str(name)] = Handler(str(name), str(binary), runtime_file.get(str(name), ""))
    default = _dig(merged, "crio", "runtime", "default_runtime")
    view.default = default if isinstance(default, str) else ""
    view.cdi_enabled = True  # CRI-O always reads CDI specs (the toolkit's EnableCDI is a no-op for it)
    dirs = _dig(merged, "crio", "runtime", "cdi_spec_dirs")
    view.cdi_spec_dirs = [str(d) for d in dirs] if isinstance(dirs, list) else None
    return view


def docker_view(path: str, text: str) -> RuntimeView:
    view = RuntimeView(DOCKER)
    try:
        data = parse(path, text)
    except (ValueError, json.JSONDecodeError) as exc:
        view.problems.append(Problem(path, f"dockerd cannot read {path}: {exc}", "fix the JSON syntax"))
        return view
    view.files.append(path)
    runtimes = data.get("runtimes")
    for name, spec in runtimes.items() if isinstance(runtimes, dict) else ():
        view.handlers[str(name)] = Handler(str(name), str(_dig(spec, "path") or ""), path)
    default = data.get("default-runtime")
    view.default, view.default_file = (default, path) if isinstance(default, str) else ("", "")
    cdi = _dig(data, "features", "cdi")
    view.cdi_enabled = cdi if isinstance(cdi, bool) else None
    return view


def engine_of(path: str, text: str) -> str | None:
    """Which runtime a file configures, from its name and content; None when it is none of them."""
    if posixpath.basename(path) == "daemon.json":
        return DOCKER
    if is_hook_file(path):
        return OCI_HOOK
    try:
        data = parse(path, text)
    except ValueError:
        if not looks_like_runtime_config(path):
            return None
        return CRIO if "crio" in path else CONTAINERD
    return kind_of(path, data)


def _runs_nvidia_hook(text: str) -> bool:
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return False
    path = _dig(data, "hook", "path")
    return (
        isinstance(path, str) and posixpath.basename(path) == NVIDIA_HOOK and "prestart" in (data.get("stages") or [])
    )


def views(files: Mapping[str, str], runtime_version: tuple[int, ...] | None = None) -> dict[str, RuntimeView]:
    """Each runtime's view of the files (path -> text) one node has, by engine."""
    by_engine: dict[str, dict[str, str]] = {}
    for path, text in files.items():
        engine = engine_of(path, text)
        if engine is not None:
            by_engine.setdefault(engine, {})[path] = text
    out: dict[str, RuntimeView] = {}
    if CONTAINERD in by_engine:
        out[CONTAINERD] = containerd_view(by_engine[CONTAINERD], runtime_version)
    if CRIO in by_engine:
        out[CRIO] = crio_view(by_engine[CRIO])
        hooks = [p for p, t in by_engine.get(OCI_HOOK, {}).items() if _runs_nvidia_hook(t)]
        out[CRIO].nvidia_hook = hooks[0] if hooks else ""
    for path, text in by_engine.get(DOCKER, {}).items():
        out[DOCKER] = docker_view(path, text)
    return out
