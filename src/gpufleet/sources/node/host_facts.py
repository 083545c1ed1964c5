"""This host's entry for the doctor's cluster-facts file (`gpufleet doctor --host-facts`): what no Kubernetes object
shows about a GPU node. The loaded NVIDIA driver, the running kernel and whether its headers are installed, whether
nouveau is loaded or denylisted, the container runtime's version when asking is cheap, the runtimes' config files
(containerd's config.toml and the drop-ins it imports or holds in conf.d, CRI-O's crio.conf and crio.conf.d, Docker's
daemon.json) with when each was written and when each runtime process started, and the NVIDIA container packages
installed (dpkg's database, or rpm). Every path is read under
`root`, so tests run on a fake root; a fact that cannot be read is None, never a guess."""

from __future__ import annotations

import contextlib
import glob
import os
import re
import shutil
import socket
import subprocess
import tomllib
from pathlib import Path

from gpufleet.doctor.facts import HostFacts
from gpufleet.sources.node.pci_affinity import read_host_affinity

ROOT = Path("/")
_DRIVER_IN_PROC = re.compile(
    r"Kernel Module\b.*?\s(\d{3,}\.\d+(?:\.\d+)?)(?=\s|$)", re.MULTILINE
)  # 570.133.20, 580.65.06, 570.26
_DRIVER = re.compile(r"^\d{3,}\.\d+(?:\.\d+)?$")
_MODPROBE_DIRS = ("etc/modprobe.d", "run/modprobe.d", "usr/lib/modprobe.d", "lib/modprobe.d")
_DENYLIST_LINE = re.compile(r"^\s*blacklist\s+nouveau\s*(?:#.*)?$", re.MULTILINE)
_DENYLIST_CMDLINE = re.compile(r"(?:^|\s)(?:modprobe\.blacklist|module_blacklist|rd\.driver\.blacklist)=(\S+)")
_RUNTIME_VERSION = re.compile(r"\bv?(\d+\.\d+\.\d+)")
_RUNTIME_TIMEOUT = 3.0  # seconds for `containerd --version`
_RUNTIME_CONFIGS = ("etc/containerd/config.toml", "etc/crio/crio.conf", "etc/docker/daemon.json")
# Drop-in folders the runtimes (or the toolkit) use: containerd reads conf.d only where config.toml imports it
# (and /etc/crio/conf.d, where toolkit 1.18 and 1.19 wrote CRI-O's drop-in, which CRI-O does not read)
# and the OCI hooks the toolkit's CRI-O hook mode writes instead of a runtime handler
_DROP_INS = (
    ("etc/containerd/conf.d", "*.toml"),
    ("etc/crio/crio.conf.d", "*"),
    ("etc/crio/conf.d", "*"),
    ("usr/share/containers/oci/hooks.d", "*.json"),
    ("etc/containers/oci/hooks.d", "*.json"),
)
MAX_CONFIG_BYTES = 1 << 20
_RUNTIME_PROCESSES = ("containerd", "crio", "dockerd")
# The NVIDIA container packages: the toolkit's, and the deprecated wrappers the doctor warns about
CONTAINER_PACKAGES = (
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container1",
    "libnvidia-container-tools",
    "nvidia-docker2",
    "nvidia-container-runtime",
)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def node_name(root: Path = ROOT) -> str:
    """The node name the kubelet registers by default: the host name, lower-cased."""
    for path in (root / "proc/sys/kernel/hostname", root / "etc/hostname"):
        text = (_read(path) or "").strip()
        if text:
            return text.lower()
    return socket.gethostname().lower() if root == ROOT else "localhost"


def driver_version(root: Path = ROOT) -> str | None:
    """The loaded NVIDIA kernel module's version, from /proc/driver/nvidia/version ("NVRM version: NVIDIA UNIX
    [Open ]Kernel Module [for <arch>]  570.133.20  ...") or /sys/module/nvidia/version."""
    found = _DRIVER_IN_PROC.search(_read(root / "proc/driver/nvidia/version") or "")
    if found:
        return found.group(1)
    text = (_read(root / "sys/module/nvidia/version") or "").strip()
    return text if _DRIVER.match(text) else None


def _exists(root: Path, path: Path) -> bool:
    """Whether `path` (under `root`) exists, following a symbolic link as it resolves on that host (an absolute
    target is taken under `root`, as /lib/modules/<kernel>/build -> /usr/src/linux-headers-<kernel> is)."""
    if not path.is_symlink():
        return path.exists()
    target = os.readlink(path)
    return (root / target.lstrip("/") if os.path.isabs(target) else path.parent / target).exists()


def nouveau_loaded(root: Path = ROOT) -> bool | None:
    """Whether nouveau is loaded: /sys/module/nouveau exists (the GPU Operator's driver manager checks its refcnt
    there) or /proc/modules lists it; None when neither can be read."""
    if (root / "sys/module/nouveau").exists():
        return True
    modules = _read(root / "proc/modules")
    if modules is not None:
        return any(line.split(" ", 1)[0] == "nouveau" for line in modules.splitlines())
    return False if (root / "sys/module").is_dir() else None


def nouveau_denylisted(root: Path = ROOT) -> bool | None:
    """Whether nouveau is denylisted: `blacklist nouveau` in a modprobe.d *.conf file, or the kernel command line's
    modprobe.blacklist= (module_blacklist=, rd.driver.blacklist=) naming it; None when nothing can be read."""
    seen = False
    for folder in _MODPROBE_DIRS:
        directory = root / folder
        if not directory.is_dir():
            continue
        seen = True
        for conf in sorted(directory.glob("*.conf")):
            if _DENYLIST_LINE.search(_read(conf) or ""):
                return True
    cmdline = _read(root / "proc/cmdline")
    if cmdline is not None:
        seen = True
        if any("nouveau" in found.split(",") for found in _DENYLIST_CMDLINE.findall(cmdline)):
            return True
    return False if seen else None


def container_runtime() -> str | None:
    """The container runtime's version as the kubelet reports it (containerd://2.0.5, cri-o://1.34.1), from the
    runtime's own --version; None when no runtime binary answers quickly."""
    for binary, name in (("containerd", "containerd"), ("crio", "cri-o")):
        path = shutil.which(binary)
        if not path:
            continue
        try:
            ran = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=_RUNTIME_TIMEOUT)
        except (OSError, subprocess.SubprocessError):
            continue
        found = _RUNTIME_VERSION.search(ran.stdout + ran.stderr)
        if found:
            return f"{name}://{found.group(1)}"
    return None


def gpu_numa_nodes(root: Path = ROOT) -> dict[int, int] | None:
    """Each GPU's NUMA node (GPUs numbered in PCI address order, as sysfs lists them); None when there is no GPU
    or a GPU's node is not given (-1: one NUMA node, nothing for Topology Manager to choose between)."""
    try:
        affinity = read_host_affinity(None, root / "sys")
    except OSError:
        return None
    if affinity is None or any(g.numa_node is None for g in affinity.gpus):
        return None
    return {g.index: g.numa_node for g in affinity.gpus if g.numa_node is not None}


def _config_text(path: Path) -> str | None:
    try:
        if not path.is_file() or path.stat().st_size > MAX_CONFIG_BYTES:
            return None
    except OSError:
        return None
    return _read(path)


def _imports(root: Path, text: str) -> list[Path]:
    """The files a containerd config's `imports` name (absolute host paths and globs, taken under `root`)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return []
    found: list[Path] = []
    for pattern in data.get("imports") or []:
        if isinstance(pattern, str) and pattern.startswith("/"):
            found.extend(Path(p) for p in sorted(glob.glob(glob.escape(str(root)) + pattern)))
    return found


def runtime_configs(root: Path = ROOT) -> tuple[dict[str, str], dict[str, float]]:
    """The runtimes' config files (host path -> text) and when each was last written (host path -> Unix seconds)."""
    paths: list[Path] = []
    for name in _RUNTIME_CONFIGS:
        paths.append(root / name)
    top = _config_text(root / _RUNTIME_CONFIGS[0])
    if top is not None:
        paths.extend(_imports(root, top))
    for folder, pattern in _DROP_INS:
        directory = root / folder
        if directory.is_dir():
            paths.extend(sorted(directory.glob(pattern)))
    texts: dict[str, str] = {}
    written: dict[str, float] = {}
    for path in paths:
        host_path = "/" + path.relative_to(root).as_posix()
        if host_path in texts:
            continue
        text = _config_text(path)
        if text is None:
            continue
        texts[host_path] = text
        with contextlib.suppress(OSError):  # removed since it was read: the text stands without its time
            written[host_path] = path.stat().st_mtime
    return texts, written


def _boot_time(root: Path) -> float | None:
    found = re.search(r"^btime\s+(\d+)", _read(root / "proc/stat") or "", re.MULTILINE)
    return float(found.group(1)) if found else None


def runtime_started(root: Path = ROOT) -> dict[str, float]:
    """containerd, crio, dockerd -> when its (earliest) process started, in Unix seconds: /proc/<pid>/stat's start
    time in clock ticks after boot, plus /proc/stat's btime."""
    boot = _boot_time(root)
    proc = root / "proc"
    if boot is None or not proc.is_dir():
        return {}
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    out: dict[str, float] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        comm = (_read(entry / "comm") or "").strip()
        if comm not in _RUNTIME_PROCESSES:
            continue
        fields = (_read(entry / "stat") or "").rpartition(")")[2].split()
        if len(fields) < 20 or not fields[19].isdigit():
            continue
        started = boot + int(fields[19]) / ticks  # field 22 of stat: starttime
        out[comm] = min(out.get(comm, started), started)
    return out


def _dpkg_packages(root: Path) -> dict[str, str] | None:
    status = _read(root / "var/lib/dpkg/status")
    if status is None:
        return None
    out: dict[str, str] = {}
    for paragraph in status.split("\n\n"):
        fields: dict[str, str] = {}
        for line in paragraph.splitlines():
            key, colon, value = line.partition(":")
            if colon and not line.startswith(" "):
                fields[key.strip()] = value.strip()
        name = fields.get("Package", "")
        if name in CONTAINER_PACKAGES and fields.get("Status", "").endswith(" installed"):
            out[name] = fields.get("Version", "")
    return out


def _rpm_packages() -> dict[str, str] | None:
    rpm = shutil.which("rpm")
    if not rpm:
        return None
    try:
        ran = subprocess.run(
            [rpm, "-q", "--qf", "%{NAME} %{VERSION}-%{RELEASE}\n", *CONTAINER_PACKAGES],
            capture_output=True,
            text=True,
            timeout=_RUNTIME_TIMEOUT,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    out: dict[str, str] = {}
    for line in ran.stdout.splitlines():
        name, _, version = line.partition(" ")
        if name in CONTAINER_PACKAGES and version:  # `package X is not installed` lines have other first words
            out[name] = version
    return out


def container_packages(root: Path = ROOT) -> dict[str, str] | None:
    """The NVIDIA container packages installed -> version, from dpkg's database, else rpm (asked only for the real
    root); None when neither can be read."""
    found = _dpkg_packages(root)
    if found is None and root == ROOT:
        found = _rpm_packages()
    return found


def read_host_facts(root: Path = ROOT) -> tuple[str, HostFacts]:
    """This host's node name and facts (paths under `root`; the runtime binaries are asked only for the real root)."""
    kernel = (_read(root / "proc/sys/kernel/osrelease") or "").strip() or None
    headers = _exists(root, root / "lib/modules" / kernel / "build") if kernel else None
    configs, written = runtime_configs(root)
    facts = HostFacts.model_validate(
        {
            "driverVersion": driver_version(root),
            "kernel": kernel,
            "kernelHeaders": headers,
            "nouveauLoaded": nouveau_loaded(root),
            "nouveauBlacklisted": nouveau_denylisted(root),
            "containerRuntime": container_runtime() if root == ROOT else None,
            "gpuNumaNodes": gpu_numa_nodes(root),
            "runtimeConfigs": configs or None,
            "runtimeConfigModified": written or None,
            "runtimeStarted": runtime_started(root) or None,
            "containerPackages": container_packages(root) or None,
        }
    )
    return node_name(root), facts
