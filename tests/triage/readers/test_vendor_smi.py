"""amd-smi, rocm-smi and hl-smi judged on real captures (tests/captures/amd, gaudi, each with its .source.txt) and on
hand-built records: memory health as health.gpu_memory judges it, no verdict where the output shows no health."""

from __future__ import annotations

from gpufleet.parsers.amd.amd_smi import AmdGpuRecord, AmdSmiReport, EccCount
from gpufleet.parsers.gaudi.hl_smi import AipRecord, HlSmiReport
from gpufleet.triage.readers.vendor_smi import (
    _judge_aip,
    _judge_amd,
    _judge_lost_aips,
    read_amd_smi,
    read_hl_smi,
    read_rocm_smi,
)
from gpufleet.triage.report import TriageReport
from tests.conftest import CAPTURES


def _lines(path: str) -> list[str]:
    return (CAPTURES / path).read_text().splitlines()


def test_amd_smi_metric_with_no_errors_is_healthy_and_static_says_it_cannot_judge() -> None:
    assert read_amd_smi(_lines("amd/amd_smi_metric_mi300x_blog.txt"), "m").verdict == "healthy"
    static = read_amd_smi(_lines("amd/amd_smi_static_mi300x_blog.txt"), "s")
    assert static.verdict == "unknown" and "no health reading" in static.notes[0]
    assert read_rocm_smi(_lines("amd/rocm_smi_concise_mi300x_loaded.txt"), "c").verdict == "unknown"


def test_an_amd_gpus_uncorrectable_ecc_is_the_one_memory_judgement() -> None:
    gpu = AmdGpuRecord(index=3, bdf="0000:c1:00.0", ecc=EccCount(0, 2, 1), throttle_status="THROTTLED")
    report = TriageReport("amd-smi", "t")
    _judge_amd(AmdSmiReport(gpus=[gpu]), report)
    assert report.verdict == "faulty"
    codes = {(f.code, f.entity) for f in report.findings}
    assert ("volatile uncorrectable ECC", "GPU 3 0000:c1:00.0") in codes
    assert {"deferred ECC", "throttled"} <= {f.code for f in report.findings}


def test_hl_smi_uncorrectable_events_warn_and_a_quiet_table_is_healthy() -> None:
    loaded = read_hl_smi(_lines("gaudi/hl_smi_table_gaudi2_x8_loaded.txt"), "l")
    assert loaded.verdict == "degraded"
    assert [f.entity for f in loaded.findings] == ["AIP 0 0000:33:00.0", "AIP 6 0000:b4:00.0"]
    assert read_hl_smi(_lines("gaudi/hl_smi_table_gaudi2_x8_poc.txt"), "p").verdict == "healthy"
    assert read_hl_smi(_lines("gaudi/hl_smi_q_gaudi2_poc.txt"), "q").verdict == "healthy"


def test_replaced_rows_and_a_pending_replacement_on_gaudi() -> None:
    report = TriageReport("hl-smi", "t")
    aip = AipRecord(index=1, bus_id="0000:34:00.0", replaced_rows_dbe=0, replaced_rows_pending=True)
    assert _judge_aip(aip, HlSmiReport(aips=[aip], format="query"), report)
    assert report.verdict == "degraded" and report.findings[0].code == "row remap pending"
    old_table = AipRecord(index=0, uncorrected_events=3)  # "Volatile Uncorr. ECC" before 1.20: memory ECC
    report = TriageReport("hl-smi", "t")
    _judge_aip(old_table, HlSmiReport(aips=[old_table], format="table"), report)
    assert report.verdict == "faulty"


def test_amd_temperatures_are_judged_against_the_outputs_own_limits_then_the_catalogs() -> None:
    """health.temperature's judgement: amd-smi static's LIMIT section first (hotspot, memory), else the catalog's
    MI300X hotspot limits (100 C slowdown, 110 C shutdown)."""
    own = AmdGpuRecord(index=0, temp_hotspot_c=96, hotspot_slowdown_c=95, hotspot_shutdown_c=105, temp_hbm_c=[90, 99],
                       mem_slowdown_c=95, mem_shutdown_c=105)  # fmt: skip
    report = TriageReport("amd-smi", "t")
    _judge_amd(AmdSmiReport(gpus=[own]), report)
    assert report.verdict == "degraded"
    assert [f.code for f in report.findings] == ["GPU temperature over slowdown", "memory temperature over slowdown"]
    catalog = AmdGpuRecord(index=1, bdf="0000:0c:00.0", model="mi300x", temp_c=110, ecc=EccCount(uncorrectable=0))
    report = TriageReport("amd-smi", "t")
    _judge_amd(AmdSmiReport(gpus=[catalog]), report)
    assert [(f.code, f.severity, f.entity) for f in report.findings] == [
        ("GPU temperature over shutdown", "critical", "GPU 1 0000:0c:00.0")
    ]
    cool = AmdGpuRecord(index=2, model="mi300x", temp_c=99.9, ecc=EccCount(uncorrectable=0))
    report = TriageReport("amd-smi", "t")
    _judge_amd(AmdSmiReport(gpus=[cool]), report)
    assert report.verdict == "healthy"


def test_the_amd_smi_default_view_and_rocm_smi_ras_tables_are_judged() -> None:
    default = read_amd_smi(_lines("amd/amd_smi_default_mi300x_changelog.txt"), "d")
    assert default.verdict == "healthy" and default.format == "amd-smi"
    lines = _lines("amd/amd_smi_default_mi300x_changelog.txt")
    lines[7] = lines[7].replace("60 °C   0 ", "60 °C   4 ")  # GPU 0's UEC
    faulty = read_amd_smi(lines, "d")
    assert [(f.code, f.entity) for f in faulty.findings] == [("volatile uncorrectable ECC", "GPU 0 0000:0c:00.0")]
    assert read_rocm_smi(_lines("amd/rocm_smi_showrasinfo_mi50_arkprojects.txt"), "r").verdict == "healthy"
    ras = _lines("amd/rocm_smi_showrasinfo_mi50_arkprojects.txt")
    ras[5] = ras[5].replace("0                    0", "0                    2")  # UMC uncorrectable
    report = read_rocm_smi(ras, "r")
    assert report.verdict == "faulty" and "(in UMC)" in report.findings[0].message


def test_an_attached_aip_without_its_q_block_is_lost_and_a_single_block_is_not() -> None:
    """-q's Attached AIPs against the blocks shown: a gap below the highest index is a lost device; one block alone
    (`-i <bus id>`, tests/captures/gaudi/hl_smi_q_gaudi2_poc.txt: 8 attached, [0] shown) and a cut tail are not."""
    aips = [AipRecord(index=i, replaced_rows_dbe=0, replaced_rows_pending=False) for i in (0, 1, 3)]
    report = TriageReport("hl-smi", "t")
    assert _judge_lost_aips(HlSmiReport(aips=aips, format="query", attached=8), report)
    assert [(f.code, f.entity, f.severity) for f in report.findings] == [("AIP missing", "AIP 2", "critical")]
    assert any("cut from the paste" in n for n in report.notes)
    single = read_hl_smi(_lines("gaudi/hl_smi_q_gaudi2_poc.txt"), "q")
    assert single.verdict == "healthy" and not any(f.code == "AIP missing" for f in single.findings)
