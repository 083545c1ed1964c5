"""NHC health logs: the kernel lines failed checks quote are judged by the Xid policy; the other failed checks are
NHC's own results, listed, and never let the log read as healthy."""

from __future__ import annotations

from pathlib import Path

from gpufleet.triage.formats import read


def test_the_quoted_xid_is_judged_and_the_other_failures_listed(corpus: Path) -> None:
    report = read("nhc", (corpus / "aznhc_health_log_real.txt").read_text().splitlines(), "health.log")
    assert (report.format, report.verdict) == ("nhc", "faulty")
    (xid,) = [f for f in report.findings if f.code == "Xid 119"]
    assert xid.severity == "critical"
    listed = {f.entity: f for f in report.findings if f.check == "nhc"}
    assert set(listed) == {"mynode-079", "mynode-084", "mynode-108", "mynode-123", "mynode-273", "mynode-510"}
    assert all(f.severity == "info" for f in listed.values())
    assert listed["mynode-510"].code == "check_gpu_ecc" and "SRAM Uncorrectable" in listed["mynode-510"].message
    assert "NHC: 1 node(s) healthy, 7 failed" in report.notes


def test_a_failed_check_triage_does_not_judge_is_never_healthy() -> None:
    lines = ["n1 | Healthy", "n2 | ERROR: nhc: Health check failed: check_hw_ib: No IB port mlx5_ib7:1 is ACTIVE"]
    report = read("nhc", lines, "health.log")
    assert report.verdict == "unknown" and [f.code for f in report.findings] == ["check_hw_ib"]
    assert read("nhc", ["n1 | Healthy", "n2 | Healthy"], "health.log").verdict == "healthy"


def test_a_line_that_is_not_nhc_is_a_refusal_not_a_verdict() -> None:
    report = read("nhc", ["n1 | Healthy", "something else"], "health.log")
    assert report.verdict == "unknown" and "could not read it as nhc" in report.notes[0]
