"""The RAS report's judgement: which ranks and processes are dead, missing, failed or out of step."""

from __future__ import annotations

from gpufleet.health.nccl_ras import judge_ras
from gpufleet.model import Severity
from gpufleet.parsers.nccl.ras import (
    RasCommGroup,
    RasCommIssue,
    RasProcess,
    RasRank,
    RasStatus,
    RasValueGroup,
)


def _status(**kw: object) -> RasStatus:
    st = RasStatus(**kw)  # type: ignore[arg-type]
    st.sections.update(("Communicators", "Errors", "Warnings"))
    return st


def test_all_running_and_ok_is_nothing_to_say() -> None:
    assert judge_ras(_status(groups=[RasCommGroup(0, 1, 4, "8", 32, 32, "RUNNING", ("OK",))])) == []


def test_a_dead_process_is_critical_and_named() -> None:
    (f,) = judge_ras(_status(dead_processes=[RasProcess(3487984, "172.16.64.213", "5")], dead_count=1))
    assert f.severity is Severity.critical and f.entity == "process 3487984 on 172.16.64.213 (GPU 5)"


def test_a_process_both_missing_and_dead_is_reported_once_as_dead() -> None:
    proc = RasProcess(7, "n1", "0")
    found = judge_ras(_status(dead_processes=[proc], dead_count=1, missing_processes=[proc], missing_process_count=1))
    assert [f.code for f in found] == ["ras dead"]


def test_errors_are_critical_with_their_ranks() -> None:
    rank = RasRank(3, "3", 11, "n0", "Remote process error")
    issue = RasCommIssue(0, 0, "ab", "ERROR", "asynchronous error", 1, [RasValueGroup(1, rank.value or "", [rank])])
    (f,) = judge_ras(_status(issues=[issue]))
    assert f.severity is Severity.critical and "Remote process error" in f.message and f.entity.startswith("rank 3")


def test_ranks_behind_are_the_entity_when_listed() -> None:
    behind = [RasRank(5, "5", 55, "n0")]
    issue = RasCommIssue(0, 0, "ab", "MISMATCH", "AllReduce operation counts",
                         groups=[RasValueGroup(31, "6650"), RasValueGroup(1, "6649", behind)])  # fmt: skip
    (f,) = judge_ras(_status(issues=[issue]))
    assert f.severity is Severity.warning and f.entity == "rank 5 (GPU 5, process 55 on n0)"
    assert "the ranks behind are named" in f.message


def test_when_only_the_ranks_ahead_are_listed_it_says_so() -> None:
    ahead = [RasRank(12, "4", 1, "n1"), RasRank(13, "5", 2, "n1")]
    issue = RasCommIssue(0, 0, "ab", "MISMATCH", "AllGather operation counts",
                         groups=[RasValueGroup(30, "640"), RasValueGroup(2, "641", ahead)])  # fmt: skip
    (f,) = judge_ras(_status(issues=[issue]))
    assert f.entity.startswith("30 rank(s) behind") and "which are ahead" in f.entity


def test_a_group_flagged_in_the_table_without_its_section_is_said() -> None:
    group = RasCommGroup(1, 4, 1, "1", 2, 1, "RUNNING", ("MISMATCH",))
    (f,) = judge_ras(_status(groups=[group]))
    assert f.code == "ras mismatch" and "not in the text" in f.message


def test_timeouts_alone_are_a_warning() -> None:
    (f,) = judge_ras(_status(timeouts=2))
    assert f.code == "ras timeout" and f.severity is Severity.warning
