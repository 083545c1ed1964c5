"""dcgmi diag table output on the corpus captures and on a full passing run's layout."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.errors import ParseError
from gpufleet.sources.dcgmi import parse_diag

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
| Warning                   | GPU 1 Power throttling                         |
| Memory Bandwidth          | Pass - All                                     |
| EUD Test                  | Skip - All                                     |
+---------------------------+------------------------------------------------+
"""


def test_r3_deployment_error_row_remap(corpus: Path) -> None:
    report = parse_diag((corpus / "dcgmi_diag_fail_01_r3_rowremap_stas00.txt").read_text(), level=3)
    assert report.verdict == "Fail" and report.level == 3
    [test] = report.tests
    assert (test.name, test.category, test.status) == ("Deployment", "Deployment", "Fail")
    [message] = test.messages
    assert message.severity == "error"
    assert message.text == "GPU 3 has uncorrectable memory errors and row remappings are pending"
    assert test.failed_gpus() == (3,)


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


def test_full_passing_run_with_warning() -> None:
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
    assert report.verdict == "Warn" and report.level == 3


def test_per_gpu_result_lines() -> None:
    text = (
        "|-----  Deployment  --------+------------------------------------------------|\n"
        "| software                  | Fail                                           |\n"
        "|                           | GPU0: Pass                                     |\n"
        "|                           | GPU1: Fail                                     |\n"
    )
    test = parse_diag(text).test("software")
    assert [(r.status, r.gpus) for r in test.results] == [("Fail", None), ("Pass", (0,)), ("Fail", (1,))]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("nothing", "no dcgmi diag table"),
        (
            "|-----  Hardware  --+--|\n| GPU Memory                | Maybe                            |\n",
            "expected Pass/Fail/Warn/Skip",
        ),
    ],
)
def test_bad_output(text: str, fragment: str) -> None:
    with pytest.raises(ParseError, match=fragment):
        parse_diag(text)
