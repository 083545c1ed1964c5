"""A format is told by its content."""

from __future__ import annotations

import io

import pytest

from gpufleet.triage.detect import detect
from gpufleet.triage.run import triage_lines
from tests.conftest import CAPTURES

SAMPLES = {
    "kernel-log": ["[  101.2] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus."],
    "nvidia-smi-q": ["==============NVSMI LOG==============", "Attached GPUs                             : 8"],
    "nvidia-smi-table": ["| NVIDIA-SMI 550.54.15    Driver Version: 550.54.15    CUDA Version: 12.4     |",
                         "| GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |"],
    "dcgmi-diag": ["| Diagnostic                | Result                                         |",
                   "| GPU Memory                | Fail - GPU: 0                                  |"],
    "nccl-log": ["node1:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4"],
    "nccl-tests": ["# nThread 1 nGpus 8 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5",
                   "# Avg bus bandwidth    : 181.2"],
    "ibstat": ["CA 'mlx5_0'", "\tPort 1:", "\t\tPhysical state: LinkUp", "\t\tLink layer: InfiniBand"],
    "perfquery": ["# Port counters: Lid 1 port 1 (CapMask: 0x5A00)", "PortSelect:......................1"],
    "dcgm-exporter-metrics": ["# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).",
                              'DCGM_FI_DEV_GPU_TEMP{gpu="0"} 34'],
    "kubectl-node-json": ['{', '  "apiVersion": "v1",', '  "kind": "Node",'],
    "kubectl-pod-json": ['{', '    "apiVersion": "v1",', '    "kind": "Pod",'],
    "app-log": ["[rank0]: Traceback (most recent call last):",
                "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total "
                "capacity of 79.15 GiB of which 3.19 MiB is free."],
}  # fmt: skip


@pytest.mark.parametrize("fmt", sorted(SAMPLES))
def test_each_format_by_its_own_lines(fmt: str) -> None:
    assert detect(SAMPLES[fmt]) == fmt


def test_nothing_recognisable_is_none() -> None:
    assert detect(["hello", "world"]) is None
    assert detect([]) is None


def test_a_pod_without_its_kind_and_the_oom_killer_alone() -> None:
    assert detect(['"status": {', '"containerStatuses": [', "{", '"restartCount": 1,']) == "kubectl-pod-json"
    assert detect(["Memory cgroup out of memory: Killed process 1234 (python) total-vm:1kB, anon-rss:1kB"]) == (
        "kernel-log"
    )


def test_an_application_log_never_outscores_a_format_with_signs_of_its_own() -> None:
    oom = "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total"
    assert detect(
        ["node1:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4", "Traceback (most recent call last):", oom]
    ) == ("nccl-log")
    assert detect(["{", '    "kind": "Pod",', f'    "message": "{oom}"']) == "kubectl-pod-json"
    assert detect(["If out-of-memory error occurs during cudagraph capture, consider decreasing it"]) is None


def test_hl_smi_and_nvidia_smi_csv_headers_are_told_by_their_own_field_names() -> None:
    """Both print `power.draw [W]` and `memory.used [MiB]`; only hl-smi -Q has `*.aip` fields and `module_id`
    (headers of tests/captures/gaudi/hl_smi_csv_gaudi1_slurm_monitor.txt and nvsmi_query_gpu captures)."""
    hl = "name, uuid, power.draw [W], temperature.aip [C], utilization.aip [%], memory.used [MiB], memory.total [MiB]"
    assert detect([hl, "HL-205, 00P1-HL2000A1-14-P64W99-13-05-03, 103, 36, 15, 512, 32768"]) == "hl-smi"
    assert detect(["index, module_id, power.draw [W]", "0, 3, 103 W"]) == "hl-smi"
    nv = "name, pci.bus_id, power.draw [W], temperature.gpu, memory.used [MiB]"
    assert detect([nv, "NVIDIA H100 80GB HBM3, 00000000:18:00.0, 70.12 W, 31, 0 MiB"]) == "nvidia-smi-query-gpu"


@pytest.mark.parametrize(
    ("capture", "verdict"),
    [("rocm_2747_mi210_psp_ring_dmesgT_drm_only.log", "faulty"), ("popey_2031289_ring_timeout_dmesgT_drm_only.log",
                                                                  "degraded")],
)  # fmt: skip
def test_a_dmesg_T_paste_of_amdgpus_drm_lines_alone_is_a_kernel_log(capture: str, verdict: str) -> None:
    """`dmesg -T | grep drm`: only `[drm:func [amdgpu]] *ERROR*` lines, no device named (tests/captures/kmsg_amd)."""
    lines = (CAPTURES / "kmsg_amd" / capture).read_text().splitlines()
    assert detect(lines) == "kernel-log"
    report = triage_lines(io.StringIO("\n".join(lines)), capture)
    assert (report.format, report.verdict) == ("kernel-log", verdict)
