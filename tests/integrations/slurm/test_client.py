"""Slurm output parsers, on output captured from a real Slurm 22.05 cluster (tests/captures/slurm)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.errors import ParseError
from gpufleet.integrations.slurm.client import (
    Gres,
    NodeState,
    expand_hostlist,
    expand_index_list,
    parse_gres,
    parse_kv_record,
    parse_scontrol_jobs,
    parse_scontrol_nodes,
    parse_sinfo,
    parse_squeue,
)

DATA = Path(__file__).parent / "data"


def test_hostlists_expand_ranges_lists_and_padding() -> None:
    assert expand_hostlist("gpu-[01-03,07],login1") == ["gpu-01", "gpu-02", "gpu-03", "gpu-07", "login1"]
    assert expand_hostlist("n[8-10]") == ["n8", "n9", "n10"]
    assert expand_hostlist("(null)") == []
    with pytest.raises(ParseError):
        expand_hostlist("gpu-[a-b]")


def test_gres_forms() -> None:
    assert parse_gres("gpu:h100:8") == [Gres("gpu", "h100", 8)]
    assert parse_gres("gres:gpu:h100:2") == [Gres("gpu", "h100", 2)]
    assert parse_gres("gpu:h100:2(IDX:0,2-3)") == [Gres("gpu", "h100", 2, (0, 2, 3))]
    assert parse_gres("gpu:8(S:0-1),nvme:1") == [Gres("gpu", None, 8), Gres("nvme", None, 1)]
    assert parse_gres("gpu:h100:0(IDX:N/A)") == [Gres("gpu", "h100", 0)]
    assert parse_gres("(null)") == []
    assert expand_index_list("0-1,4") == [0, 1, 4]
    with pytest.raises(ParseError):
        parse_gres("gpu:h100:eight")


def test_node_states_from_scontrol_and_sinfo_long_forms() -> None:
    assert NodeState.parse("IDLE+DRAIN").drained
    assert not NodeState.parse("IDLE+DRAIN").available
    assert NodeState.parse("MIXED").available
    assert NodeState.parse("drained") == NodeState("IDLE", frozenset({"DRAIN"}))
    assert NodeState.parse("draining").drained
    assert not NodeState.parse("down*").available
    assert not NodeState.parse("IDLE+REBOOT_ISSUED").available


def test_kv_record_keeps_values_with_spaces() -> None:
    rec = parse_kv_record("NodeName=a OS=Linux 6.1 #1 SMP State=IDLE Reason=GPU XID 79 (fell off) [root@2026]")
    assert rec["OS"] == "Linux 6.1 #1 SMP"
    assert rec["State"] == "IDLE"
    assert rec["Reason"] == "GPU XID 79 (fell off) [root@2026]"


def test_scontrol_show_node_real_capture() -> None:
    nodes = {n.name: n for n in parse_scontrol_nodes((DATA / "scontrol_show_node_d.txt").read_text())}
    assert sorted(nodes) == ["gpu-01", "gpu-02", "gpu-03", "gpu-04"]
    assert all(n.gpus == 8 for n in nodes.values())
    assert nodes["gpu-01"].gpus_used == 4 and nodes["gpu-01"].gres_used[0].indices == (0, 1, 2, 3)
    assert nodes["gpu-02"].gpus_used == 6
    assert nodes["gpu-03"].state.drained and nodes["gpu-03"].reason == "GPU XID 79 (fell off the bus)"
    assert nodes["gpu-04"].state.available and nodes["gpu-04"].reason == ""
    assert nodes["gpu-03"].feature("rack") == "r1" and nodes["gpu-03"].feature("leaf") == "leaf1"
    assert nodes["gpu-01"].cpus == 64 and nodes["gpu-01"].partitions == ["gpu"]


def test_scontrol_show_job_real_capture() -> None:
    jobs = {j.job_id: j for j in parse_scontrol_jobs((DATA / "scontrol_show_job.txt").read_text())}
    assert jobs["1"].state == "RUNNING" and jobs["1"].restarts == 1
    assert jobs["1"].excluded == ["gpu-01"] and jobs["1"].nodes == ["gpu-02"]
    assert jobs["1"].gres == [Gres("gpu", "h100", 2)] and jobs["1"].requeue
    assert jobs["2"].nodes == ["gpu-01", "gpu-02"] and jobs["2"].gres == [Gres("gpu", "h100", 4)]
    assert jobs["2"].reason == "None"


def test_sinfo_and_squeue_real_capture() -> None:
    rows = {r.node: r for r in parse_sinfo((DATA / "sinfo_nodes.txt").read_text())}
    assert rows["gpu-03"].state.drained and rows["gpu-03"].reason.startswith("GPU XID 79")
    assert rows["gpu-01"].gres_used == [Gres("gpu", "h100", 4, (0, 1, 2, 3))]
    assert rows["gpu-04"].partition == "gpu"
    queue = parse_squeue((DATA / "squeue.txt").read_text())
    assert [(q.job_id, q.state, q.nodes) for q in queue] == [
        ("1", "RUNNING", ["gpu-02"]),
        ("2", "RUNNING", ["gpu-01", "gpu-02"]),
    ]


def test_garbage_is_a_parse_error_not_a_crash() -> None:
    with pytest.raises(ParseError):
        parse_scontrol_nodes("this is not slurm output\n")
    with pytest.raises(ParseError):
        parse_sinfo("gpu-01|only two\n")
    with pytest.raises(ParseError):
        parse_squeue("1|2|3\n")
    with pytest.raises(ParseError):
        parse_scontrol_jobs("\x00\x01binary")


def test_runner_without_a_config_says_so(tmp_path: Path) -> None:
    from gpufleet.errors import UserError
    from gpufleet.integrations.slurm.client import SlurmRunner

    with pytest.raises(UserError, match="no Slurm configuration"):
        SlurmRunner(str(tmp_path / "missing.conf")).nodes()
