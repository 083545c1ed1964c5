"""`gpufleet read amd-smi|rocm-smi|hl-smi FILE` on the real captures under tests/captures/{amd,gaudi}."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.clirun import gpufleet
from tests.conftest import CAPTURES

DATA = CAPTURES
AMD, GAUDI = DATA / "amd", DATA / "gaudi"


@pytest.mark.parametrize(
    ("tool", "path", "count"),
    [
        ("amd-smi", AMD / "amd_smi_static_mi300a_docs.txt", 1),
        ("amd-smi", AMD / "amd_smi_metric_rx6600.json", 1),
        ("amd-smi", AMD / "amd_smi_partition_mi300x_4477.txt", 4),
        ("rocm-smi", AMD / "rocm_smi_concise_mi300x_cpx_blog.txt", 16),
        ("rocm-smi", AMD / "rocm_smi_allinfo_mi250_wandb.json", 1),
        ("hl-smi", GAUDI / "hl_smi_table_gaudi2_x8_loaded.txt", 8),
        ("hl-smi", GAUDI / "hl_smi_q_gaudi2_poc.txt", 1),
    ],
)
def test_json_output_has_one_record_per_device(tool: str, path: Path, count: int) -> None:
    run = gpufleet("read", tool, str(path), "-o", "json")
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert len(report["aips" if tool == "hl-smi" else "gpus"]) == count


def test_amd_smi_table_and_yaml() -> None:
    table = gpufleet("read", "amd-smi", str(AMD / "amd_smi_static_mi300a_docs.txt"))
    assert table.returncode == 0 and "SPX_NPS1" in table.stdout and "MI300A" in table.stdout
    assert "driver 6.9.0-rc5+" in table.stdout
    as_yaml = yaml.safe_load(
        gpufleet("read", "amd-smi", str(AMD / "amd_smi_static_mi300a_docs.txt"), "-o", "yaml").stdout
    )
    assert as_yaml["gpus"][0]["compute_partition"] == "SPX" and as_yaml["gpus"][0]["vram_total_mib"] == 64289


def test_rocm_smi_table_shows_partitions_and_load() -> None:
    run = gpufleet("read", "rocm-smi", str(AMD / "rocm_smi_concise_mi300x_cpx_blog.txt"))
    assert run.returncode == 0 and run.stdout.count("CPX_NPS1") == 16 and "mi300x" in run.stdout
    metrics = json.loads(
        gpufleet("read", "rocm-smi", str(AMD / "rocm_smi_showmetrics_rx9070_ollama.txt"), "-o", "json").stdout
    )
    assert metrics["format"] == "metrics" and metrics["gpus"][0]["temp_hotspot_c"] == 43


def test_hl_smi_table_csv_and_fields_option() -> None:
    run = gpufleet("read", "hl-smi", str(GAUDI / "hl_smi_table_gaudi3_instructlab.txt"))
    assert run.returncode == 0 and "gaudi3" in run.stdout and "672.0 / 131072.0" in run.stdout
    csv = json.loads(gpufleet("read", "hl-smi", str(GAUDI / "hl_smi_csv_gaudi2_perfspect.txt"), "-o", "json").stdout)
    assert [a["module_id"] for a in csv["aips"]][:3] == [2, 6, 3]
    stdin = gpufleet("read", "hl-smi", "-", "--fields", "index,bus_id", "-o", "json", input="0, 0000:19:00.0\n")
    assert stdin.returncode == 0 and json.loads(stdin.stdout)["aips"][0]["bus_id"] == "0000:19:00.0"


def test_bad_input_is_one_line_with_a_fix(tmp_path: Path) -> None:
    wrong = gpufleet("read", "rocm-smi", str(GAUDI / "hl_smi_table_gaudi1_dl1.txt"))
    assert wrong.returncode == 2 and "neither a Concise Info table" in wrong.stderr and "Traceback" not in wrong.stderr
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    for tool in ("amd-smi", "rocm-smi", "hl-smi"):
        run = gpufleet("read", tool, str(empty))
        assert run.returncode == 2 and "empty.txt is empty" in run.stderr and "fix:" in run.stderr
    noheader = gpufleet("read", "hl-smi", "-", input="0, 0000:19:00.0\n")
    assert noheader.returncode == 2 and "--fields" in noheader.stderr


@pytest.mark.parametrize("tool", ["amd-smi", "rocm-smi", "hl-smi"])
@pytest.mark.parametrize(
    "hazard",
    [b"[" * 100_000 + b"\n", b"{" + b'"a": {' * 20_000, b"x" * (2 * 1024 * 1024), b"\xff\xfe\x00\x80 GPU: 0\n"],
    ids=["deep-array", "deep-object", "endless-line", "binary"],
)
def test_hostile_input_gets_a_clear_error(tmp_path: Path, tool: str, hazard: bytes) -> None:
    path = tmp_path / "hazard.txt"
    path.write_bytes(hazard)
    run = gpufleet("read", tool, str(path))
    assert run.returncode == 2 and "internal error" not in run.stderr and "Traceback" not in run.stderr
