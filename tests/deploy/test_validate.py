"""The validation Jobs rendered from nodes as kubectl prints them (tests/integrations/kubernetes/data/gpu_drain:
an 8-GPU H100 node), built as the official client's models and checked against the Kubernetes schemas."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.deploy import validate as v
from gpufleet.errors import ManifestError, UserError

kube = pytest.importorskip("kubernetes.client")
pytest.importorskip("kubernetes_validate")

NODES = Path(__file__).resolve().parents[1] / "integrations" / "kubernetes" / "data" / "gpu_drain" / "nodes.json"
CLUSTER = Path(__file__).resolve().parents[2] / "examples" / "clusters" / "dgx-h100-su.yaml"


def _node_json() -> dict[str, Any]:
    node: dict[str, Any] = json.loads(NODES.read_text())["items"][0]
    return node


def _list(*nodes: dict[str, Any]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(nodes)})


def _gpu_nodes(*nodes: dict[str, Any]) -> list[v.GpuNode]:
    found = [v.gpu_node(n) for n in v.nodes_from_snapshot(_list(*nodes), "nodes.json")]
    return [n for n in found if n is not None]


def test_a_gpu_node_from_kubectl_output() -> None:
    (node,) = _gpu_nodes(_node_json())
    assert (node.name, node.gpus, node.product, node.problem) == ("dgx-004", 8, "NVIDIA-H100-80GB-HBM3", "")


def test_nodes_without_gpus_are_left_out_and_broken_gpu_nodes_say_why() -> None:
    cpu = copy.deepcopy(_node_json())
    cpu["metadata"]["name"] = "cpu-1"
    cpu["metadata"]["labels"] = {"kubernetes.io/hostname": "cpu-1"}
    for key in ("capacity", "allocatable"):
        cpu["status"][key].pop(v.GPU_RESOURCE)
    no_plugin = copy.deepcopy(_node_json())
    no_plugin["metadata"]["name"] = "dgx-005"
    no_plugin["status"]["allocatable"][v.GPU_RESOURCE] = "0"
    down = copy.deepcopy(_node_json())
    down["metadata"]["name"] = "dgx-006"
    ready = next(c for c in down["status"]["conditions"] if c["type"] == "Ready")
    ready.update(status="Unknown", reason="NodeStatusUnknown", message="Kubelet stopped posting node status.")
    found = {n.name: n for n in _gpu_nodes(cpu, no_plugin, down)}
    assert sorted(found) == ["dgx-005", "dgx-006"]
    assert found["dgx-005"].problem.startswith("the node advertises no allocatable nvidia.com/gpu (capacity 8)")
    assert found["dgx-006"].problem == "node not Ready (Kubelet stopped posting node status.)"
    assert v.plan(list(found.values()), v.JobOptions()) == []


def test_each_node_gets_a_pinned_cuda_job_and_an_nccl_job_over_all_its_gpus() -> None:
    node = _node_json()
    node["spec"]["taints"] = [
        {"key": "dedicated", "value": "training", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
    ]
    planned = v.plan(_gpu_nodes(node), v.JobOptions(namespace="gpu-validate", run_id="ab12cd"))
    assert [(p.step.name, p.step.gpus) for p in planned] == [("cuda", 1), ("nccl", 8)]
    for p in planned:
        assert isinstance(p.obj, kube.V1Job)
        pod = p.obj.spec.template.spec
        term = pod.affinity.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms[0]
        assert (term.match_fields[0].key, term.match_fields[0].values) == ("metadata.name", ["dgx-004"])
        assert pod.containers[0].resources.limits == {"nvidia.com/gpu": str(p.step.gpus)}
        assert pod.restart_policy == "Never" and p.obj.spec.backoff_limit == 0
        tolerated = {(t.key, t.operator, t.value, t.effect) for t in pod.tolerations}
        assert tolerated == {
            ("nvidia.com/gpu", "Exists", None, "NoSchedule"),
            ("dedicated", "Equal", "training", "NoSchedule"),
            ("node.kubernetes.io/unschedulable", "Exists", None, "NoSchedule"),
        }
        assert p.obj.metadata.labels[v.RUN_LABEL] == "ab12cd"
    cuda, nccl = planned
    assert cuda.step.image == v.VECTORADD_IMAGE and v.VECTORADD in cuda.step.script
    assert nccl.step.image == v.NCCL_IMAGE and "all_reduce_perf -b 8 -e 1G -f 2 -g 8" in nccl.step.script


def test_a_one_gpu_node_gets_no_nccl_step() -> None:
    node = _node_json()
    node["status"]["allocatable"][v.GPU_RESOURCE] = "1"
    assert [p.step.name for p in v.plan(_gpu_nodes(node), v.JobOptions())] == ["cuda"]


def test_job_names_are_dns_labels_even_for_long_node_names() -> None:
    long_a = "ip-10-0-12-34.us-west-2.compute.internal-gpu-pool-a-very-long-name-1"
    long_b = long_a[:-1] + "2"
    a, b = (v.job_name("ab12cd", "nccl", n) for n in (long_a, long_b))
    assert len(a) <= 63 and len(b) <= 63 and a != b
    assert v.job_name("ab12cd", "cuda", "DGX_004") == "gpufleet-validate-ab12cd-cuda-dgx-004"


def test_rendered_jobs_pass_the_strict_kubernetes_schemas() -> None:
    planned = v.plan(_gpu_nodes(_node_json()), v.JobOptions(runtime_class="nvidia"))
    checked = v.manifests(planned, "1.33")
    assert [m.kind for m in checked] == ["Job", "Job"]
    assert checked[0].obj["spec"]["template"]["spec"]["runtimeClassName"] == "nvidia"
    assert checked[0].obj["spec"]["template"]["spec"]["containers"][0]["env"][0]["valueFrom"] == {
        "fieldRef": {"fieldPath": "spec.nodeName"}
    }


def test_a_kubernetes_version_without_schemas_is_refused() -> None:
    planned = v.plan(_gpu_nodes(_node_json()), v.JobOptions())
    with pytest.raises(UserError, match=r"no Kubernetes 1\.2 schemas"):
        v.manifests(planned, "1.2")


def test_a_snapshot_that_is_not_nodes_is_refused() -> None:
    with pytest.raises(ManifestError, match="is not JSON"):
        v.nodes_from_snapshot("{nope", "x.json")
    with pytest.raises(ManifestError, match="holds no Node"):
        v.nodes_from_snapshot(_list({"kind": "Pod", "metadata": {"name": "p"}}), "x.json")
    with pytest.raises(UserError, match="not a GPU node of this cluster: dgx-999"):
        v.select(_gpu_nodes(_node_json()), ["dgx-999"])


def test_the_command_renders_from_a_snapshot(tmp_path: Path) -> None:
    down = _node_json()
    down["metadata"]["name"] = "dgx-005"
    down["status"]["allocatable"][v.GPU_RESOURCE] = "0"
    snapshot = tmp_path / "nodes.json"
    snapshot.write_text(_list(_node_json(), down))
    result = CliRunner().invoke(app, ["deploy", "validate", "--render", "-f", str(snapshot), "-n", "gpu-validate"])
    assert result.exit_code == 0, result.output
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    assert [(d["kind"], d["metadata"]["namespace"]) for d in docs] == [("Job", "gpu-validate")] * 2
    assert "dgx-005: not rendered: the node advertises no allocatable nvidia.com/gpu" in result.stderr
    as_json = CliRunner().invoke(app, ["deploy", "validate", "-f", str(snapshot), "-o", "json", "--node", "dgx-004"])
    assert as_json.exit_code == 0, as_json.output
    assert [i["kind"] for i in json.loads(as_json.stdout)["items"]] == ["Job", "Job"]


def test_the_command_renders_for_a_cluster_manifest() -> None:
    nodes = v.nodes_from_cluster(CLUSTER)
    assert len(nodes) == 32 and {(n.gpus, n.product, n.problem) for n in nodes} == {(8, "NVIDIA H100 80GB HBM3", "")}
    args = ["deploy", "validate", "--render", "--cluster", str(CLUSTER), "--node", "dgx-000", "-o", "json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    jobs = json.loads(result.stdout)["items"]
    limits = [j["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] for j in jobs]
    assert limits == [{"nvidia.com/gpu": "1"}, {"nvidia.com/gpu": "8"}]
    script = CliRunner().invoke(app, ["deploy", "validate", "--slurm", "--render", "--cluster", str(CLUSTER),
                                      "--node", "dgx-001", "--partition", "gpu"])  # fmt: skip
    assert script.exit_code == 0, script.output
    assert "#SBATCH --nodelist=dgx-001" in script.stdout and "#SBATCH --partition=gpu" in script.stdout
    assert script.stdout.count("srun -w dgx-001") == 2
