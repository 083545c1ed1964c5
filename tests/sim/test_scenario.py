"""A scenario's MIG section: GPUs carved into GPU instances before the twin starts, as mig-parted would, every layout
checked by the catalog's geometry, and training jobs laid out by count kept off those nodes."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.errors import ManifestError
from gpufleet.sched.partition.mig import MigLayout
from gpufleet.sim.scenario import build_twin

EXAMPLES = Path(__file__).resolve().parents[2] / "src" / "gpufleet" / "examples"


def _scenario(tmp_path: Path, mig: str, *, model: str = "h100-sxm", workload: str = "") -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(
        f"""apiVersion: gpufleet.io/v1
kind: Scenario
metadata: {{name: s}}
spec:
  cluster:
    nodePools: [{{name: n, count: 3, gpu: {{model: {model}, count: 8}}, nics: {{count: 2}}}}]
  duration: 1h
  mig:
{mig}
  workload: {{{workload or "autoTrainingNodesPerJob: 2, autoTrainingFill: 1.0"}}}
"""
    )
    return path


def test_the_default_scenario_has_one_mig_node_with_valid_layouts() -> None:
    twin, _ = build_twin(EXAMPLES / "scenarios" / "day-256gpu.yaml")
    assert sum(len(n.gpus) for n in twin.cluster.nodes) == 256
    carved = [n.name for n in twin.cluster.nodes if any(g.mig_enabled for g in n.gpus)]
    assert carved == ["dgx-028"]
    layouts = [MigLayout.from_gpu(g) for g in twin.cluster.node("dgx-028").gpus]  # raises on an invalid one
    assert [str(lay) for lay in layouts[:2]] == ["1g.10gb@0 1g.10gb@1 2g.20gb@2 3g.40gb@4"] * 2
    assert layouts[6].free_slices == [4, 5, 6, 7]  # some room left, to be seen free
    # the training jobs are where they were: dgx-028 was never one of their nodes
    jobs = {j.name: j.nodes for j in twin.training.jobs}
    assert jobs == {f"train-{k}": [f"dgx-{i:03d}" for i in range(7 * k, 7 * k + 7)] for k in range(4)}


def test_mig_gpus_get_instances_and_their_node_no_training_rank(tmp_path: Path) -> None:
    twin, _ = build_twin(
        _scenario(tmp_path, "    - {nodes: [n-000], gpus: [1, 2], devices: {3g.40gb: 1, 2g.20gb: 2}}\n")
    )
    gpus = twin.cluster.node("n-000").gpus
    assert [g.mig_enabled for g in gpus] == [False, True, True, False, False, False, False, False]
    instances = gpus[1].mig_instances
    assert [(i.profile, i.start, i.size) for i in instances] == [
        ("2g.20gb", 0, 2),
        ("2g.20gb", 2, 2),
        ("3g.40gb", 4, 4),
    ]
    assert [i.gi_id for i in instances] == [1, 2, 3] and all(i.uuid.startswith("MIG-") for i in instances)
    assert gpus[1].mig_instances != gpus[2].mig_instances  # UUIDs differ per GPU
    assert [j.nodes for j in twin.training.jobs] == [["n-001", "n-002"]]


def test_mig_on_with_no_instances_yet(tmp_path: Path) -> None:
    twin, _ = build_twin(_scenario(tmp_path, "    - {nodes: [n-002]}\n"))
    assert all(g.mig_enabled and not g.mig_instances for g in twin.cluster.node("n-002").gpus)


@pytest.mark.parametrize(
    ("mig", "said"),
    [
        ("    - {nodes: [n-000], devices: {3g.40gb: 3}}", "n-000 GPU 0: 3 x 3g.40gb cannot be placed"),
        ("    - {nodes: [n-000], devices: {3g.20gb: 1}}", "no MIG profile '3g.20gb'"),
        ("    - {nodes: [n-009]}", "no node named 'n-009'"),
        ("    - {nodes: [n-000], gpus: [8]}", "n-000 has no GPU 8"),
        ("    - {nodes: [n-000], gpus: [0]}\n    - {nodes: [n-000], gpus: [0]}", "n-000 GPU 0 is listed twice"),
    ],
)
def test_a_layout_that_cannot_be_is_a_manifest_error(tmp_path: Path, mig: str, said: str) -> None:
    path = _scenario(tmp_path, mig + "\n")
    with pytest.raises(ManifestError, match=said) as err:
        build_twin(path)
    assert str(path) in str(err.value)


def test_a_gpu_without_mig_cannot_be_carved(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="does not support MIG"):
        build_twin(_scenario(tmp_path, "    - {nodes: [n-000]}\n", model="l40s"))


def test_a_training_job_cannot_name_a_mig_node(tmp_path: Path) -> None:
    path = _scenario(
        tmp_path, "    - {nodes: [n-001]}\n", workload="trainingJobs: [{name: big, nodes: [n-000, n-001]}]"
    )
    with pytest.raises(ManifestError, match="'big' names n-001, whose GPUs are in MIG mode"):
        build_twin(path)


@pytest.mark.parametrize(
    "scenario", sorted((Path(__file__).parents[2] / "src/gpufleet/examples/scenarios").glob("*.yaml")), ids=str
)
def test_every_built_in_scenario_builds(scenario: Path) -> None:
    """The README runs them: each must plan its workload and faults on its cluster."""
    twin, _ = build_twin(scenario)
    assert twin.cluster.nodes
