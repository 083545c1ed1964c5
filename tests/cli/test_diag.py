"""`gpufleet diag` through the real entry point: a saved dcgmi run is judged (as `gpufleet triage` judges it) and
the exit code says so; a saved NVLink status is judged alone; unreadable files are clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.clirun import gpufleet
from tests.conftest import CAPTURES

DATA = CAPTURES


def test_cli_judges_a_saved_dcgmi_run_and_exits_1(corpus: Path) -> None:
    res = gpufleet(
        "diag", "-r", "3", "--dcgmi-output", str(corpus / "dcgmi_diag_fail_01_r3_rowremap_stas00.txt"), "-o", "json"
    )
    assert res.returncode == 1, res.stderr
    assert '"verdict": "Fail"' in res.stdout


def test_the_diagnostics_own_error_exits_3_with_the_fix() -> None:
    res = gpufleet("diag", "-r", "2", "--dcgmi-output", str(DATA / "dcgmi_diag_4x_r2_internal_error.txt"), "-o", "json")
    assert res.returncode == 3, res.stderr
    body = json.loads(res.stdout)
    assert body["verdict"] == "Unknown" and set(body) == {"node", "level", "verdict", "checks"}
    statuses = {c["name"]: c["status"] for c in body["checks"]}
    assert statuses == {"dcgmi: software": "Pass", "dcgmi: memory": "Pass", "dcgmi: pcie": "Unknown"}


def test_passing_run_at_its_level_and_below_a_higher_one() -> None:
    run = str(DATA / "dcgmi_diag_4x_r2_pass.txt")
    assert gpufleet("diag", "-r", "2", "--dcgmi-output", run).returncode == 0
    higher = gpufleet("diag", "-r", "3", "--dcgmi-output", run)
    assert higher.returncode == 3 and "Unknown" in higher.stdout


def test_a_hardware_failure_exits_1_and_a_pasted_copy_too(tmp_path: Path) -> None:
    text = (DATA / "dcgmi_diag_4x_r3_memory_fail.txt").read_text()
    pasted = tmp_path / "ticket.txt"
    pasted.write_text("$ sudo dcgmi diag -r 3\r\n" + "".join(f"> {line}\r\n" for line in text.splitlines()))
    for path in (DATA / "dcgmi_diag_4x_r3_memory_fail.txt", pasted):
        res = gpufleet("diag", "-r", "3", "--dcgmi-output", str(path), "-o", "json")
        assert res.returncode == 1 and json.loads(res.stdout)["verdict"] == "Fail", res.stderr


def test_nvlink_status_alone(corpus: Path) -> None:
    down = gpufleet("diag", "--nvlink-status", str(corpus / "nvlink_status_all_inactive_aznhc.txt"), "-o", "json")
    assert down.returncode == 1, down.stderr
    assert [c["name"] for c in json.loads(down.stdout)["checks"]] == ["Links"]
    up = gpufleet("diag", "--nvlink-status", str(corpus / "nvlink_status_a100_ok_gpud.txt"))
    assert up.returncode == 0 and "every NVLink active" in up.stdout


def test_nvlink_status_with_a_passing_run_is_not_trusted(corpus: Path) -> None:
    res = gpufleet(
        "diag", "-r", "2", "--dcgmi-output", str(DATA / "dcgmi_diag_4x_r2_pass.txt"),
        "--nvlink-status", str(corpus / "nvlink_status_all_inactive_aznhc.txt"), "-o", "json",
    )  # fmt: skip
    assert res.returncode == 1
    links = [c for c in json.loads(res.stdout)["checks"] if c["name"] == "Links"]
    assert links[0]["detail"].startswith("dcgmi said Pass but")


# diag's verdict and triage's for the same `nvidia-smi nvlink -s`, and the exit status each gives it
SAME = {"Pass": ("healthy", 0), "Warn": ("degraded", 0), "Fail": ("faulty", 1), "Unknown": ("unknown", 3)}
NVLINK_CAPTURES = {
    "captures/nvlink_status_a100_pcie_no_bridge_hpe.txt": "Pass",  # PCIe cards without bridges: no fault
    "captures/nvlink_status_h100_pcie_bridged_hpe.txt": "Pass",  # 12 of 18 links: those the bridges carry
    "corpus/nvlink_status_a100_ok_gpud.txt": "Pass",
    "corpus/nvlink_status_all_inactive_aznhc.txt": "Fail",
}


@pytest.mark.parametrize(("name", "verdict"), list(NVLINK_CAPTURES.items()))
def test_diag_and_triage_give_an_nvlink_status_one_verdict(name: str, verdict: str) -> None:
    path = DATA.parent / name
    diag = gpufleet("diag", "--nvlink-status", str(path), "-o", "json")
    triage = gpufleet("triage", str(path), "-o", "json")
    assert json.loads(diag.stdout)["verdict"] == verdict, diag.stdout
    report = json.loads(triage.stdout)
    assert report["format"] == "nvidia-smi-nvlink"
    triaged, status = SAME[verdict]
    assert (report["verdict"], triage.returncode, diag.returncode) == (triaged, status, status)


def test_a_cut_nvlink_status_is_unknown_to_both(tmp_path: Path) -> None:
    cut = tmp_path / "cut.txt"
    cut.write_text((DATA / "nvlink_status_h100_pcie_bridged_hpe.txt").read_text()[:-12])
    diag, triage = gpufleet("diag", "--nvlink-status", str(cut)), gpufleet("triage", str(cut))
    assert diag.returncode == triage.returncode == 3, (diag.stdout, triage.stdout)


def test_unreadable_inputs_are_clear_errors(tmp_path: Path) -> None:
    cases = {
        str(tmp_path / "nope.txt"): "no such file",
        str(tmp_path): "is a directory",
        "/dev/zero": "not a regular file",
    }
    for path, words in cases.items():
        for flag in ("--dcgmi-output", "--nvlink-status"):
            res = gpufleet("diag", flag, path)
            assert res.returncode != 0 and words in res.stderr and "Traceback" not in res.stderr, (flag, path)
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\x00\xff\xfe garbage\n" * 10)
    res = gpufleet("diag", "--dcgmi-output", str(junk))
    assert res.returncode != 0 and "no dcgmi diag table" in res.stderr and "Traceback" not in res.stderr
    res = gpufleet("diag", "--nvlink-status", str(junk))
    assert res.returncode != 0 and "Traceback" not in res.stderr


def test_no_dcgmi_on_this_host_is_unknown_not_a_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("shutil.which", lambda name: None)
    ran = gpufleet("diag", "-r", "1", "-o", "json")
    assert ran.returncode == 3, ran.stderr
    body = json.loads(ran.stdout)
    assert body["verdict"] == "Unknown"
    assert body["checks"][0]["name"] == "dcgmi" and "not installed" in body["checks"][0]["detail"]


# The level each saved run was made at, as its tests show it (parsers/nvidia/dcgmi_diag.py inferred_level): r2 adds
# the PCIe and memory tests to r1's software checks, r3 the stress tests.
CAPTURE_LEVELS = {
    "captures/dcgmi_diag_4x_r2_pass.txt": 2,
    "captures/dcgmi_diag_3x_r2_pass.json": 2,
    "captures/dcgmi_diag_2x_r2_pcie_fail.txt": 2,
    "corpus/dcgmi_diag_fail_02_r2_memory_thermal_stas00.txt": 2,
    "captures/dcgmi_diag_3x_r3_pass.txt": 3,
    "captures/dcgmi_diag_4x_r3_memory_fail.txt": 3,
}


@pytest.mark.parametrize(("name", "level"), list(CAPTURE_LEVELS.items()))
def test_a_saved_run_is_labelled_and_judged_at_the_level_it_ran(name: str, level: int) -> None:
    """Without -r the capture's own level titles and judges it, as -r with that level does; a lower -r cannot hide
    the tests the run shows."""
    path = str(DATA.parent / name)
    own = gpufleet("diag", "--dcgmi-output", path, "-o", "json")
    body = json.loads(own.stdout)
    assert body["level"] == level, own.stderr
    for asked in ("1", str(level)):
        again = gpufleet("diag", "-r", asked, "--dcgmi-output", path, "-o", "json")
        assert (json.loads(again.stdout), again.returncode) == (body, own.returncode), asked
    table = gpufleet("diag", "--dcgmi-output", path)
    assert f"diag -r {level} on this host" in table.stdout and "diag -r 1 " not in table.stdout


def test_an_r2_run_shows_its_memory_and_pcie_tests_without_r() -> None:
    body = json.loads(gpufleet("diag", "--dcgmi-output", str(DATA / "dcgmi_diag_4x_r2_pass.txt"), "-o", "json").stdout)
    assert [c["name"] for c in body["checks"]] == ["dcgmi: software", "dcgmi: memory", "dcgmi: pcie"]


def test_a_twin_node_is_checked_and_labelled_at_the_level_asked() -> None:
    scenario = str(Path(__file__).resolve().parents[2] / "src/gpufleet/examples/scenarios/gpu-sharing.yaml")
    for asked, level in ((None, 1), ("2", 2), ("3", 3)):
        args = ["diag", "-f", scenario, "--node", "dgx-000", *(["-r", asked] if asked else [])]
        assert json.loads(gpufleet(*args, "-o", "json").stdout)["level"] == level
        assert f"diag -r {level} on dgx-000" in gpufleet(*args).stdout
