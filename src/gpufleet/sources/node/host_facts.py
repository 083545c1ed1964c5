"""This host's entry for the doctor's cluster-facts file (`gpufleet doctor --host-facts`): what no Kubernetes object
shows about a GPU node. The loaded NVIDIA driver, the running kernel and whether its headers are installed, whether
nouveau is loaded or denylisted, and the container runtime's version when asking is cheap. Every path is read under
`root`, so tests run on a fake root; a fact that cannot be read is None, never a guess."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
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


def read_host_facts(root: Path = ROOT) -> tuple[str, HostFacts]:
    """This host's node name and facts (paths under `root`; the runtime binaries are asked only for the real root)."""
    kernel = (_read(root / "proc/sys/kernel/osrelease") or "").strip() or None
    headers = _exists(root, root / "lib/modules" / kernel / "build") if kernel else None
    facts = HostFacts.model_validate(
        {
            "driverVersion": driver_version(root),
            "kernel": kernel,
            "kernelHeaders": headers,
            "nouveauLoaded": nouveau_loaded(root),
            "nouveauBlacklisted": nouveau_denylisted(root),
            "containerRuntime": container_runtime() if root == ROOT else None,
            "gpuNumaNodes": gpu_numa_nodes(root),
        }
    )
    return node_name(root), facts
