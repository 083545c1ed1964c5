"""nvidia-smi pasted in pieces: the one line it prints instead of its output, one `-q` section alone, and rows of
the table without its header are each told and judged as the nvidia-smi output they are.

Fixtures: tests/captures/nvsmi_lines/ (each with its .source.txt), and the scored captures of round 2."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from gpufleet.triage.report import TriageReport
from gpufleet.triage.run import triage_lines
from tests.conftest import CAPTURES, REPO_ROOT

LINES = CAPTURES / "nvsmi_lines"
ROUND2 = REPO_ROOT / "tests" / "scored" / "round2" / "nvsmi"


def _triage(path: Path) -> TriageReport:
    return triage_lines(io.StringIO(path.read_text()), path.name)


@pytest.mark.parametrize(
    ("name", "code", "entity"),
    [
        ("mismatch.txt", "driver/library version mismatch", "node"),
        ("no_driver.txt", "driver not loaded", "node"),
        ("no_devices.txt", "no devices found", "node"),
        ("gpu_is_lost.txt", "GPU is lost", "PCI 0000:02:00"),
    ],
)
def test_the_line_nvidia_smi_prints_instead_of_its_output(name: str, code: str, entity: str) -> None:
    report = _triage(LINES / name)
    assert (report.format, report.verdict) == ("nvidia-smi-table", "faulty"), report.notes
    (finding,) = report.findings
    assert (finding.code, finding.entity) == (code, entity)
    assert finding.fix


def test_a_gpu_nvidia_smi_cannot_reach_is_the_finding_entity() -> None:
    report = _triage(ROUND2 / "04_gpu_lost_unknown_error_returnn1486.txt")
    (finding,) = report.findings
    assert (report.verdict, finding.code, finding.entity) == ("faulty", "GPU is lost", "PCI 0000:03:00")
    assert "reboot" in finding.fix


def test_one_q_section_alone_is_told_and_judged() -> None:
    rows = _triage(LINES / "remapped_rows_pending.txt")
    assert (rows.format, rows.verdict) == ("nvidia-smi-q", "degraded"), rows.notes
    assert any("remap" in f.code.lower() for f in rows.findings)
    # the excerpt stops before the section's last rows: judged on what it shows, and never healthy when that is fine
    assert any("judged on what it shows: an excerpt" in note for note in rows.notes)
    fine = (LINES / "remapped_rows_pending.txt").read_text().replace(": 4", ": 0").replace(": Yes", ": No")
    assert triage_lines(io.StringIO(fine), "fine.txt").verdict == "unknown"
    brake = _triage(ROUND2 / "03_v100_c4130_hw_power_brake.txt")
    assert (brake.format, brake.verdict) == ("nvidia-smi-q", "degraded")
    assert [f.code for f in brake.findings] == ["hw_power_brake_slowdown"]


def test_table_rows_without_the_header_are_the_table() -> None:
    report = _triage(ROUND2 / "01_h100_gpu5_err_after_xid119.txt")
    assert (report.format, report.verdict) == ("nvidia-smi-table", "faulty")
    assert [f.entity for f in report.findings] == ["GPU 5 0000:97:00"]


QUERY_GPU = CAPTURES / "nvsmi_query_gpu"


def test_query_gpu_csv_is_judged_as_q_judges_the_same_values() -> None:
    report = _triage(QUERY_GPU / "remap_pending_recovery.txt")
    assert (report.format, report.verdict) == ("nvidia-smi-query-gpu", "faulty")
    by_code = {f.code: f for f in report.findings}
    assert by_code["recovery action Drain and Reset"].severity.value == "critical"
    assert by_code["recovery action Drain and Reset"].fix.startswith("RESET_GPU")
    assert {"volatile uncorrectable ECC", "row remap pending"} <= set(by_code)
    assert {f.entity for f in report.findings} == {"GPU 1 0000:52:00"}
    throttled = _triage(QUERY_GPU / "throttle_noheader_nounits.txt")
    assert (throttled.format, throttled.verdict) == ("nvidia-smi-query-gpu", "degraded")
    assert {f.code for f in throttled.findings} == {"PCIe width", "hw_power_brake_slowdown"}


def test_the_recovery_action_in_q_is_judged_too() -> None:
    text = "GPU 00000000:52:00.0\n    Product Name : NVIDIA H100 80GB HBM3\n    GPU Recovery Action : Reboot\n"
    report = triage_lines(io.StringIO(text), "q.txt")
    assert (report.format, report.verdict) == ("nvidia-smi-q", "faulty")
    (finding,) = report.findings
    assert finding.code == "recovery action Reboot" and finding.fix.startswith("RESTART_BM")


MIG = CAPTURES / "nvsmi_mig"


def test_a_mig_listing_says_what_is_configured_and_judges_missing_instances() -> None:
    mixed = _triage(MIG / "lgi_lci_a100_mixed.txt")
    assert (mixed.format, mixed.verdict, mixed.findings) == ("nvidia-smi-mig", "healthy", [])
    assert any("4g.20gb (GI 2, 0:4)" in note for note in mixed.notes)
    none = _triage(MIG / "lgi_none_a30.txt")
    assert (none.format, none.verdict) == ("nvidia-smi-mig", "degraded")
    assert [f.code for f in none.findings] == ["no GPU instances"]


PLUGIN = CAPTURES / "device_plugin"


def test_the_device_plugin_log_names_the_gpu_and_judges_its_xid() -> None:
    old = _triage(PLUGIN / "xid69_old_wording_k8sdp189.log")
    assert (old.format, old.verdict) == ("nvidia-device-plugin-log", "degraded")
    assert {(f.code, f.entity) for f in old.findings} == {
        ("Xid 69", "GPU-7540a9b3-eeb9-1214-1526-f93c9ea826a8"),
        ("marked unhealthy", "GPU-7540a9b3-eeb9-1214-1526-f93c9ea826a8"),
    }
    new = _triage(PLUGIN / "klog_xid79_and_skipped.log")
    assert (new.format, new.verdict) == ("nvidia-device-plugin-log", "faulty")
    assert [f.code for f in new.findings] == ["Xid 13", "Xid 79", "marked unhealthy"]


def test_clock_reasons_are_judged_by_health_clock_events() -> None:
    from gpufleet.health.clock_events import judge_clock_reasons

    assert [c.reason for c in judge_clock_reasons(["gpu_idle", "sw_power_cap"])] == []
    # the generic HW Slowdown is explained by the specific one beside it
    (brake,) = judge_clock_reasons(["hw_slowdown", "hw_power_brake_slowdown"])
    assert brake.cause.value == "power-brake" and brake.fix.startswith("CHECK_MECHANICALS")
    assert [c.reason for c in judge_clock_reasons(["hw_slowdown"])] == ["hw_slowdown"]


def test_an_excerpt_of_power_and_clocks_sections_is_q() -> None:
    path = REPO_ROOT / "tests" / "scored" / "round1" / "kernel-and-smi" / "nvsmi_q_06_temp_power_clocks_k8sdp331.txt"
    report = _triage(path)
    assert (report.format, report.verdict) == ("nvidia-smi-q", "healthy")
