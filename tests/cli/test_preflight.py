"""`gpufleet preflight`'s checks on their own: a saved `dcgmi diag` judged as `gpufleet diag` judges it, an
nccl-tests all_reduce_perf run judged as `gpufleet nccl compare` judges it (a corrupted or stopped run fails; a
missing binary cannot say), and a run that cannot report still fails the pod with the node and the check named.
The report to a real control plane is tested in tests/server/routes/test_preflight.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gpufleet.cli.preflight import allreduce_outcome, diag_outcome
from tests.clirun import gpufleet
from tests.conftest import REPO_ROOT

CAPTURES = REPO_ROOT / "tests" / "captures"
NCCL_TESTS = REPO_ROOT / "tests" / "triage" / "readers" / "data"


def test_a_failed_diag_fails_with_the_failing_test() -> None:
    outcome = diag_outcome(1, "gpu-node-7", CAPTURES / "dcgmi_diag_2x_r2_pcie_fail.txt")
    assert (outcome.check, outcome.status) == ("dcgm-diag", "Fail")
    assert "PCIe" in outcome.detail and outcome.output.startswith("verdict: Fail")


def test_a_passing_diag_passes() -> None:
    outcome = diag_outcome(1, "gpu-node-7", CAPTURES / "dcgmi_diag_3x_r3_pass.txt")
    assert outcome.status == "Pass"


def test_an_internal_dcgm_error_is_not_a_gpu_failure() -> None:
    outcome = diag_outcome(1, "gpu-node-7", CAPTURES / "dcgmi_diag_3x_r2_internal_error.txt")
    assert outcome.status == "Unknown"


def test_without_dcgmi_the_diag_cannot_say(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    outcome = diag_outcome(1, "gpu-node-7")
    assert outcome.status == "Unknown" and "dcgmi is not installed" in outcome.detail


def test_a_corrupted_all_reduce_fails() -> None:
    outcome = allreduce_outcome(4, (NCCL_TESTS / "nccl_tests_a40_wrong.txt").read_text())
    assert (outcome.check, outcome.status) == ("nccl-allreduce", "Fail")
    assert "#wrong" in outcome.detail or "corrupted" in outcome.detail


def test_a_clean_all_reduce_passes() -> None:
    outcome = allreduce_outcome(8, (NCCL_TESTS / "nccl_tests_a100_allreduce_8gpu.txt").read_text())
    assert outcome.status == "Pass"


def test_an_all_reduce_that_stops_on_an_error_fails_with_it() -> None:
    outcome = allreduce_outcome(8, "Test NCCL failure common.cu:1005 'unhandled system error'\n", returncode=2)
    assert outcome.status == "Fail" and "unhandled system error" in outcome.detail
    silent = allreduce_outcome(8, "", returncode=139)
    assert silent.status == "Fail" and "exited 139" in silent.detail


@pytest.mark.skipif(shutil.which("all_reduce_perf") is not None, reason="nccl-tests is installed here")
def test_without_all_reduce_perf_the_all_reduce_cannot_say() -> None:
    assert allreduce_outcome(8).status == "Unknown"


def test_a_failure_with_no_control_plane_still_fails_the_pod_naming_node_and_check(tmp_path: Path) -> None:
    env = {"GPUFLEET_HOME": str(tmp_path), "GPUFLEET_SERVER": "", "GPUFLEET_TOKEN": ""}
    result = gpufleet(
        "preflight",
        "--node",
        "gpu-node-7",
        "--gang",
        "JobSet/train",
        "--dcgmi-output",
        str(CAPTURES / "dcgmi_diag_3x_r3_pass.txt"),
        "--allreduce-output",
        str(NCCL_TESTS / "nccl_tests_a40_wrong.txt"),
        env=env,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "GPU preflight failed on node gpu-node-7: nccl-allreduce:" in result.stdout + result.stderr
