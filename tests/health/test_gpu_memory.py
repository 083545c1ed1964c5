"""A GPU's memory health from one reading, judged once (health.gpu_memory) for the agent's GPU detector and triage:
each limit just short of it and at it, and what the agent files of each issue."""

from __future__ import annotations

import pytest

from gpufleet.health.gpu_memory import MemoryReading, judge_memory
from gpufleet.health.thresholds import load_thresholds
from gpufleet.model import RootCause, Severity

E = load_thresholds().ecc


def judged(**values: object) -> list[tuple[str, Severity, bool]]:
    return [(i.code, i.severity, i.filed) for i in judge_memory(MemoryReading(**values))]  # type: ignore[arg-type]


def test_a_healthy_reading_has_nothing_to_say() -> None:
    assert judged(uncorrectable=0, remap_failure=False, remapped_uncorrectable=0, retired_pages=0) == []
    assert judged() == []  # a reading that shows none of it


def test_an_uncorrectable_error_takes_the_remedy_of_xid_48() -> None:
    (issue,) = judge_memory(MemoryReading(uncorrectable=2))
    assert (issue.cause, issue.severity, issue.action) == (RootCause.ecc_dbe, Severity.critical, "WORKFLOW_XID_48")
    assert issue.filed and "2 uncorrectable" in issue.message


LIMIT = E.uncorrectable_remapped_rows_limit


@pytest.mark.parametrize(("rows", "want"), [(LIMIT - 1, "remapped rows"), (LIMIT, "remapped rows over limit")])
def test_remapped_rows_at_the_limit(rows: int, want: str) -> None:
    ((code, severity, filed),) = judged(remapped_uncorrectable=rows)
    assert code == want and (severity is Severity.critical) == filed == (want == "remapped rows over limit")


@pytest.mark.parametrize(
    ("pages", "pending", "over"),
    [
        (E.retired_pages_limit - 1, False, False),
        (E.retired_pages_limit, False, True),
        (E.retired_pages_soft - 1, True, False),
        (E.retired_pages_soft, True, True),  # past the soft limit with another one pending
    ],
)
def test_retired_pages_over_the_hard_limit_or_the_soft_one_with_one_pending(
    pages: int, pending: bool, over: bool
) -> None:
    found = judged(retired_pages=pages, retired_pending=pending)
    assert (("retired pages over limit", Severity.critical, True) in found) == over
    assert (("page retirement pending", Severity.warning, False) in found) == pending


def test_a_pending_remap_is_a_warning_the_agent_files_from_its_cause() -> None:
    assert judged(remap_pending=True) == [("row remap pending", Severity.warning, False)]
    (issue,) = judge_memory(MemoryReading(remap_failure=True))
    assert (issue.cause, issue.severity, issue.action, issue.filed) == (
        RootCause.row_remap_failure, Severity.critical, "CONTACT_SUPPORT", True
    )  # fmt: skip
