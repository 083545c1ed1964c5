from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpufleet.sources.node import host_facts as host
from gpufleet.sources.node.host_facts import read_host_facts

# /proc/driver/nvidia/version as the proprietary and the open kernel modules print it.
PROPRIETARY = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.133.20  Fri Feb 28 08:47:14 UTC 2025\n"
    "GCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04)\n"
)
OPEN = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build  (dvs-builder@U16-I3-B03-4-3)"
    "  Sun Jul 27 06:54:38 UTC 2025\nGCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n"
)
KERNEL = "6.8.0-60-generic"
PROC_MODULES = (
    "nvidia_uvm 1990656 0 - Live 0x0000000000000000 (POE)\n"
    "nouveau 3096576 1 - Live 0x0000000000000000\n"
    "drm_ttm_helper 16384 1 nouveau, Live 0x0000000000000000\n"
)


def put(root: Path, path: str, text: str = "") -> Path:
    target = root / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    return target


def a_gpu_host(root: Path) -> Path:
    """A fake root as a GPU node running the proprietary driver, with headers, nouveau denylisted."""
    put(root, "proc/sys/kernel/hostname", "GPU-01\n")
    put(root, "proc/sys/kernel/osrelease", KERNEL + "\n")
    put(root, "proc/driver/nvidia/version", PROPRIETARY)
    put(root, "proc/modules", "nvidia_uvm 1990656 0 - Live 0x0000000000000000 (POE)\n")
    put(root, "proc/cmdline", f"BOOT_IMAGE=/vmlinuz-{KERNEL} root=/dev/sda1 ro quiet\n")
    put(root, "etc/modprobe.d/blacklist-nouveau.conf", "blacklist nouveau\noptions nouveau modeset=0\n")
    (root / f"lib/modules/{KERNEL}/build").mkdir(parents=True)
    (root / "sys/module/nvidia").mkdir(parents=True)
    return root


def test_a_gpu_host_reads_as_its_node_entry(tmp_path: Path) -> None:
    name, facts = read_host_facts(a_gpu_host(tmp_path))
    assert name == "gpu-01"  # the kubelet registers the host name lower-cased
    assert facts.model_dump(by_alias=True, exclude_none=True) == {
        "driverVersion": "570.133.20",
        "kernel": KERNEL,
        "kernelHeaders": True,
        "nouveauLoaded": False,
        "nouveauBlacklisted": True,
    }


def test_the_open_kernel_module_line_and_sysfs_fallback(tmp_path: Path) -> None:
    put(tmp_path / "a", "proc/driver/nvidia/version", OPEN)
    assert host.driver_version(tmp_path / "a") == "580.65.06"
    put(tmp_path / "b", "sys/module/nvidia/version", "570.172.08\n")
    assert host.driver_version(tmp_path / "b") == "570.172.08"
    put(tmp_path / "c", "sys/module/nvidia/version", "garbage\n")
    assert host.driver_version(tmp_path / "c") is None


def test_an_empty_root_knows_nothing(tmp_path: Path) -> None:
    name, facts = read_host_facts(tmp_path)
    assert name == "localhost"
    assert facts.model_dump(exclude_none=True) == {}


def test_headers_follow_the_build_link_under_the_root(tmp_path: Path) -> None:
    put(tmp_path, "proc/sys/kernel/osrelease", KERNEL)
    modules = tmp_path / f"lib/modules/{KERNEL}"
    modules.mkdir(parents=True)
    (modules / "build").symlink_to(f"/usr/src/linux-headers-{KERNEL}")
    assert read_host_facts(tmp_path)[1].kernel_headers is False  # the package is gone, the link dangles
    (tmp_path / f"usr/src/linux-headers-{KERNEL}").mkdir(parents=True)
    assert read_host_facts(tmp_path)[1].kernel_headers is True


def test_headers_for_another_kernel_do_not_count(tmp_path: Path) -> None:
    put(tmp_path, "proc/sys/kernel/osrelease", KERNEL)
    (tmp_path / "lib/modules/6.8.0-59-generic/build").mkdir(parents=True)
    assert read_host_facts(tmp_path)[1].kernel_headers is False


@pytest.mark.parametrize(
    ("files", "dirs", "loaded"),
    [
        ({}, ["sys/module/nouveau"], True),  # what the GPU Operator's driver manager looks at
        ({"proc/modules": PROC_MODULES}, [], True),
        ({"proc/modules": "nvidia 1 0 - Live 0x0\n"}, [], False),
        ({}, ["sys/module/nvidia"], False),
        ({}, [], None),
    ],
)
def test_nouveau_loaded(tmp_path: Path, files: dict[str, str], dirs: list[str], loaded: bool | None) -> None:
    for path, text in files.items():
        put(tmp_path, path, text)
    for path in dirs:
        (tmp_path / path).mkdir(parents=True)
    assert host.nouveau_loaded(tmp_path) is loaded


@pytest.mark.parametrize(
    ("files", "denylisted"),
    [
        ({"etc/modprobe.d/blacklist-nouveau.conf": "blacklist nouveau\n"}, True),
        ({"usr/lib/modprobe.d/nvidia.conf": "  blacklist   nouveau  # nvidia package\n"}, True),
        ({"etc/modprobe.d/blacklist.conf": "# blacklist nouveau\nblacklist nouveaux\n"}, False),
        ({"etc/modprobe.d/nouveau.txt": "blacklist nouveau\n"}, False),  # only *.conf files are read
        ({"proc/cmdline": "ro quiet modprobe.blacklist=nouveau,snd_hda_intel intel_iommu=on\n"}, True),
        ({"proc/cmdline": "ro rd.driver.blacklist=nouveau\n"}, True),
        ({"proc/cmdline": "ro quiet nouveau.modeset=0\n"}, False),
        ({}, None),
    ],
)
def test_nouveau_denylisted(tmp_path: Path, files: dict[str, str], denylisted: bool | None) -> None:
    for path, text in files.items():
        put(tmp_path, path, text)
    assert host.nouveau_denylisted(tmp_path) is denylisted


def test_the_runtime_is_asked_only_on_the_real_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []
    monkeypatch.setattr(host, "container_runtime", lambda: asked.append("yes") or "containerd://2.0.5")
    assert read_host_facts(a_gpu_host(tmp_path))[1].container_runtime is None and not asked


@pytest.mark.parametrize(
    ("binary", "output", "expected"),
    [
        ("containerd", "containerd github.com/containerd/containerd/v2 v2.0.5 fb4c30d4ed\n", "containerd://2.0.5"),
        ("containerd", "containerd containerd.io 1.7.27 05044ec0a9a7\n", "containerd://1.7.27"),
        ("crio", "crio version 1.34.1\n", "cri-o://1.34.1"),
        ("containerd", "no version here\n", None),
    ],
)
def test_the_runtime_version_from_its_binary(
    monkeypatch: pytest.MonkeyPatch, binary: str, output: str, expected: str | None
) -> None:
    monkeypatch.setattr(host.shutil, "which", lambda name: f"/usr/bin/{name}" if name == binary else None)

    def run(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        assert args == [f"/usr/bin/{binary}", "--version"] and kwargs["timeout"] > 0
        return subprocess.CompletedProcess(args, 0, output, "")

    monkeypatch.setattr(host.subprocess, "run", run)
    assert host.container_runtime() == expected


def test_a_hanging_runtime_binary_gives_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host.shutil, "which", lambda name: f"/usr/bin/{name}")

    def hang(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        raise subprocess.TimeoutExpired(args, kwargs["timeout"])

    monkeypatch.setattr(host.subprocess, "run", hang)
    assert host.container_runtime() is None


def test_each_gpus_numa_node_from_the_sysfs_tree(tmp_path: Path) -> None:
    """GPUs on two sockets (the PCIe layout of tests/sources/node/test_pci_affinity.py), as the single-numa-node
    check of `gpufleet doctor` reads them; a GPU whose node the firmware does not give says nothing."""
    from tests.sources.node.test_pci_affinity import V100_A, device

    sys_root = tmp_path / "sys"
    device(sys_root, V100_A, numa=0, cpus="0-19", vendor="0x10de", cls="0x030200")
    device(sys_root, ("pci0000:d7", "0000:d7:00.0", "0000:d8:00.0"), numa=1, cpus="20-39", vendor="0x10de",
           cls="0x030200")  # fmt: skip
    facts = read_host_facts(tmp_path)[1]
    assert facts.gpu_numa_nodes == {0: 0, 1: 1} and facts.gpus_per_numa_node == 1
    device(sys_root, ("pci0000:e7", "0000:e7:00.0", "0000:e8:00.0"), numa=-1, cpus="", vendor="0x10de", cls="0x030200")
    assert host.gpu_numa_nodes(tmp_path) is None


RUNTIME_DATA = Path(__file__).parents[2] / "doctor" / "data" / "runtime"
# /var/lib/dpkg/status paragraphs as dpkg writes them (one package removed with its config kept)
DPKG_STATUS = """Package: nvidia-docker2
Status: install ok installed
Priority: optional
Section: utils
Installed-Size: 15
Maintainer: NVIDIA CORPORATION <cudatools@nvidia.com>
Architecture: all
Version: 2.13.0-1
Depends: nvidia-container-toolkit (>= 1.13.0-1)
Description: nvidia-docker CLI wrapper
 Replaces nvidia-docker with a new implementation based on the NVIDIA Container Toolkit

Package: nvidia-container-toolkit
Status: install ok installed
Architecture: amd64
Version: 1.13.5-1
Description: NVIDIA Container toolkit

Package: nvidia-container-runtime
Status: deinstall ok config-files
Architecture: all
Version: 3.13.0-1
Description: NVIDIA container runtime

Package: zlib1g
Status: install ok installed
Version: 1:1.2.13.dfsg-1ubuntu4
"""


def proc_stat(pid: int, comm: str, start_ticks: int) -> str:
    """/proc/<pid>/stat: pid (comm) state ... with field 22, starttime, in clock ticks after boot."""
    fields = ["S", "1", str(pid), str(pid), "0", "-1", "4194560"] + ["0"] * 14
    fields[19] = str(start_ticks)
    return f"{pid} ({comm}) " + " ".join(fields) + " 0 0\n"


def a_runtime_host(root: Path) -> Path:
    """A fake root with containerd's config and the toolkit's drop-in, CRI-O's and Docker's configs, containerd
    running, and the dpkg database."""
    base = RUNTIME_DATA / "containerd-v2"
    put(root, "etc/containerd/config.toml", (base / "config.toml").read_text())
    put(root, "etc/containerd/conf.d/99-nvidia.toml", (base / "conf.d" / "99-nvidia.toml").read_text())
    put(root, "etc/containerd/conf.d/README", "not a config\n")
    put(root, "etc/crio/crio.conf.d/99-nvidia.toml", (RUNTIME_DATA / "crio/crio.conf.d/99-nvidia.toml").read_text())
    put(root, "etc/docker/daemon.json", (RUNTIME_DATA / "docker/daemon.json").read_text())
    put(root, "proc/stat", "cpu  1 2 3 4\nbtime 1717400000\nprocesses 1234\n")
    ticks = os.sysconf("SC_CLK_TCK")
    put(root, "proc/812/comm", "containerd\n")
    put(root, "proc/812/stat", proc_stat(812, "containerd", 100 * ticks))
    put(root, "proc/977/comm", "kubelet\n")
    put(root, "proc/977/stat", proc_stat(977, "kubelet", 50 * ticks))
    put(root, "proc/self/comm", "python\n")
    put(root, "var/lib/dpkg/status", DPKG_STATUS)
    return root


def test_the_runtimes_configs_their_times_and_the_runtimes_start(tmp_path: Path) -> None:
    root = a_runtime_host(tmp_path)
    os.utime(root / "etc/containerd/conf.d/99-nvidia.toml", (1717400500, 1717400500))
    texts, written = host.runtime_configs(root)
    assert sorted(texts) == [
        "/etc/containerd/conf.d/99-nvidia.toml",
        "/etc/containerd/config.toml",
        "/etc/crio/crio.conf.d/99-nvidia.toml",
        "/etc/docker/daemon.json",
    ]
    assert texts["/etc/containerd/config.toml"] == (RUNTIME_DATA / "containerd-v2/config.toml").read_text()
    assert written["/etc/containerd/conf.d/99-nvidia.toml"] == 1717400500
    assert host.runtime_started(root) == {"containerd": 1717400100.0}  # btime + 100 s; the kubelet is not a runtime


def test_imports_outside_conf_d_are_read_and_big_files_are_not(tmp_path: Path) -> None:
    put(tmp_path, "etc/containerd/config.toml", 'version = 2\nimports = ["/opt/site/containerd/*.toml"]\n')
    put(tmp_path, "opt/site/containerd/gpu.toml", "version = 2\n")
    put(tmp_path, "etc/crio/crio.conf", "#" * (host.MAX_CONFIG_BYTES + 1))
    texts, _ = host.runtime_configs(tmp_path)
    assert sorted(texts) == ["/etc/containerd/config.toml", "/opt/site/containerd/gpu.toml"]


def test_the_nvidia_container_packages_from_dpkg(tmp_path: Path) -> None:
    put(tmp_path, "var/lib/dpkg/status", DPKG_STATUS)
    assert host.container_packages(tmp_path) == {"nvidia-docker2": "2.13.0-1", "nvidia-container-toolkit": "1.13.5-1"}
    assert host.container_packages(tmp_path / "elsewhere") is None  # no dpkg database, and rpm is not asked


def test_the_host_facts_feed_the_doctors_runtime_rules(tmp_path: Path) -> None:
    """What --host-facts prints, given back as a cluster-facts file: the drop-in written after containerd started
    (GF048) and nvidia-docker2 (GF049) are found."""
    import yaml

    from gpufleet.doctor.engine import run

    root = a_runtime_host(tmp_path / "root")
    put(root, "proc/sys/kernel/hostname", "gpu-07\n")
    put(root, "proc/driver/nvidia/version", PROPRIETARY)
    os.utime(root / "etc/containerd/conf.d/99-nvidia.toml", (1717400500, 1717400500))
    name, facts = read_host_facts(root)
    entry = {
        "containerRuntime": "containerd://1.7.27",
        "nodes": {name: facts.model_dump(by_alias=True, exclude_none=True)},
    }
    facts_file = tmp_path / "facts.yaml"
    facts_file.write_text(yaml.safe_dump(entry))
    report = run([], cluster_facts=facts_file, check_schema=False)
    rules = sorted({f.rule for f in report.findings})
    assert rules == ["GF048", "GF049"], report.findings
    [late] = [f for f in report.findings if f.rule == "GF048"]
    assert late.object == "Node/gpu-07" and "/etc/containerd/conf.d/99-nvidia.toml" in late.message


def test_a_crio_drop_in_in_conf_d_is_gathered_for_the_doctor_to_name(tmp_path: Path) -> None:
    drop_in = (RUNTIME_DATA / "crio/crio.conf.d/99-nvidia.toml").read_text()
    put(tmp_path, "etc/crio/crio.conf", (RUNTIME_DATA / "crio/crio.conf").read_text())
    put(tmp_path, "etc/crio/conf.d/99-nvidia.toml", drop_in)  # where toolkit 1.18 and 1.19 wrote it
    texts, _ = host.runtime_configs(tmp_path)
    assert sorted(texts) == ["/etc/crio/conf.d/99-nvidia.toml", "/etc/crio/crio.conf"]


def test_the_oci_hook_of_crios_hook_mode_is_gathered(tmp_path: Path) -> None:
    hook = (RUNTIME_DATA / "crio-hook/hooks.d/oci-nvidia-hook.json").read_text()
    put(tmp_path, "usr/share/containers/oci/hooks.d/oci-nvidia-hook.json", hook)
    texts, _ = host.runtime_configs(tmp_path)
    assert texts == {"/usr/share/containers/oci/hooks.d/oci-nvidia-hook.json": hook}
