"""`gpufleet diag` through the real entry point: a saved dcgmi run is judged and the exit code says so."""

from __future__ import annotations

from pathlib import Path

from tests.clirun import gpufleet


def test_cli_judges_a_saved_dcgmi_run_and_exits_1(corpus: Path) -> None:
    res = gpufleet(
        "diag", "-r", "3", "--dcgmi-output", str(corpus / "dcgmi_diag_fail_01_r3_rowremap_stas00.txt"), "-o", "json"
    )
    assert res.returncode == 1, res.stderr
    assert '"verdict": "Fail"' in res.stdout
