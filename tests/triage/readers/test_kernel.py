"""The kernel-log reader: bursts grouped, a fatal report found however late, and the fleet's escalation rules
applied to the log's own history."""

from __future__ import annotations

from pathlib import Path

from gpufleet.triage.readers.common import MAX_FINDINGS
from gpufleet.triage.readers.kernel import read_kernel_log


def _xid(t: float, code: int, bus: int, text: str = "Graphics Exception") -> str:
    return f"[{t:>12.6f}] NVRM: Xid (PCI:0000:{bus:02x}:00): {code}, pid=1, name=python3, {text}"


def test_a_burst_on_one_gpu_is_one_finding_that_counts_it() -> None:
    lines = [_xid(10 + i * 0.001, 13, 0x3B) for i in range(16)] + [_xid(11, 13, 0x5E)]
    report = read_kernel_log(lines, "burst")
    assert [(f.code, f.entity) for f in report.findings] == [("Xid 13", "PCI 0000:3b:00"), ("Xid 13", "PCI 0000:5e:00")]
    first = report.findings[0]
    assert "16 reports, lines 1-16" in first.message and len(first.evidence) == 8
    assert report.verdict == "degraded"


def test_a_fatal_report_past_the_listed_kinds_still_makes_it_faulty() -> None:
    gpus = [f"{i // 256:04x}:{i % 256:02x}:00" for i in range(MAX_FINDINGS + 50)]
    lines = [f"[{1 + i}.0] NVRM: Xid (PCI:{pci}): 13, pid=1, Graphics Exception" for i, pci in enumerate(gpus)]
    lines.append("[9999.0] NVRM: Xid (PCI:0009:91:00): 79, pid=1, GPU has fallen off the bus.")
    report = read_kernel_log(lines, "long")
    assert report.verdict == "faulty"
    listed = [f for f in report.findings if f.code == "Xid 13"]
    assert len(listed) == MAX_FINDINGS
    assert {(f.severity, f.message.split(" ", 1)[0]) for f in report.findings if f.code == "unlisted"} == {
        ("warning", "50"),
        ("critical", "1"),
    }


def test_the_worst_report_of_a_group_speaks_for_it() -> None:
    lines = [
        "[  100.000000] nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Non-Fatal, Link 12 LTSSM Fault Up",
        "[  101.000000] nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 12 LTSSM Fault Up",
    ]
    (finding,) = read_kernel_log(lines, "sxid").findings
    assert finding.severity == "critical" and len(finding.evidence) == 2


def test_row_remap_then_uncorrectable_ecc_on_one_gpu_escalates() -> None:
    lines = [
        _xid(100.0, 63, 0x3B, "Row Remapper: New row marked for remapping, reset gpu to activate."),
        _xid(7300.0, 48, 0x3B, "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer"),
        _xid(7300.0, 48, 0x5E, "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer"),
    ]
    report = read_kernel_log(lines, "progression")
    by_gpu = {f.entity: f for f in report.findings if f.code == "Xid 48"}
    assert "escalated" in by_gpu["PCI 0000:3b:00"].message and by_gpu["PCI 0000:3b:00"].fix.startswith("RMA")
    assert "escalated" not in by_gpu["PCI 0000:5e:00"].message  # no remap recorded on that GPU


def test_a_node_losing_gpus_a_fourth_time_escalates_to_replacement() -> None:
    episodes = [_xid(1000.0 + day * 86_400, 79, 0x91, "GPU has fallen off the bus.") for day in range(4)]
    report = read_kernel_log(episodes, "repeated")
    (finding,) = [f for f in report.findings if f.code == "Xid 79"]
    assert "escalated" in finding.message and finding.fix.startswith("RMA")
    three = read_kernel_log(episodes[:3], "three")
    assert all("escalated" not in f.message for f in three.findings)


def _carrier(clock: str, what: str, iface: str = "ib3") -> str:
    return f"Aug 17 {clock} node-7 systemd-networkd[812]: {iface}: {what}"


def test_link_events_flapping_down_and_a_single_drop() -> None:
    flapping = [_carrier("06:18:01", "lost carrier"), _carrier("06:18:05", "Gained carrier"),
                _carrier("06:21:00", "lost carrier"), _carrier("06:21:02", "Gained carrier")]  # fmt: skip
    (finding,) = read_kernel_log(flapping, "flap").findings
    assert (finding.code, finding.severity, finding.entity) == ("link flap", "critical", "node-7:ib3")
    assert "2 within 10 min" in finding.message and len(finding.evidence) == 4

    apart = [_carrier("06:00:00", "lost carrier"), _carrier("06:00:03", "Gained carrier"),
             _carrier("07:00:00", "lost carrier"), _carrier("07:00:03", "Gained carrier")]  # fmt: skip
    report = read_kernel_log(apart, "apart")
    assert [(f.code, f.severity) for f in report.findings] == [("link down", "warning")]
    assert report.verdict == "degraded"

    still_down = [_carrier("06:00:00", "lost carrier")]
    mlx = ["[  812.004211] mlx5_core 0000:0c:00.0 ibp12s0: Link down"]
    for lines in (still_down, mlx):
        report = read_kernel_log(lines, "down")
        assert [(f.code, f.severity) for f in report.findings] == [("link down", "critical")]


def test_a_syslog_of_link_events_is_told_as_a_log() -> None:
    from gpufleet.triage.detect import detect

    assert detect([_carrier("06:18:01", "lost carrier"), _carrier("06:18:05", "Gained carrier")]) == "kernel-log"


def test_unreadable_lines_are_quoted_up_to_a_bound_and_counted_past_it() -> None:
    bad = [f"[{i}.0] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, \x07 garbled" for i in range(30)]
    report = read_kernel_log(bad, "garbled")
    assert len([f for f in report.findings if f.code == "unreadable"]) == 20
    assert "10 more unreadable GPU lines not listed" in report.notes
    assert report.verdict == "unknown"


def test_an_xid154_line_cut_anywhere_is_never_less_than_critical(corpus: Path) -> None:
    """Cut inside its message, the recovery Xid stays critical (the most disruptive state the visible part allows);
    cut inside its code, the line is unreadable and the log unknown; never healthy or merely degraded."""
    line = (corpus / "xid154_gpud_gb200.log").read_text().splitlines()[0]
    for cut in range(line.index("Xid") + 3, len(line) + 1):
        report = read_kernel_log([line[:cut]], "cut")
        assert report.verdict in ("unknown", "faulty"), (cut, line[:cut], report.verdict)
        if cut > line.index("154, ") + 5:
            assert [(f.code, f.severity) for f in report.findings] == [("Xid 154", "critical")], (cut, line[:cut])
