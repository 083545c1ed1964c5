"""The dcgmi readers: `dcgmi diag` judged as `gpufleet diag` judges it, and `dcgmi health -c` reports; both under
cuts, damaged bytes and dropped lines."""

from __future__ import annotations

import io
import random
from pathlib import Path

import pytest

from gpufleet.triage.formats import read
from gpufleet.triage.readers.dcgm import read_dcgmi_diag, read_dcgmi_health
from gpufleet.triage.run import triage_lines, triage_stream
from tests.conftest import CAPTURES, CORPUS

DATA = CAPTURES


def _lines(name: str) -> list[str]:
    return (DATA / name).read_text().splitlines()


@pytest.mark.parametrize(
    ("name", "verdict", "codes"),
    [
        ("dcgmi_diag_4x_r2_internal_error.txt", "unknown", ["pcie"]),
        ("dcgmi_diag_4x_r3_memory_fail.txt", "faulty", ["memory", "targeted_power"]),
        ("dcgmi_diag_4x_r2_pass.txt", "healthy", []),
        ("dcgmi_diag_3x_r3_pass.txt", "healthy", []),
        ("dcgmi_diag_3x_r2_persistence.txt", "degraded", ["Persistence Mode"]),
        ("dcgmi_diag_3x_r2_internal_error.txt", "unknown", ["PCIe"]),
        ("dcgmi_diag_2x_r2_pcie_fail.txt", "faulty", ["PCIe"]),
        ("dcgmi_diag_error_paused.txt", "unknown", ["dcgmi"]),
        ("dcgmi_diag_4x_r2_memory_fail.json", "faulty", ["memory", "pcie"]),
        ("dcgmi_diag_3x_r2_pass.json", "healthy", []),
        ("dcgmi_diag_4x_runtime_error.json", "unknown", ["dcgmi"]),
    ],
)
def test_diag_fixtures(name: str, verdict: str, codes: list[str]) -> None:
    report = read_dcgmi_diag(_lines(name), name)
    assert report.verdict == verdict
    assert [f.code for f in report.findings] == codes


def test_the_diagnostics_own_error_marks_no_gpu_and_says_what_to_do() -> None:
    report = read_dcgmi_diag(_lines("dcgmi_diag_4x_r2_internal_error.txt"), "x")
    [finding] = report.findings
    assert finding.severity == "info" and finding.entity == "node"
    assert "the diagnostic itself failed, not the GPUs" in finding.message and "Restart DCGM" in finding.fix
    assert any("says nothing about the GPUs" in note for note in report.notes)
    assert finding.evidence[0].startswith("| Warning")


def test_a_hardware_failure_names_its_gpu_with_evidence() -> None:
    report = read_dcgmi_diag(_lines("dcgmi_diag_4x_r3_memory_fail.txt"), "x")
    memory = report.findings[0]
    assert (memory.severity, memory.entity, memory.check) == ("critical", "GPU 1", "dcgmi: memory")
    assert "volatile double-bit ECC" in memory.message and memory.evidence


@pytest.mark.parametrize(
    ("name", "verdict"),
    [
        ("dcgmi_health_failure.txt", "faulty"),
        ("dcgmi_health_warning.txt", "degraded"),
        ("dcgmi_health_healthy.txt", "healthy"),
        ("dcgmi_health_not_enabled.txt", "unknown"),
    ],
)
def test_health_fixtures(name: str, verdict: str) -> None:
    assert read_dcgmi_health(_lines(name), name).verdict == verdict


def test_health_findings_per_system() -> None:
    report = read_dcgmi_health(_lines("dcgmi_health_failure.txt"), "x")
    assert [(f.severity, f.entity, f.code) for f in report.findings] == [
        ("warning", "GPU 0", "PCIe system"),
        ("critical", "GPU 1", "Memory system"),
        ("warning", "GPU 1", "InfoROM system"),
    ]
    assert "replace" not in report.findings[0].fix and "Row remapping failure" in report.findings[1].fix
    not_enabled = read_dcgmi_health(_lines("dcgmi_health_not_enabled.txt"), "x")
    assert "dcgmi health -s a" in not_enabled.findings[0].fix


def test_a_health_watch_dcgm_could_not_evaluate_is_unknown() -> None:
    lines = _lines("dcgmi_health_warning.txt")
    at = next(i for i, line in enumerate(lines) if "Thermal system" in line)
    blank = "|" + " " * 27 + "| "
    lines[at + 1 : at + 3] = [
        blank + "Could not query field DCGM_FI_DEV_THERMAL_VIOLATION for".ljust(56) + " |",
        blank + "GPU 3".ljust(56) + " |",
    ]
    report = read_dcgmi_health(lines, "x")
    assert report.verdict == "unknown" and report.findings[0].severity == "info"
    assert "could not evaluate" in report.findings[0].message


def test_detected_by_content_even_pasted() -> None:
    text = "\n".join(f"> {line}" for line in _lines("dcgmi_diag_4x_r3_memory_fail.txt"))
    report = triage_lines(io.StringIO("$ sudo dcgmi diag -r 3\n" + text + "\n"), "pasted")
    assert (report.format, report.verdict) == ("dcgmi-diag", "faulty")
    health = triage_lines(io.StringIO((DATA / "dcgmi_health_failure.txt").read_text()), "h")
    assert (health.format, health.verdict) == ("dcgmi-health", "faulty")
    paused = triage_lines(io.StringIO((DATA / "dcgmi_diag_error_paused.txt").read_text()), "p")
    assert (paused.format, paused.verdict) == ("dcgmi-diag", "unknown")
    as_json = triage_lines(io.StringIO((DATA / "dcgmi_diag_4x_r2_memory_fail.json").read_text()), "j")
    assert (as_json.format, as_json.verdict) == ("dcgmi-diag", "faulty")


def _files() -> list[Path]:
    real = sorted(p for p in CORPUS.glob("dcgmi_*.txt") if ".source" not in p.name)
    written = sorted(p for p in DATA.glob("dcgmi_*.txt") if not p.name.endswith(".source.txt"))
    return written + sorted(DATA.glob("dcgmi_*.json")) + real


def _fmt(path: Path) -> str:
    return "dcgmi-health" if "health" in path.name else "dcgmi-diag"


def test_seeded_fuzz_cuts_mutations_and_dropped_lines() -> None:
    """Never an exception (only through `read`, as `unknown`), and a cut never turns faulty or degraded healthy."""
    rng = random.Random(20240611)
    for path in _files():
        fmt = _fmt(path)
        text = path.read_text(errors="replace")
        full = read(fmt, text.splitlines(), "full").verdict
        lines = text.splitlines()
        ends = [len("\n".join(lines[:i])) for i in range(len(lines) + 1)]  # every line, and places inside lines
        for cut in ends + rng.sample(range(len(text) + 1), min(len(text) + 1, 40)):
            verdict = read(fmt, text[:cut].splitlines(), "cut").verdict
            if full in ("faulty", "degraded"):
                assert verdict != "healthy", (path.name, cut)
            assert verdict in (full, "unknown"), (path.name, cut, verdict)
        for k in range(25):
            data = bytearray(text.encode())
            for _ in range(rng.randint(1, 12)):
                if data:
                    data[rng.randrange(len(data))] = rng.randrange(256)
            kept = [line for line in lines if rng.random() > 0.15]
            for sample in (data.decode("utf-8", errors="replace").splitlines(), kept):
                report = read(fmt, sample, f"fuzz-{k}")
                assert report.verdict in ("healthy", "degraded", "faulty", "unknown")
        stream = triage_stream(io.BytesIO(text.encode() + b"\x00\xff" * 50 + b"9" * 5000 + b" 1e400\n"), "junk")
        assert stream.verdict in ("healthy", "degraded", "faulty", "unknown")


@pytest.mark.parametrize("reader", [read_dcgmi_diag, read_dcgmi_health])
@pytest.mark.parametrize(
    "lines",
    [[], [""], ["|"], ["+" + "-" * 10], ["| x |" * 4000], ["|" + " " * 27 + "|" + " GPU99999999999999: Pass"]],
)
def test_odd_inputs(reader: object, lines: list[str]) -> None:
    report = reader(lines, "odd")  # type: ignore[operator]
    assert report.verdict in ("unknown", "healthy")


def test_dcgmi_health_json_is_judged_as_the_table_is() -> None:
    path = CAPTURES / "dcgmi_health_failure.json"
    as_json = triage_lines(io.StringIO(path.read_text()), path.name)
    table = triage_lines(io.StringIO((CAPTURES / "dcgmi_health_failure.txt").read_text()), "t.txt")
    assert (as_json.format, as_json.verdict) == ("dcgmi-health", "faulty")
    key = sorted((f.severity, f.entity, f.code, f.fix) for f in as_json.findings)
    assert key == sorted((f.severity, f.entity, f.code, f.fix) for f in table.findings)


def test_dcgmi_dmon_and_discovery_are_told_and_judged() -> None:
    tools = CAPTURES / "dcgmi_tools"
    dmon = triage_lines(io.StringIO((tools / "dmon_xid79_remap_pending.txt").read_text()), "dmon.txt")
    assert (dmon.format, dmon.verdict) == ("dcgmi-dmon", "faulty")
    assert {(f.code, f.entity) for f in dmon.findings} == {("Xid 79", "GPU 2"), ("row remap pending", "GPU 1")}
    real = triage_lines(io.StringIO((tools / "dmon_smact_na_dcgm423.txt").read_text()), "dmon_real.txt")
    assert (real.format, real.verdict, real.findings) == ("dcgmi-dmon", "unknown", [])
    assert any("none of the fields it shows is one triage judges" in note for note in real.notes)
    old = triage_lines(io.StringIO((tools / "dmon_2x_power_brake.txt").read_text()), "dmon2.txt")
    assert (old.format, old.verdict, [f.entity for f in old.findings]) == ("dcgmi-dmon", "degraded", ["GPU 1"])
    found = triage_lines(io.StringIO((tools / "discovery_h100_blank_names_dcgm229.txt").read_text()), "d.txt")
    assert (found.format, found.verdict) == ("dcgmi-discovery", "degraded")
    assert {f.code for f in found.findings} == {"blank attributes"}


def test_dmon_showing_no_fault_field_is_not_called_healthy() -> None:
    text = "#Entity           POWER        SMACT\nID                W\nGPU 0             61.2         0.9\n"
    report = triage_lines(io.StringIO(text), "usage.txt")
    assert (report.format, report.verdict) == ("dcgmi-dmon", "unknown")
