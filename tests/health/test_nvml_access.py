"""What nvidia-smi's one-line failures mean: each NVML error it can print has its own severity, code and fix."""

from __future__ import annotations

import pytest

from gpufleet.health.nvml_access import judge_failure, judge_unreachable
from gpufleet.model import Severity


@pytest.mark.parametrize(
    ("line", "severity", "code", "fix_says"),
    [
        ("Failed to initialize NVML: Driver/library version mismatch", Severity.critical,
         "driver/library version mismatch", "reboot"),
        ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
         "NVIDIA driver is installed and running.", Severity.critical, "driver not loaded", "lsmod"),
        ("No devices were found", Severity.critical, "no devices found", "lspci"),
        ("Failed to initialize NVML: Unknown Error", Severity.critical, "NVML init failed", "container"),
        ("Failed to initialize NVML: Insufficient Permissions", Severity.warning, "insufficient permissions", "root"),
        ("GPU is lost.  Reboot the system to recover this GPU", Severity.critical, "GPU is lost", "reboot"),
        ("NVIDIA-SMI has failed for some new reason", Severity.critical, "nvidia-smi failed", "dmesg"),
    ],
)  # fmt: skip
def test_each_failure_line_has_its_own_meaning(line: str, severity: Severity, code: str, fix_says: str) -> None:
    issue = judge_failure(line)
    assert (issue.severity, issue.code) == (severity, code)
    assert fix_says in issue.fix and line.strip() in issue.message


@pytest.mark.parametrize(
    ("why", "severity", "code"),
    [
        ("Unknown Error", Severity.critical, "GPU is lost"),
        ("GPU is lost.  Reboot the system to recover this GPU", Severity.critical, "GPU is lost"),
        ("GPU requires reset", Severity.critical, "GPU requires reset"),
        ("Insufficient Permissions", Severity.warning, "insufficient permissions"),
    ],
)
def test_a_gpu_nvidia_smi_cannot_reach_is_named_by_its_address(why: str, severity: Severity, code: str) -> None:
    issue = judge_unreachable("0000:03:00", why)
    assert (issue.severity, issue.code) == (severity, code)
    assert "0000:03:00" in issue.message


def test_a_mismatch_and_an_unloaded_driver_mean_what_the_setup_error_catalog_says() -> None:
    """One judgement per fault: nvidia-smi's lines and triage of an application's log say the same cause and fix."""
    from gpufleet.catalog.setup_errors import setup_error

    mismatch = judge_failure("Failed to initialize NVML: Driver/library version mismatch")
    assert setup_error("nvml-version-mismatch").cause in mismatch.message
    assert mismatch.fix == setup_error("nvml-version-mismatch").fix
    unloaded = judge_failure("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
    assert unloaded.fix == setup_error("driver-not-loaded").fix
