"""`gpufleet fabric export --format labels|kueue|kai|volcano`: the Kubernetes schedulers' topology inputs."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.fabric.intended import load_expected
from gpufleet.fabric.topology import topology_from_graph
from gpufleet.integrations.kubernetes.crds import problems
from gpufleet.integrations.kubernetes.topology import NVLINK_DOMAIN_LABEL, node_labels
from tests.clirun import Ran, gpufleet
from tests.conftest import CAPTURES, REPO_ROOT

IBSIM = REPO_ROOT / "examples" / "clusters" / "ibsim-fattree.yaml"
GB200 = REPO_ROOT / "examples" / "clusters" / "gb200-nvl72.yaml"
THREE_TIER = REPO_ROOT / "tests" / "integrations" / "slurm" / "data" / "three-tier-fabric.yaml"
NETDISCOVER = CAPTURES / "ibsim" / "ibnetdiscover.txt"


def _export(*args: str, input: str | None = None) -> Ran:
    res = gpufleet("fabric", "export", *args, input=input)
    assert res.returncode == 0, res.stderr
    return res


def _docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d is not None]


@pytest.mark.parametrize(
    ("fmt", "kinds"),
    [
        ("kueue", ["Topology", "ResourceFlavor"]),
        ("kai", ["Topology"]),
        ("volcano", ["HyperNode"] * 7),  # 4 leaves, 2 spine groups, 1 core
    ],
)
def test_each_format_writes_valid_objects(fmt: str, kinds: list[str]) -> None:
    docs = _docs(_export("--format", fmt, "--cluster", str(THREE_TIER)).stdout)
    assert [d["kind"] for d in docs] == kinds
    for doc in docs:
        assert problems(doc) == [], doc


def test_labels_as_yaml_and_json(tmp_path: Path) -> None:
    expected = node_labels(topology_from_graph(load_expected(IBSIM)))
    assert yaml.safe_load(_export("--format", "labels", "--cluster", str(IBSIM)).stdout) == expected
    assert json.loads(_export("--format", "labels", "--cluster", str(IBSIM), "-o", "json").stdout) == expected
    out = tmp_path / "labels.json"
    res = _export("--format", "labels", "--cluster", str(IBSIM), "-o", "json", "--out", str(out))
    assert f"wrote {out}" in res.stdout and json.loads(out.read_text()) == expected


def test_the_nvlink_domains_the_manifest_names_reach_labels_and_levels() -> None:
    labels = yaml.safe_load(_export("--format", "labels", "--cluster", str(GB200)).stdout)
    domains = {v[NVLINK_DOMAIN_LABEL] for v in labels.values()}
    assert len(domains) == 4 and all(re.fullmatch(r"[a-z0-9]+-nvl\d\d", d) for d in domains)  # four NVL72 racks
    topology_object = _docs(_export("--format", "kueue", "--cluster", str(GB200)).stdout)[0]
    assert topology_object["spec"]["levels"][0] == {"nodeLabel": NVLINK_DOMAIN_LABEL}


def test_names_and_flavor_labels() -> None:
    docs = _docs(
        _export(
            "--format", "kueue", "--cluster", str(IBSIM), "--name", "ib-fabric",
            "--flavor-label", "pool=h100", "--flavor-label", "nvidia.com/gpu.present=true",
        ).stdout
    )  # fmt: skip
    assert [d["metadata"]["name"] for d in docs] == ["ib-fabric", "ib-fabric"]
    assert docs[1]["spec"] == {
        "nodeLabels": {"pool": "h100", "nvidia.com/gpu.present": "true"},
        "topologyName": "ib-fabric",
    }
    kai = _docs(_export("--format", "kai", "--cluster", str(IBSIM), "--name", "cluster-topology").stdout)
    assert kai[0]["metadata"]["name"] == "cluster-topology"


def test_switch_descriptions_from_a_discovery_become_readable_values() -> None:
    """An NVIDIA switch's node description ("MF0;leaf-01:MQM9700/U1") as the discovered switch's name."""
    text = NETDISCOVER.read_text()
    for n in range(1, 5):
        text = text.replace(f'"leaf{n}"', f'"MF0;leaf-0{n}:MQM9700/U1"')
    for n in (1, 2):
        text = text.replace(f'"spine{n}"', f'"MF0;spine-0{n}:MQM9700/U1"')
    labels = yaml.safe_load(_export("--format", "labels", "--ibnetdiscover", "-", input=text).stdout)
    assert {v["fabric.topograph.run/tier-0"] for v in labels.values()} >= {"leaf-02", "leaf-03"}
    for doc in _docs(_export("--format", "volcano", "--ibnetdiscover", "-", input=text).stdout):
        assert problems(doc) == [] and re.fullmatch(r"(leaf|spine)-0\d", doc["metadata"]["name"])


def test_bad_options_are_one_line_errors() -> None:
    for args, words in [
        (("--format", "kueue", "--flavor-label", "pool"), "--flavor-label 'pool' is not KEY=VALUE"),
        (("--format", "kai", "--name", "Fabric"), "--name 'Fabric' is not a valid Kubernetes object name"),
        (("--format", "labels", "-o", "table"), "-o table is not an export format"),
    ]:
        res = gpufleet("fabric", "export", *args, "--cluster", str(IBSIM))
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
        lines = res.stderr.strip().splitlines()
        assert words in lines[0] and lines[-1].strip().startswith("fix: "), lines


def test_help_names_the_formats() -> None:
    res = gpufleet("fabric", "export", "--help")
    assert res.returncode == 0
    for word in ("labels", "kueue", "kai", "volcano", "--flavor-label", "accelerator.topograph.run/domain"):
        assert word in res.stdout, word
