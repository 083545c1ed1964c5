"""The Slurm parsers against a live slurmctld with four `slurmd -N` nodes."""

from __future__ import annotations

import pytest

from tests.slurm_cluster import SlurmCluster, slurm_cluster  # noqa: F401

pytestmark = pytest.mark.real


def test_sinfo_and_scontrol_agree_on_gres_and_state(slurm_cluster: SlurmCluster) -> None:  # noqa: F811
    runner = slurm_cluster.runner
    rows = {r.node: r for r in runner.sinfo()}
    nodes = {n.name: n for n in runner.nodes()}
    assert sorted(rows) == sorted(nodes) == slurm_cluster.nodes
    for name in slurm_cluster.nodes:
        assert [str(g) for g in rows[name].gres] == ["gpu:h100:8"]
        assert nodes[name].gpus == 8 and nodes[name].gpus_used == 0
        assert rows[name].state.available and nodes[name].state.available
        assert nodes[name].feature("rack") and nodes[name].feature("leaf")


def test_drained_node_reads_back_with_its_reason(slurm_cluster: SlurmCluster) -> None:  # noqa: F811
    slurm_cluster.scontrol("update", "NodeName=gpu-02", "State=DRAIN", "Reason=test drain 1 2 3")
    try:
        row = next(r for r in slurm_cluster.runner.sinfo() if r.node == "gpu-02")
        assert row.state.drained and row.reason == "test drain 1 2 3"
        assert slurm_cluster.runner.node("gpu-02").reason == "test drain 1 2 3"
    finally:
        slurm_cluster.scontrol("update", "NodeName=gpu-02", "State=RESUME")
    # Resumed nodes show NOT_RESPONDING until the controller's next ping answers.
    slurm_cluster.wait_for(lambda: slurm_cluster.runner.node("gpu-02").state.available, "gpu-02 to be available")


def test_start_script_is_idempotent(slurm_cluster: SlurmCluster) -> None:  # noqa: F811
    before = slurm_cluster.pids()
    assert len(before) == 5  # slurmctld and four slurmd
    slurm_cluster.start()
    assert slurm_cluster.pids() == before
    assert len(slurm_cluster.runner.nodes()) == 4
