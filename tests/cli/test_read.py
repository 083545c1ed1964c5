"""`gpufleet read TOOL FILE` on real captured outputs: the parsers the agent runs, behind a command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.clirun import gpufleet
from tests.conftest import CAPTURES

IBSIM = CAPTURES / "ibsim"


@pytest.mark.parametrize(
    ("name", "gpus", "driver"),
    [
        ("nvsmi_table_01_a100_stas00.txt", 1, "550.90.12"),  # the boxed table
        ("nvsmi_q_01_a100_ecc_rowremap_stas00.txt", 1, "510.73.08"),  # -q text
        ("nvsmi_q_03_retired_pages_bad_aznhc.txt", 8, "535.86.10"),
    ],
)
def test_nvidia_smi_in_every_format(corpus: Path, name: str, gpus: int, driver: str) -> None:
    run = gpufleet("read", "nvidia-smi", str(corpus / name), "-o", "json")
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert len(report["gpus"]) == gpus and report["driver_version"] == driver


def test_nhc_health_log_names_failed_checks_and_quoted_xids(corpus: Path) -> None:
    run = gpufleet("read", "nhc", str(corpus / "aznhc_health_log_real.txt"), "-o", "json")
    assert run.returncode == 0, run.stderr
    nodes = {n["node"]: n for n in json.loads(run.stdout)}
    assert nodes["mynode-042"]["healthy"] is True
    assert nodes["mynode-066"]["check"] == "check_gpu_xid"
    assert [e["xid"] for e in nodes["mynode-066"]["kernel_events"]] == [119]


def test_link_events_count_flaps(corpus: Path) -> None:
    run = gpufleet("read", "link-events", str(corpus / "ib_linkflap_syslog_aznhc.log"), "-o", "json")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["flaps"] == {"ib6": 6}


def test_infiniband_diags_from_ibsim() -> None:
    counters = json.loads(gpufleet("read", "perfquery", str(IBSIM / "perfquery_x_lid2_port1.txt"), "-o", "json").stdout)
    assert counters[0]["extended"] is True and counters[0]["counters"]["PortXmitData"] == 3168
    links = json.loads(gpufleet("read", "iblinkinfo", str(IBSIM / "iblinkinfo.txt"), "-o", "json").stdout)
    assert any(link["node"] == "leaf1" and link["state"] == "Active" for link in links)
    fabric = json.loads(gpufleet("read", "ibnetdiscover", str(IBSIM / "ibnetdiscover.txt"), "-o", "json").stdout)
    assert len(fabric["links"]) == 38
    errors = gpufleet("read", "ibqueryerrors", str(IBSIM / "ibqueryerrors.txt"))
    assert errors.returncode == 0 and "PortXmitDiscards=1" in errors.stdout


def test_bad_input_is_one_line_with_a_fix(corpus: Path, tmp_path: Path) -> None:
    missing = gpufleet("read", "nvidia-smi", str(tmp_path / "nope.txt"))
    assert missing.returncode == 2 and "no such file" in missing.stderr and "Traceback" not in missing.stderr
    wrong = gpufleet("read", "perfquery", str(corpus / "nvsmi_table_01_a100_stas00.txt"))
    assert wrong.returncode == 2 and "not a perfquery counter line" in wrong.stderr and "fix:" in wrong.stderr
    stdin = gpufleet("read", "link-events", "-", input="Mar  3 10:00:01 h1 systemd-networkd[1]: ib0: Lost carrier\n")
    assert stdin.returncode == 0 and "ib0: 1 flap(s)" in stdin.stdout
