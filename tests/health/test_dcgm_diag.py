"""dcgmi diag output in DCGM 2.x, 3.x and 4.x layouts: parsed, and judged (a GPU fault, a setting, or the
diagnostic's own error), on the corpus captures and on fixtures written from dcgmi's rendering code."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.errors import ParseError
from gpufleet.health.dcgm_diag import assess, classify_message, message_rules
from gpufleet.parsers.nvidia.dcgmi_diag import DiagReport, DiagTest, DiagTestResult, parse_diag
from tests.conftest import CAPTURES

DATA = CAPTURES

# the layout of a full `dcgmi diag -r 3` table (DCGM 3.x), with one per-test warning
FULL_R3 = """Successfully ran diagnostic for group.
+---------------------------+------------------------------------------------+
| Diagnostic                | Result                                         |
+===========================+================================================+
|-----  Metadata  ----------+------------------------------------------------|
| DCGM Version              | 3.3.5                                          |
| Driver Version Detected   | 535.161.08                                     |
| GPU Device IDs Detected   | 2330,2330                                      |
|-----  Deployment  --------+------------------------------------------------|
| Denylist                  | Pass                                           |
| NVML Library              | Pass                                           |
| Persistence Mode          | Pass                                           |
+-----  Integration  -------+------------------------------------------------+
| PCIe                      | Pass - All                                     |
+-----  Hardware  ----------+------------------------------------------------+
| GPU Memory                | Pass - All                                     |
| Diagnostic                | Pass - All                                     |
+-----  Stress  ------------+------------------------------------------------+
| Targeted Stress           | Pass - All                                     |
| Targeted Power            | Warn - GPU: 1                                  |
|                           | Pass - GPU: 0                                  |
| Warning                   | GPU 1 Power throttling                         |
| Memory Bandwidth          | Pass - All                                     |
| EUD Test                  | Skip - All                                     |
+---------------------------+------------------------------------------------+
"""


def _fixture(name: str) -> DiagReport:
    return parse_diag((DATA / name).read_text())


def test_r3_deployment_error_row_remap(corpus: Path) -> None:
    report = parse_diag((corpus / "dcgmi_diag_fail_01_r3_rowremap_stas00.txt").read_text(), level=3)
    assert report.verdict == "Fail" and report.level == 3
    [test] = report.tests
    assert (test.name, test.category, test.status) == ("Deployment", "Deployment", "Fail")
    [message] = test.messages
    assert message.severity == "error"
    assert message.text == "GPU 3 has uncorrectable memory errors and row remappings are pending"
    assert test.failed_gpus() == (3,)
    assert not report.complete and "no closing border" in report.gaps[0]  # an excerpt: the table is not closed
    judged = assess(report)
    [issue] = judged.issues
    assert (issue.kind, issue.severity, issue.gpus, issue.rule) == (
        "hardware",
        "critical",
        (3,),
        "DCGM_FR_PENDING_ROW_REMAP",
    )
    assert judged.verdict == "Fail"  # a failure seen stands, cut or not


def test_r2_memory_fail_and_thermal_warning(corpus: Path) -> None:
    report = parse_diag((corpus / "dcgmi_diag_fail_02_r2_memory_thermal_stas00.txt").read_text())
    assert report.verdict == "Fail" and report.level == 2  # inferred: GPU Memory first runs at -r 2
    test = report.test("GPU Memory")
    assert [(r.status, r.gpus) for r in test.results] == [("Pass", (1, 2, 3, 4, 5, 6, 7)), ("Fail", (0,))]
    assert test.failed_gpus() == (0,)
    [warning] = test.messages
    assert warning.severity == "warning" and warning.gpus == (0,)
    assert warning.text.startswith("GPU 0 Thermal violations totaling 13.3 seconds started at 9.7 seconds")
    assert warning.text.endswith("fans, and any other components.")
    assert "starts inside the table" in report.gaps[0]
    [issue] = assess(report).issues
    assert issue.gpus == (0,) and issue.severity == "critical" and issue.rule == "DCGM_FR_THERMAL_VIOLATIONS_TS"


def test_full_3x_run_with_a_warning() -> None:
    report = parse_diag(FULL_R3)
    assert report.metadata["DCGM Version"] == "3.3.5" and report.metadata["GPU Device IDs Detected"] == "2330,2330"
    assert [t.name for t in report.tests] == [
        "Denylist",
        "NVML Library",
        "Persistence Mode",
        "PCIe",
        "GPU Memory",
        "Diagnostic",
        "Targeted Stress",
        "Targeted Power",
        "Memory Bandwidth",
        "EUD Test",
    ]
    assert report.test("PCIe").results[0].gpus is None  # "All"
    assert report.test("Targeted Power").status == "Warn"
    assert report.test("EUD Test").status == "Skip"
    assert report.verdict == "Warn" and report.level == 3 and report.complete and report.layout == "2.x-3.x"
    judged = assess(report)
    [issue] = judged.issues
    assert (issue.severity, issue.gpus) == ("warning", (1,))
    assert judged.verdict == "Warn"


def test_4x_per_gpu_rows_after_a_warning_block_are_results_not_message_text() -> None:
    """The failure is the diagnostic's own internal error: no GPU fails, the run is unknown (not faulty)."""
    report = _fixture("dcgmi_diag_4x_r2_internal_error.txt")
    assert report.layout == "4.x" and report.complete
    pcie = report.test("pcie")
    assert pcie.status == "Fail" and [e.name for e in pcie.entities] == ["GPU0", "GPU1", "GPU2", "GPU3"]
    assert all(e.status == "Pass" for e in pcie.entities)
    assert len(pcie.messages) == 2 and all("GPU0" not in m.text for m in pcie.messages)
    assert pcie.messages[0].text.endswith("Restart DCGM. Rerun diagnostics.")
    judged = assess(report, level=2)
    [issue] = judged.issues
    assert (issue.kind, issue.severity, issue.gpus, issue.rule) == ("diagnostic", "info", None, "DCGM_FR_INTERNAL")
    assert "(1 more like it)" in issue.message and len(issue.evidence) >= 8
    assert judged.verdict == "Unknown" and [t.status for t in judged.tests] == ["Pass", "Pass", "Unknown"]


def test_4x_hardware_failure_names_the_gpu_and_a_warn_shown_as_fail_stays_a_warning() -> None:
    report = _fixture("dcgmi_diag_4x_r3_memory_fail.txt")
    judged = assess(report, level=3)
    by_test = {i.test: i for i in judged.issues}
    assert by_test["memory"].gpus == (1,) and by_test["memory"].severity == "critical"
    assert by_test["memory"].rule == "DCGM_FR_VOLATILE_DBE_DETECTED"
    # dcgmi prints an entity's warning as `GPU0: Fail` under a test that says Warn
    assert by_test["targeted_power"].gpus == (0,) and by_test["targeted_power"].severity == "warning"
    assert judged.verdict == "Fail" and report.test("eud").status == "Skip"


def test_3x_internal_error_does_not_fail_all_gpus() -> None:
    judged = assess(_fixture("dcgmi_diag_3x_r2_internal_error.txt"))
    [issue] = judged.issues
    assert issue.kind == "diagnostic" and issue.gpus is None
    assert judged.verdict == "Unknown"


def test_2x_per_gpu_summary_rows() -> None:
    report = _fixture("dcgmi_diag_2x_r2_pcie_fail.txt")
    assert report.layout == "2.x-3.x" and report.complete and "Metadata" not in report.metadata
    pcie = report.test("PCIe")
    assert [(r.status, r.gpus) for r in pcie.results] == [("Pass", (0,)), ("Fail", (1,))]
    [issue] = assess(report).issues
    assert (issue.kind, issue.severity, issue.gpus, issue.rule) == ("hardware", "critical", (1,), "DCGM_FR_PCIE_WIDTH")


def test_a_setting_is_a_warning_and_leaves_a_level_untested() -> None:
    report = _fixture("dcgmi_diag_3x_r2_persistence.txt")
    judged = assess(report)
    [issue] = judged.issues
    assert (issue.kind, issue.severity) == ("config", "warning") and "nvidia-smi" in issue.fix
    assert judged.verdict == "Warn"
    at_level = assess(report, level=2)
    assert at_level.verdict == "Unknown" and "stopped at its deployment checks" in at_level.gaps[0]


@pytest.mark.parametrize(
    ("name", "rule"),
    [("dcgmi_diag_error_paused.txt", "dcgmi:paused"), ("dcgmi_diag_error_group.txt", "dcgmi:incomplete")],
)
def test_dcgmi_own_errors_without_a_table(name: str, rule: str) -> None:
    report = _fixture(name)
    assert not report.tests and report.errors
    judged = assess(report, level=2)
    [issue] = judged.issues
    assert (issue.kind, issue.rule) == ("diagnostic", rule) and issue.fix
    assert judged.verdict == "Unknown"


def test_a_level_needs_its_tests() -> None:
    passing = _fixture("dcgmi_diag_4x_r2_pass.txt")
    assert assess(passing, level=2).verdict == "Pass"
    assert assess(passing, level=1).verdict == "Pass"
    wanting = assess(passing, level=3)
    assert wanting.verdict == "Unknown" and "targeted_stress" in wanting.gaps[0]


def test_a_single_pass_row_never_passes_a_level() -> None:
    report = parse_diag("| PCIe                      | Pass - All                                     |\n")
    assert assess(report).verdict == "Unknown"
    assert assess(report, level=2).verdict == "Unknown"


def test_dropped_rows_are_seen() -> None:
    text = (DATA / "dcgmi_diag_4x_r2_pass.txt").read_text().splitlines()
    no_gpu2 = [line for line in text if "GPU2: Pass" not in line]  # from every test: fewer than the 4 detected
    assert any("4 GPUs were detected" in gap for gap in parse_diag("\n".join(no_gpu2)).gaps)
    late = [line for i, line in enumerate(text) if not ("GPU3: Pass" in line and i > 20)]  # from the later tests
    assert any("no result for GPU 3" in gap for gap in parse_diag("\n".join(late)).gaps)
    sections = [line for line in FULL_R3.splitlines() if "Hardware" not in line]
    assert any("section" in gap for gap in parse_diag("\n".join(sections)).gaps)


def test_every_cut_of_a_run_is_never_a_pass() -> None:
    for name in sorted(p.name for p in DATA.glob("dcgmi_diag_*.txt")):
        text = (DATA / name).read_text()
        full = assess(parse_diag(text)).verdict
        lines = text.splitlines(keepends=True)
        for cut in range(1, len(lines)):
            try:
                verdict = assess(parse_diag("".join(lines[:cut]))).verdict
            except ParseError:
                continue
            assert verdict in (full, "Unknown"), (name, cut, verdict)


def test_a_report_built_by_hand_is_judged() -> None:
    report = DiagReport([DiagTest("Memory", "Hardware", [DiagTestResult("Pass", None)])], level=2)
    assert report.complete and assess(report).verdict == "Pass"


def test_message_rules_come_from_dcgm_and_match_their_own_formats() -> None:
    rules = message_rules()
    assert len(rules) > 100 and {r.kind for r in rules} == {"hardware", "config", "diagnostic"}
    assert all(r.dcgm for r in rules)
    internal = classify_message("There was an internal error during the test: 'boom' Check DCGM and system logs")
    assert internal is not None and internal.kind == "diagnostic"
    dbe = classify_message("Detected 1 volatile double-bit ECC error(s) in GPU 3.")
    assert dbe is not None and dbe.id == "DCGM_FR_VOLATILE_DBE_DETECTED"
    assert classify_message("something nobody wrote") is None
    mismatch = classify_message("Failed to initialize NVML: Driver/library version mismatch")
    assert mismatch is not None and mismatch.kind == "diagnostic"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [("nothing", "no dcgmi diag table"), ("", "no dcgmi diag table")],
)
def test_no_table(text: str, fragment: str) -> None:
    with pytest.raises(ParseError, match=fragment):
        parse_diag(text)


def test_an_unreadable_result_is_noted_not_raised() -> None:
    report = parse_diag("|-----  Hardware  --+--|\n| GPU Memory                | Maybe                            |\n")
    assert report.notes and "could not be read" in report.notes[0]
    assert assess(report).verdict == "Unknown"


def test_json_output_4x_entities_summary_and_monitor_severity() -> None:
    report = parse_diag((DATA / "dcgmi_diag_4x_r2_memory_fail.json").read_text())
    assert [t.name for t in report.tests] == ["software", "memory", "pcie"] and report.complete
    assert report.metadata["version"] == "4.4.1"
    memory = report.test("memory")
    assert [(e.name, e.status) for e in memory.entities] == [("GPU0", "Pass"), ("GPU1", "Fail")]
    assert len(memory.messages) == 1  # the summary repeats the entity's error: kept once
    issues = {i.test: i for i in assess(report).issues}
    assert (issues["memory"].severity, issues["memory"].gpus) == ("critical", (1,))
    # 4.x JSON prints a warning as Fail; DCGM rates a thermal clocks event `monitor`: a warning
    assert (issues["pcie"].severity, issues["pcie"].gpus) == ("warning", (0,))


def test_json_output_3x_and_its_runtime_error() -> None:
    passing = parse_diag((DATA / "dcgmi_diag_3x_r2_pass.json").read_text(), level=2)
    assert assess(passing, level=2).verdict == "Pass" and passing.metadata["DCGM Version"] == "3.3.5"
    assert [e.name for e in passing.test("PCIe").entities] == ["GPU0", "GPU1"]
    failed = parse_diag((DATA / "dcgmi_diag_4x_runtime_error.json").read_text())
    assert failed.errors[0].text == "Diagnostic could not be run while DCGM is paused."
    assert assess(failed).verdict == "Unknown"


def test_cut_or_odd_json_is_never_a_pass() -> None:
    text = (DATA / "dcgmi_diag_3x_r2_pass.json").read_text()
    for cut in range(1, len(text) - 2, 7):
        assert assess(parse_diag(text[:cut])).verdict == "Unknown", cut
    for odd in (
        "{}",
        "{[1, 2]}",
        '{"DCGM Diagnostic": 3}',
        "{" * 100_000,
        '{"DCGM Diagnostic": {"test_categories": 1}}',
    ):
        assert assess(parse_diag(odd)).verdict == "Unknown"
    with pytest.raises(ParseError):
        parse_diag("[1, 2]")


def test_a_cuda_driver_mismatch_inside_a_cuda_api_error_is_a_node_setting() -> None:
    """tests/scored/round2/dcgmi/04: `Error using CUDA API cudaDeviceGetByPCIBusId ... 'system has unsupported display
    driver / cuda driver combination'` is the CUDA runtime and the driver disagreeing, not the diagnostic's own
    failure and not the PCIe hardware."""
    text = (
        "GPU 0 Error using CUDA API cudaDeviceGetByPCIBusId Check DCGM and system logs for errors. Reset GPU. "
        "Restart DCGM. Rerun diagnostics. ' system has unsupported display driver / cuda driver combination' for GPU 0"
    )
    rule = classify_message(text)
    assert rule is not None and (rule.id, rule.kind) == ("cuda:driver-mismatch", "config")
    assert classify_message("Error using CUDA API cudaMalloc").id == "DCGM_FR_CUDA_API"  # type: ignore[union-attr]


def test_cuda_and_nvml_setup_texts_come_from_the_setup_error_catalog() -> None:
    from gpufleet.catalog.setup_errors import setup_error

    for text, rule_id, error_id in [
        ("Error using CUDA API cudaGetDeviceCount 'CUDA driver version is insufficient for CUDA runtime version'",
         "cuda:insufficient-driver", "insufficient-driver"),
        ("Failed to initialize NVML: Driver/library version mismatch", "nvml:version-mismatch",
         "nvml-version-mismatch"),
    ]:  # fmt: skip
        rule = classify_message(text)
        assert rule is not None and rule.id == rule_id
        assert rule.fix.startswith(setup_error(error_id).fix) and rule.fix.endswith("rerun the diagnostic")
