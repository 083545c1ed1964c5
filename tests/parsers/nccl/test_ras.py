"""NCCL's RAS status report read from real `ncclras` output (tests/captures/nccl_ras, each with its source)."""

from __future__ import annotations

import pytest

from gpufleet.errors import ParseError
from gpufleet.parsers.nccl.ras import parse_ras_status
from tests.conftest import CAPTURES

RAS = CAPTURES / "nccl_ras"


def _read(name: str):  # type: ignore[no-untyped-def]
    return parse_ras_status((RAS / name).read_text())


def test_summary_and_communicator_table() -> None:
    st = _read("ras_2.26.2_healthy_256gpu_nccl1730.txt")
    assert (st.nccl_version, st.cuda, st.nodes, st.processes, st.gpus) == ("2.26.2", "12.4", 32, 256, 256)
    (group,) = st.groups
    assert (group.comms, group.ranks_per_comm, group.status, group.errors) == (1, 256, "RUNNING", ("OK",))
    assert st.issues == [] and {"Errors", "Warnings"} <= st.sections


def test_mismatch_of_operation_counts_per_collective() -> None:
    """NCCL 2.26+: counts per collective; the outlier group's ranks printed under its count line."""
    (issue,) = _read("ras_2.26.2_allgather_mismatch_nccl1911.txt").issues
    assert (issue.name, issue.kind, issue.detail) == (
        "#0-0 (fa93daea854b060b)",
        "MISMATCH",
        "AllGather operation counts",
    )
    assert [(g.count, g.value) for g in issue.groups] == [(30, "640"), (2, "641")]
    assert [(r.rank, r.gpu, r.pid, r.node) for r in issue.groups[1].ranks] == [
        (12, "4", 323032, "10.137.190.124"),
        (13, "5", 323033, "10.137.190.124"),
    ]


def test_outlier_nodes_missing_processes_and_ranks() -> None:
    st = _read("ras_2.27.3_incomplete_mismatch_nccl1762.txt")
    assert (st.nodes, st.processes, st.gpus) == (2, 10, 10)
    assert st.outlier_nodes == [("10.4.109.13", "60004,60035")]
    assert [g.errors for g in st.groups] == [("INCOMPLETE",), ("MISMATCH",), ("INCOMPLETE", "MISMATCH")]
    assert st.missing_process_count == 1 and [(p.pid, p.node, p.gpus) for p in st.missing_processes] == [
        (60004, "10.4.109.13", "0")
    ]
    (issue,) = st.issues
    assert issue.kind == "INCOMPLETE" and issue.count == 1 and [(r.rank, r.pid) for r in issue.ranks] == [(1, 60004)]


def test_dead_processes_and_the_224_missing_rank_list() -> None:
    st = _read("ras_guide_dead_process.txt")
    assert st.dead_count == 1 and [(p.pid, p.node, p.gpus) for p in st.dead_processes] == [
        (3487984, "172.16.64.213", "5")
    ]
    assert [r.rank for r in st.issues[0].ranks] == [21] and st.groups[0].ranks_per_node == "7-8"


def test_monitor_mode_and_json() -> None:
    (event,) = _read("ras_guide_monitor_peer_dead.txt").events
    assert event.event == "PEER_DEAD" and event.process is not None and event.process.pid == 1524345
    st = _read("ras_guide_json_missing_rank.json")
    assert st.form == "json" and st.nccl_version == "2.29.1" and st.dead_processes == []
    (issue,) = st.issues
    assert issue.kind == "INCOMPLETE" and [(r.rank, r.node, r.pid) for r in issue.ranks] == [
        (1, "172.16.64.245", 1524345)
    ]


def test_json_dead_and_errored_ranks() -> None:
    text = (RAS / "ras_guide_json_missing_rank.json").read_text()
    dead = text.replace('"considered_dead": false', '"considered_dead": true').replace(
        '"async_error": 0', '"async_error": 6'
    )
    st = parse_ras_status(dead)
    assert [(p.pid, p.node) for p in st.dead_processes] == [(1524345, "172.16.64.245")]
    errored = [i for i in st.issues if i.kind == "ERROR"]
    assert errored and errored[0].groups[0].value == "Remote process error"


@pytest.mark.parametrize("text", ["", "Job summary is a phrase in prose", '{"communicators": [', "hello\nworld"])
def test_not_a_report_is_a_clear_error(text: str) -> None:
    with pytest.raises(ParseError):
        parse_ras_status(text)
