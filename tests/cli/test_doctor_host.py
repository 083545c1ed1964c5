from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gpufleet.sources.node import host_facts as host
from tests.clirun import gpufleet
from tests.doctor.helpers import gpu_pod, write


def fake_host(root: Path) -> Path:
    """A GPU host whose nouveau is loaded and whose kernel headers are missing."""
    for path, text in {
        "proc/sys/kernel/hostname": "gpu-01\n",
        "proc/sys/kernel/osrelease": "6.8.0-60-generic\n",
        "sys/module/nvidia/version": "580.126.20\n",
        "proc/modules": "nouveau 3096576 1 - Live 0x0000000000000000\n",
        "proc/cmdline": "ro quiet\n",
    }.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return root


@pytest.fixture
def on_fake_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = fake_host(tmp_path / "root")
    real = host.read_host_facts
    monkeypatch.setattr(host, "read_host_facts", lambda: real(root))
    return root


def test_host_facts_print_this_hosts_node_entry(on_fake_host: Path) -> None:
    ran = gpufleet("doctor", "--host-facts")
    assert ran.returncode == 0, ran.stderr
    assert yaml.safe_load(ran.stdout) == {
        "nodes": {
            "gpu-01": {
                "driverVersion": "580.126.20",
                "kernel": "6.8.0-60-generic",
                "kernelHeaders": False,
                "nouveauLoaded": True,
                "nouveauBlacklisted": False,
            }
        }
    }
    as_json = json.loads(gpufleet("doctor", "--host-facts", "-o", "json").stdout)
    assert as_json == yaml.safe_load(ran.stdout)


def test_the_printed_entry_is_a_cluster_facts_file(on_fake_host: Path, tmp_path: Path) -> None:
    facts = tmp_path / "facts.yaml"
    facts.write_text(gpufleet("doctor", "--host-facts").stdout)
    pod = write(tmp_path, "pod.yaml", gpu_pod(image="nvidia/cuda:12.4.1-runtime-ubuntu22.04"))
    ran = gpufleet("doctor", str(pod), "--cluster-facts", str(facts), "-o", "json")
    assert ran.returncode == 1, ran.stderr
    found = {(f["rule"], f["severity"], f["object"]) for f in json.loads(ran.stdout)}
    assert ("GF017", "error", "Node/gpu-01") in found  # nouveau
    assert ("GF017", "warning", "Node/gpu-01") in found  # headers


def test_host_facts_on_this_machine_are_one_valid_entry() -> None:
    ran = gpufleet("doctor", "--host-facts", "-o", "json")
    assert ran.returncode == 0, ran.stderr
    [(name, entry)] = json.loads(ran.stdout)["nodes"].items()
    assert name and set(entry) <= {
        "driverVersion",
        "kernel",
        "kernelHeaders",
        "nouveauLoaded",
        "nouveauBlacklisted",
        "containerRuntime",
    }
