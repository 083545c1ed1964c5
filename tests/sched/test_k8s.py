"""Kubernetes semantics: quantities, extended resources, affinity, tolerations, priorities, gangs, nodes, snapshots."""

from __future__ import annotations

import json
import os
import subprocess
from decimal import Decimal
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from gpufleet.errors import ManifestError, NotFoundError, ParseError
from gpufleet.model import GpuHealth, GpuSharing, TaintEffect
from gpufleet.sched.framework.snapshot import (
    is_extended_resource,
    load_snapshot,
    parse_node,
    parse_pod,
    parse_quantity,
    parse_snapshot,
)
from tests.conftest import REPO_ROOT, require_tool
from tests.sched.k8s_objects import GPU_TOL, H100_NVL, klist, knode, kpod

SAMPLE = REPO_ROOT / "examples" / "k8s" / "snapshot-h100.json"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", Decimal("0.5")),
        ("2", Decimal(2)),
        ("16Gi", Decimal(16 * 2**30)),
        ("1e3", Decimal(1000)),
        ("1.5", Decimal("1.5")),
        ("128974848", Decimal(128974848)),
        ("129M", Decimal(129_000_000)),
        ("123Mi", Decimal(123 * 2**20)),
        ("2063731096Ki", Decimal(2063731096 * 1024)),
        ("100u", Decimal("0.0001")),
        (4, Decimal(4)),
    ],
)
def test_quantities(text: str | int, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "abc", "16 Gi", "Gi", "1.2.3"])
def test_bad_quantity_is_a_parse_error(text: str) -> None:
    with pytest.raises(ParseError, match="not a Kubernetes quantity"):
        parse_quantity(text)


def test_extended_resource_names() -> None:
    assert is_extended_resource("nvidia.com/gpu")
    assert is_extended_resource("nvidia.com/mig-1g.10gb")
    assert not is_extended_resource("cpu")
    assert not is_extended_resource("kubernetes.io/something")


@pytest.mark.parametrize("gpus", ["0.5", "500m", "1.5"])
def test_fractional_gpu_is_rejected(gpus: str) -> None:
    with pytest.raises(ParseError) as err:
        parse_pod(kpod("frac", gpus=gpus))
    assert f'Invalid value: "{gpus}": must be an integer' in err.value.message
    assert "nvidia.com/gpu" in err.value.message
    assert err.value.fix and "MIG" in err.value.fix


def test_requests_default_to_limits_and_must_equal_them() -> None:
    info = parse_pod(kpod("p", gpus=4, cpu="8", memory="64Gi"))
    assert info.requests == {"cpu": 8000, "memory": 64 * 2**30, "nvidia.com/gpu": 4}
    assert info.pod.gpu.sharing is GpuSharing.exclusive and info.pod.gpu.count == 4
    assert info.pod.memory_mib == 64 * 1024

    unequal = {"limits": {"nvidia.com/gpu": "2"}, "requests": {"nvidia.com/gpu": "1"}}
    with pytest.raises(ParseError, match=r"must be equal to nvidia\.com/gpu limit of 2"):
        parse_pod(kpod("p", resources=unequal))
    no_limit = {"requests": {"nvidia.com/gpu": "1"}}
    with pytest.raises(ParseError, match="Limit must be set for non overcommitable resources"):
        parse_pod(kpod("p", resources=no_limit))
    # cpu may be requested below its limit
    burst = parse_pod(kpod("p", resources={"limits": {"cpu": "4"}, "requests": {"cpu": "500m"}}))
    assert burst.requests["cpu"] == 500


def test_init_containers_take_the_max_and_mig_resources_are_parsed() -> None:
    obj = kpod("p", resources={"limits": {"nvidia.com/mig-1g.10gb": "2", "cpu": "1"}})
    obj["spec"]["initContainers"] = [{"name": "init", "image": "x", "resources": {"limits": {"cpu": "3"}}}]
    info = parse_pod(obj)
    assert info.requests["cpu"] == 3000
    assert info.pod.gpu.sharing is GpuSharing.mig and info.pod.gpu.mig_profile == "1g.10gb"
    assert info.pod.gpu.count == 2


def test_affinity_tolerations_priority_and_scheduler() -> None:
    aff = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "nvidia.com/gpu.memory", "operator": "Gt", "values": ["40000"]}]},
                    {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a", "b"]}]},
                ]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 30, "preference": {"matchExpressions": [{"key": "zone", "operator": "Exists"}]}}
            ],
        }
    }
    tol = [GPU_TOL, {"key": "k", "operator": "Equal", "value": "v", "effect": "NoExecute", "tolerationSeconds": 60}]
    info = parse_pod(
        kpod("p", affinity=aff, tolerations=tol, nodeSelector={"disk": "ssd"}, priorityClassName="system-node-critical")
    )
    a = info.pod.affinity
    assert a is not None and len(a.required) == 2
    assert a.required[0][0].operator == "Gt" and a.required[0][0].values == ("40000",)
    assert a.preferred[0].weight == 30
    assert info.pod.tolerations[1].effect is TaintEffect.no_execute
    assert info.pod.node_selector == {"disk": "ssd"}
    assert info.pod.priority == 2_000_001_000
    assert info.scheduler_name == "gpufleet"

    bad = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "x", "operator": "Gt", "values": ["a"]}]}]}}}  # fmt: skip
    with pytest.raises(ParseError, match="Gt needs exactly one integer"):
        parse_pod(kpod("p", affinity=bad))


def test_node_allocatable_below_capacity_marks_unhealthy_gpus() -> None:
    info = parse_node(knode("n1", gpus=8, allocatable_gpus=6))
    assert info.capacity["nvidia.com/gpu"] == 8 and info.allocatable["nvidia.com/gpu"] == 6
    health = [g.health for g in info.node.gpus]
    assert health.count(GpuHealth.unhealthy) == 2
    assert info.node.allocatable()["nvidia.com/gpu"] == 6 and info.node.capacity()["nvidia.com/gpu"] == 8
    assert info.node.gpus[0].model.name == "h100-sxm"
    assert info.node.gpus[0].nvlink_peers == [1, 2, 3, 4, 5, 6, 7]


def test_h100_nvl_nodes_have_bridged_pairs() -> None:
    info = parse_node(knode("nvl", gpus=4, product=H100_NVL))
    assert [g.nvlink_peers for g in info.node.gpus] == [[1], [0], [3], [2]]


def test_snapshot_gangs_priority_classes_and_pending() -> None:
    pg = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
          "metadata": {"name": "g", "namespace": "ml"}, "spec": {"minMember": 2}}  # fmt: skip
    pc = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "hi"}, "value": 500}
    members = [
        kpod(f"g-{i}", namespace="ml", labels={"scheduling.x-k8s.io/pod-group": "g"}, priorityClassName="hi")
        for i in range(3)
    ]
    volcano = [kpod(f"v-{i}", annotations={"scheduling.k8s.io/group-name": "vg"}) for i in range(2)]
    snap = parse_snapshot(klist(pg, *members, *volcano, pc, knode("n1"), kpod("run", node="n1")))
    assert snap.gangs["ml/g"].min_member == 2 and len(snap.gangs["ml/g"].pods) == 3
    assert snap.gangs["default/vg"].min_member == 2  # no PodGroup: every member
    assert all(p.pod.priority == 500 for p in snap.pods if p.pod.gang == "ml/g")
    assert {p.pod.name for p in snap.pending()} == {"g-0", "g-1", "g-2", "v-0", "v-1"}
    assert snap.pod("ml/g-1").pod.name == "g-1"
    with pytest.raises(NotFoundError):
        snap.pod("nope")


def test_load_snapshot_errors_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ManifestError, match=r"bad\.json: not valid JSON at line 1, column 2"):
        load_snapshot(bad)
    with pytest.raises(ManifestError, match=r"missing\.json: file not found"):
        load_snapshot(tmp_path / "missing.json")


def test_sample_snapshot_parses_and_its_objects_are_valid_kubernetes() -> None:
    doc = json.loads(SAMPLE.read_text())
    for item in doc["items"]:
        if item["kind"] in ("Pod", "Node", "PriorityClass"):
            kubernetes_validate.validate(item, "1.31", strict=True)
    snap = load_snapshot(SAMPLE)
    assert len(snap.nodes) == 13
    assert snap.gangs["research/llama-pretrain"].min_member == 4
    by_name = {n.node.name: n for n in snap.nodes}
    assert by_name["dgx-a03"].allocatable["nvidia.com/gpu"] == 7
    assert by_name["dgx-c01"].node.unschedulable
    assert len(snap.pending("gpufleet")) == 10


def _kubectl(args: list[str], stdin: str | None, env: dict[str, str]) -> Any:
    out = subprocess.run(["kubectl", *args], input=stdin, capture_output=True, text=True, check=True, env=env)
    return json.loads(out.stdout)


def test_pod_templates_made_by_kubectl(tmp_path: Path) -> None:
    """kubectl's own dry-run output: whole GPUs parse, a fractional GPU limit is rejected."""
    require_tool("kubectl")
    cfg = tmp_path / "kubeconfig"
    cfg.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n"
        "users: [{name: u, user: {token: unused}}]\n"
    )
    env = {**os.environ, "KUBECONFIG": str(cfg)}

    def job(limits: str) -> dict[str, Any]:
        obj = _kubectl(["create", "job", "train", "--image=busybox", "--dry-run=client", "-o", "json"], None, env)
        obj = _kubectl(
            ["set", "resources", "-f", "-", "--local", f"--limits={limits}", "-o", "json"], json.dumps(obj), env
        )
        template = obj["spec"]["template"]
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train-0"}, "spec": template["spec"]}

    whole = job("nvidia.com/gpu=4,cpu=8,memory=32Gi")
    kubernetes_validate.validate(whole, "1.31", strict=True)
    info = parse_pod(whole)
    assert info.requests == {"nvidia.com/gpu": 4, "cpu": 8000, "memory": 32 * 2**30}
    with pytest.raises(ParseError, match="must be an integer"):
        parse_pod(job("nvidia.com/gpu=500m"))
