"""`dcgmi dmon` and `dcgmi discovery -l` (NVIDIA/DCGM dcgmi/DeviceMonitor.cpp, Query.cpp).

Fixtures (tests/captures/dcgmi_tools/), each with its .source.txt: discovery_h100_blank_names_dcgm229.txt and
dmon_smact_na_dcgm423.txt (DCGM 4.2.3, `#Entity` / `ID`, every sample N/A) are real captures;
dmon_xid79_remap_pending.txt (DCGM 3.x/4.x `#Entity` layout, left-aligned columns) and dmon_2x_power_brake.txt
(DCGM 2.x `# Entity` / `Id`, right-aligned) are written from DeviceMonitor.cpp's SetHeaderForOutput and row
printing, not captured: no public paste of dmon with a fault in its samples was found."""

from __future__ import annotations

import pytest

from gpufleet.errors import ParseError
from gpufleet.parsers.nvidia.dcgmi_tools import parse_discovery, parse_dmon
from tests.conftest import CAPTURES

DATA = CAPTURES / "dcgmi_tools"


def test_dmon_samples_per_entity() -> None:
    dmon = parse_dmon((DATA / "dmon_xid79_remap_pending.txt").read_text().split("\n", 1)[1])
    assert dmon.fields == ["TMPTR", "XIDER", "EDVTL", "ESVTL", "RRP", "RRF", "DVCCTR"] and dmon.units == ["C"]
    assert [len(rows) for rows in dmon.samples.values()] == [2, 2, 2]
    assert dmon.samples["GPU 2"][0]["XIDER"] == "79" and dmon.samples["GPU 2"][1]["XIDER"] == "N/A"


def test_a_real_dmon_of_dcgm_4_reads_every_sample() -> None:
    text = (DATA / "dmon_smact_na_dcgm423.txt").read_text().split("\n", 1)[1]
    dmon = parse_dmon(text)
    assert (dmon.fields, dmon.units) == (["SMACT"], [])
    assert sorted(dmon.samples) == [f"GPU {i}" for i in range(8)]
    assert all(rows == [{"SMACT": "N/A"}] * 2 for rows in dmon.samples.values())


def test_dmon_of_dcgm_2() -> None:
    dmon = parse_dmon((DATA / "dmon_2x_power_brake.txt").read_text())
    assert dmon.fields == ["POWER", "TMPTR", "SMCLK", "DVCCTR"]
    assert dmon.samples["GPU 1"] == [{"POWER": "58.02", "TMPTR": "37", "SMCLK": "382", "DVCCTR": "136"}]


def test_a_value_with_spaces_is_read_by_its_column() -> None:
    text = "#Entity           DVNAM                     TMPTR\nID\nGPU 0             NVIDIA GeForce RTX 3090   41\n"
    assert parse_dmon(text).samples["GPU 0"] == [{"DVNAM": "NVIDIA GeForce RTX 3090", "TMPTR": "41"}]


def test_dmon_without_its_header_is_refused() -> None:
    with pytest.raises(ParseError, match="not a dcgmi dmon row"):
        parse_dmon("GPU 0   34   0\n")
    assert parse_dmon("Error: Unable to connect to host engine\n").errors


def test_discovery_lists_each_gpu() -> None:
    found = parse_discovery((DATA / "discovery_h100_blank_names_dcgm229.txt").read_text())
    assert (found.gpus_found, found.switches, len(found.gpus)) == (4, 0, 4)
    assert found.gpus[2].value("PCI Bus ID") == "00000000:CC:00.0" and found.gpus[2].value("Name") == "<<<NULL>>>"


def test_discovery_of_dcgm_4_with_a_lost_gpu() -> None:
    text = (
        "2 GPUs found (All).\n| GPU ID | Device Information |\n| 0      | Name: NVIDIA H100 80GB HBM3 |\n"
        "| 1      | Status: LOST |\n|        | Name: NVIDIA H100 80GB HBM3 (last known) |\n"
        "|        | PCI Bus ID: 00000000:1B:00.0 (last known) |\n"
    )
    found = parse_discovery(text)
    assert found.shown == "All" and found.gpus[1].value("Status") == "LOST"
    assert found.gpus[1].value("PCI Bus ID") == "00000000:1B:00.0"
