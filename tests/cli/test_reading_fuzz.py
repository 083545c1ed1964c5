"""Every command that reads a saved output, fed what breaks readers: invalid UTF-8, NUL bytes, numbers past any
width (5,000 digits, 1e400), deep nesting, an empty file, a directory, one endless line, and real captures with
bytes flipped or cut short. Each ends with its own answer or a clear error, never `internal error`."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.clirun import gpufleet
from tests.conftest import CAPTURES, CORPUS

VENDOR_CAPTURES = CAPTURES

# command -> a capture it is meant for (the mutations start from it)
COMMANDS: dict[tuple[str, ...], str] = {
    ("triage",): "dcgmi_diag_fail_02_r2_memory_thermal_stas00.txt",
    ("xid", "classify"): "burst_xid79_sxid_gpud.log",
    ("nccl", "diagnose"): "nccl/logs/01_ib_completion_status12_roce.log",
    ("nccl", "compare"): "nccl/perf/a100_azure_ndv4_1node_8gpu.txt",
    ("diag", "--dcgmi-output"): "dcgmi_diag_fail_01_r3_rowremap_stas00.txt",
    ("diag", "--nvlink-status"): "nvlink_status_a100_ok_gpud.txt",
    ("read", "nvidia-smi"): "nvsmi_q_01_a100_ecc_rowremap_stas00.txt",
    ("read", "perfquery"): "ib_sysfs_counters_mlx5_0_h100_gpud.txt",
    ("read", "ibqueryerrors"): "ib_sysfs_counters_mlx5_0_h100_gpud.txt",
    ("read", "iblinkinfo"): "topo_m_01_a100_nv12_stas00.txt",
    ("read", "ibnetdiscover"): "topo_m_02_h100_nv18_stas00.txt",
    ("read", "link-events"): "ib_linkflap_syslog_aznhc.log",
    ("read", "nhc"): "aznhc_health_log_real.txt",
    ("read", "amd-smi"): str(VENDOR_CAPTURES / "amd" / "amd_smi_metric_mi300x_blog.txt"),
    ("read", "rocm-smi"): str(VENDOR_CAPTURES / "amd" / "rocm_smi_concise_mi300x_loaded.txt"),
    ("read", "hl-smi"): str(VENDOR_CAPTURES / "gaudi" / "hl_smi_q_gaudi2_poc.txt"),
}

HAZARDS: dict[str, bytes] = {
    "invalid-utf8": b"\xff\xfe\x80\xc3( NVRM: Xid (PCI:0000:3b:00): 79, pid=1, fallen off the bus.\n\xed\xa0\x80\n",
    "nul-bytes": b"\x00" * 4096 + b"\nGPU 0: NVIDIA A100\x00\n",
    "huge-integer": (
        b"SymbolErrorCounter:..............." + b"9" * 5000 + b"\n"
        b"# nThread 1 nGpus 8 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 5 iters: 20\n"
        b"  " + b"8" * 5000 + b"  2  float  sum  -1  " + b"1" * 5000 + b"  0.00  0.00  0\n"
        b"NVRM: Xid (PCI:0000:3b:00): " + b"7" * 5000 + b", pid=1, boom\n"
    ),
    "float-overflow": b"    Power Draw          : 1e400 W\n  1e400  1e400  float  sum  -1  1e400  1e400  1e400  0\n",
    "deep-nesting": b"[" * 100_000 + b"\n" + b'{"kind": "Node", "a": ' * 20_000 + b"\n",
    "empty": b"",
    "endless-line": b"x" * (2 * 1024 * 1024),
}


def _run(command: tuple[str, ...], path: Path) -> None:
    res = gpufleet(*command, str(path))
    assert "internal error" not in res.stderr and "Traceback" not in res.stderr, (command, path.name, res.stderr)


@pytest.mark.parametrize("command", list(COMMANDS), ids=" ".join)
@pytest.mark.parametrize("hazard", list(HAZARDS))
def test_hazards_get_an_answer_or_a_clear_error(tmp_path: Path, command: tuple[str, ...], hazard: str) -> None:
    path = tmp_path / f"{hazard}.txt"
    path.write_bytes(HAZARDS[hazard])
    _run(command, path)


@pytest.mark.parametrize("command", list(COMMANDS), ids=" ".join)
def test_a_directory_is_a_clear_error(tmp_path: Path, command: tuple[str, ...]) -> None:
    res = gpufleet(*command, str(tmp_path))
    assert res.returncode != 0 and "internal error" not in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize("command", list(COMMANDS), ids=" ".join)
def test_damaged_captures(tmp_path: Path, command: tuple[str, ...]) -> None:
    source = CORPUS / COMMANDS[command]
    data = source.read_bytes()
    rng = random.Random(" ".join(command))
    for attempt in range(8):
        damaged = bytearray(data)
        for _ in range(rng.randint(1, 40)):
            damaged[rng.randrange(len(damaged))] = rng.randrange(256)
        cut = bytes(damaged[: rng.randrange(1, len(damaged) + 1)])
        path = tmp_path / f"damaged-{attempt}.txt"
        path.write_bytes(cut)
        _run(command, path)


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero on this system")
@pytest.mark.parametrize("command", list(COMMANDS), ids=" ".join)
def test_an_endless_device_is_refused(command: tuple[str, ...]) -> None:
    res = gpufleet(*command, "/dev/zero")
    assert res.returncode != 0 and "not a regular file" in res.stderr, res.stderr
