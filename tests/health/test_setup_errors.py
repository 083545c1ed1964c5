"""A setup error in a log line: which fault, how bad, what the line names, and a mention that is not a report."""

from __future__ import annotations

import pytest

from gpufleet.health.setup_errors import judge_setup_line, min_driver, supported_archs
from gpufleet.model import Severity


@pytest.mark.parametrize(
    ("line", "error_id"),
    [
        ("RuntimeError: CUDA error: no kernel image is available for execution on the device", "no-kernel-image"),
        ("torch.AcceleratorError: CUDA error: no kernel image is available for execution on the device",
         "no-kernel-image"),
        # wordings pasted in GitHub issues: dhernandez0/sgm#32, OxfordSKA/OSKAR#41 (a Slurm cluster),
        # shouxieai/tensorRT_Pro#162, CSAILVision/unifiedparsing#6, pzhao-eng/FlashMLA#7
        ("Error: no kernel image is available for execution on the device 48", "no-kernel-image"),
        ("ERROR: Run failed with code 209: no kernel image is available for execution on the device.",
         "no-kernel-image"),
        ("[error][simple_yolo.cu:556]:launch failed: no kernel image is available for execution on the device",
         "no-kernel-image"),
        ("cudaCheckError() failed : no kernel image is available for execution on the device", "no-kernel-image"),
        ("CUDA error (/workspace/.deps/flashmla-src/csrc/flash_fwd_mla_metadata.cu:76): no kernel image is available "
         "for execution on the device", "no-kernel-image"),
        ("-> CUDA driver version is insufficient for CUDA runtime version", "insufficient-driver"),
        ("F0408 23:04:03.994313 2135417616 syncedmem.cpp:57] Check failed: error == cudaSuccess (35 vs. 0)  CUDA "
         "driver version is insufficient for CUDA runtime version", "insufficient-driver"),
        ("ERROR: cudaGetDeviceCount CUDA driver version is insufficient for CUDA runtime version",
         "insufficient-driver"),
        ("Failed to allocate device vector A (error code CUDA driver version is insufficient for CUDA runtime "
         "version)!", "insufficient-driver"),
        ("CUDA error 222: the provided PTX was compiled with an unsupported toolchain.", "unsupported-ptx"),
        ("cudaFree(0): CUDA driver version is insufficient for CUDA runtime version (35)", "insufficient-driver"),
        ("Failed to initialize NVML: Driver/library version mismatch", "nvml-version-mismatch"),
        ("nvidia-container-cli: initialization error: nvml error: driver/library version mismatch: unknown",
         "nvml-version-mismatch"),
        ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
         "NVIDIA driver is installed and running.", "driver-not-loaded"),
        ("stderr: nvidia-container-cli: initialization error: cuda error: no cuda-capable device is detected",
         "no-cuda-device"),
        ("bash: nvidia-smi: command not found", "nvidia-smi-missing"),
        ("/bin/sh: 1: nvidia-smi: not found", "nvidia-smi-missing"),
        ("zsh: command not found: nvidia-smi", "nvidia-smi-missing"),
        ("FileNotFoundError: [Errno 2] No such file or directory: 'nvidia-smi'", "nvidia-smi-missing"),
    ],
)  # fmt: skip
def test_each_report_is_its_fault(line: str, error_id: str) -> None:
    issue = judge_setup_line(line)
    assert issue is not None and issue.id == error_id
    assert issue.severity == (Severity.warning if error_id == "nvidia-smi-missing" else Severity.critical)


@pytest.mark.parametrize(
    "line",
    [
        'If you see "no kernel image is available for execution on the device", rebuild for your GPU',
        "Older cu118/cu124 builds fail at runtime with no kernel image is available for execution on the device.",
        '1. "CUDA driver version is insufficient for CUDA runtime version": This indicates you didn\'t start the '
        "docker container with the `--runtime-nvidia --gpus all`",
        '2. "nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.9, please update your driver '
        'to a newer version, or use an earlier cuda container: unknown." during the start of the `docker run`',
        "`Failed to initialize NVML: Driver/library version mismatch` means the module and the libraries differ",
        "run nvidia-smi to see the driver version",
        "echo 'checking nvidia-smi'; nvidia-smi -L",
    ],
)
def test_a_mention_is_not_a_report(line: str) -> None:
    assert judge_setup_line(line) is None


def test_a_line_that_quotes_the_text_before_it_prints_it_is_a_report() -> None:
    text = "no kernel image is available for execution on the device"
    line = f'retrying after "{text}": RuntimeError: CUDA error: {text}'
    assert judge_setup_line(f'retrying after "{text}"') is None
    issue = judge_setup_line(line)
    assert issue is not None and issue.id == "no-kernel-image"


def test_what_the_line_names_is_read() -> None:
    required = judge_setup_line(
        "nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.8, please update your driver to a "
        "newer version, or use an earlier cuda container: unknown"
    )
    assert required is not None and required.filled == "cuda>=12.8"
    assert required.details == ["the image requires cuda>=12.8", "CUDA 12.8 needs driver 570.26 or newer"]
    assert required.text.startswith("nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.8,")
    old_form = judge_setup_line("nvidia-container-cli: requirement error: unsatisfied condition: cuda >= 9.0")
    assert old_form is not None and old_form.details == ["the image requires cuda >= 9.0"]  # no 9.0 minimum known
    brand = judge_setup_line("nvidia-container-cli: requirement error: unsatisfied condition: brand = tesla")
    assert brand is not None and brand.details == ["the image requires brand = tesla"]
    too_old = judge_setup_line(
        "UserWarning: CUDA initialization: The NVIDIA driver on your system is too old (found version 11040). "
        "Please update your GPU driver"
    )
    assert too_old is not None and too_old.id == "insufficient-driver"
    assert too_old.details == ["the driver supports CUDA 11.4 at most"]
    arch = judge_setup_line(
        "NVIDIA GeForce RTX 3090 with CUDA capability sm_86 is not compatible with the current PyTorch installation."
    )
    assert arch is not None and arch.id == "no-kernel-image"
    assert arch.details == ["NVIDIA GeForce RTX 3090 is compute capability sm_86, which the build does not carry"]
    assert supported_archs("The current PyTorch install supports CUDA capabilities sm_37 sm_50 sm_60 sm_70.") == (
        "sm_37 sm_50 sm_60 sm_70"
    )
    assert min_driver("12.4") == "550.54.14" and min_driver("9.0") is None
