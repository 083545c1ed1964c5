"""hl-smi: the table (1.4 to 1.21 layouts), -q / -L and -Q CSV on real captured outputs (tests/captures/gaudi,
each with its .source.txt), and hand-written inputs for what no public capture shows (units in CSV values,
malformed text)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.errors import ParseError
from gpufleet.parsers.gaudi.hl_smi import HlSmiReport, parse_hl_smi
from tests.conftest import CAPTURES

DATA = CAPTURES / "gaudi"
FILES = sorted(p for p in DATA.glob("hl_smi_*") if not p.name.endswith(".source.txt"))


def _parse(name: str) -> HlSmiReport:
    return parse_hl_smi((DATA / name).read_text(encoding="utf-8"), source=name)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_capture_reads_whole_and_names_its_source(path: Path) -> None:
    assert path.with_name(path.name.rsplit(".", 1)[0] + ".source.txt").is_file()
    report = parse_hl_smi(path.read_text(encoding="utf-8"), source=path.name)
    assert report.aips and report.problems == []


def test_every_mode_has_a_capture() -> None:
    assert {_parse(p.name).format for p in FILES} == {"table", "query", "csv"} and len(FILES) >= 7


def test_gaudi2_table_under_load_with_uncorrected_events() -> None:
    report = _parse("hl_smi_table_gaudi2_x8_loaded.txt")
    assert (report.hl_smi_version, report.driver_version, report.nic_driver_version) == (
        "hl-1.21.1-fw-59.2.3.0", "1.21.1-bfcec49", "1.21.1-ead2cb0",
    )  # fmt: skip
    assert len(report.aips) == 8 and {a.model for a in report.aips} == {"gaudi2"}
    first = report.aips[0]
    assert (first.bus_id, first.temp_c, first.performance_state, first.power_w, first.power_cap_w) == (
        "0000:33:00.0", 35, "P0", 525, 600,
    )  # fmt: skip
    assert (first.memory_used_mib, first.memory_total_mib, first.utilization_pct) == (94963, 98304, 88)
    assert [a.uncorrected_events for a in report.aips] == [21, 0, 0, 0, 0, 0, 176, 0]
    assert report.aips[7].pci == "0000:4d:00"  # indices are not in bus order


def test_gaudi2_table_older_layout() -> None:
    report = _parse("hl_smi_table_gaudi2_x8_poc.txt")
    assert report.nic_driver_version is None and report.driver_version == "1.12.1-cb7a7bc"
    assert [a.power_w for a in report.aips] == [84, 87, 93, 93, 93, 91, 98, 85]
    assert {a.memory_used_mib for a in report.aips} == {768} and report.aips[0].performance_state is None


def test_gaudi3_row_whose_memory_cell_pushes_the_border() -> None:
    (aip,) = _parse("hl_smi_table_gaudi3_instructlab.txt").aips
    assert (aip.product_name, aip.model, aip.power_w, aip.power_cap_w) == ("HL-325", "gaudi3", 264, 900)
    assert (aip.memory_used_mib, aip.memory_total_mib, aip.utilization_pct) == (672, 131072, 0)


def test_gaudi1_prints_mib_with_a_small_b() -> None:
    report = _parse("hl_smi_table_gaudi1_dl1.txt")
    assert {a.memory_total_mib for a in report.aips} == {32768} and report.aips[6].utilization_pct == 4
    assert report.aips[0].model is None and report.aips[0].product_name == "HL-205"


def test_query_block() -> None:
    report = _parse("hl_smi_q_gaudi2_poc.txt")
    assert (report.driver_version, report.hl_smi_version) == ("1.12.1-cb7a7bc", "hl-1.12.1-fw-46.0.5.0")
    (aip,) = report.aips
    assert (aip.index, aip.device, aip.bus_id, aip.module_id) == (0, "accel0", "0000:43:00.0", 0)
    assert (aip.product_name, aip.model, aip.serial, aip.status) == ("HL-225", "gaudi2", "AM50016138", "Operational")
    assert aip.uuid == "01P0-HL2080A0-15-TF8A81-09-07-06"
    assert (aip.memory_total_mib, aip.memory_used_mib, aip.memory_free_mib) == (98304, 768, 97536)
    assert (aip.temp_c, aip.temp_hbm_c, len(aip.temperatures_c)) == (30, 32, 22)  # hottest On Chip N / HBM N
    assert aip.power_rails_w == {"54V PSU": 50, "12V PSU": 31} and aip.power_w == 81 and aip.power_cap_w == 550
    assert (aip.pcie_link_speed, aip.pcie_link_width, aip.pcie_link_width_max) == ("16GT/s", 16, 16)
    assert aip.clocks_mhz == {"soc": 1650} and aip.fan is None
    assert aip.throttle_reasons == {"HW Slowdown": False, "Thermal Slowdown": False, "Power Slowdown": False}
    assert aip.nic_count == 48
    assert (aip.replaced_rows_sbe, aip.replaced_rows_dbe, aip.replaced_rows_pending) == (0, 0, False)
    assert aip.firmware["Firmware [SPI] Version"].startswith("Preboot version hl-gaudi2-1.12.1")


def test_csv_with_header_module_ids_out_of_order() -> None:
    aips = _parse("hl_smi_csv_gaudi2_perfspect.txt").aips
    assert [a.module_id for a in aips] == [2, 6, 3, 0, 7, 1, 4, 5]
    assert (aips[0].serial, aips[0].bus_id, aips[0].driver_version) == ("AM50016189", "0000:19:00.0", "1.17.0-28a11ca")


def test_csv_nounits_with_unit_header() -> None:
    aips = _parse("hl_smi_csv_gaudi1_slurm_monitor.txt").aips
    assert len(aips) == 8 and aips[0].uuid == "00P1-HL2000A1-14-P64W99-13-05-03"
    assert (aips[7].temp_c, aips[2].power_w, aips[0].utilization_pct, aips[0].memory_total_mib) == (38, 96, 15, 32768)


def test_csv_values_with_units_and_noheader_with_fields() -> None:
    # hand-written in the documented shape (no public capture with units in the values was found)
    text = "0, 2, 0000:19:00.0, 768 MiB, 36 C, N/A\n1, 3, 0000:1a:00.0, 98304 MiB, 41 C, 5\n"
    fields = ["index", "module_id", "bus_id", "memory.used", "temperature.aip", "ecc.errors.uncorrected.volatile.total"]
    report = parse_hl_smi(text, fields=fields)
    assert [(a.index, a.module_id, a.memory_used_mib, a.temp_c) for a in report.aips] == [
        (0, 2, 768, 36), (1, 3, 98304, 41),
    ]  # fmt: skip
    assert report.aips[0].ecc_errors == {} and report.aips[1].ecc_errors == {"uncorrected.volatile.total": 5}
    with pytest.raises(ParseError, match="no header line") as info:
        parse_hl_smi(text)
    assert "--fields" in (info.value.fix or "")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "is empty"),
        ("| HL-SMI Version:   hl-1.21.1   |\n", "lists no AIP"),
        ("|   0  HL-225   N/A  | 0000:33:00.0  N/A |   0  |\n", "first row but not its second"),
        ("|   0  HL-225   N/A  | 0000:33:00.0  N/A |   0  |\n| garbage | here | 1 |\n", "not an AIP's second row"),
        ("| zero HL-225   N/A  | 0000:33:00.0  N/A |   0  |\n", "not an AIP's first row"),
        ("index, name\n0, HL-225, extra\n", "3 values for 2 fields"),
        ("index, name\n", "no AIP rows"),
        ("[0] AIP (accel0) 0000:43:00.0\n        Product Name : HL-225\n                : 5\n", "no key above it"),
    ],
)
def test_malformed_input_is_one_clear_error(text: str, message: str) -> None:
    # hand-written malformed inputs, not captures
    with pytest.raises(ParseError, match=message) as info:
        parse_hl_smi(text, source="bad.txt")
    assert info.value.fix


def test_the_compute_processes_table_is_read_and_a_wrapped_name_rejoined() -> None:
    """The table's process rows (tests/captures/gaudi/hl_smi_table_gaudi2_x8_loaded.txt: N/A on every AIP); a long
    command line going on on the next boxed line is the same process's name."""
    text = (CAPTURES / "gaudi" / "hl_smi_table_gaudi2_x8_loaded.txt").read_text(encoding="utf-8")
    report = parse_hl_smi(text)
    assert [p.aip for p in report.processes] == list(range(8)) and {p.pid for p in report.processes} == {None}
    head, _, _ = text.partition("|   0        N/A")
    rows = (
        "|   0      12345    C      python3 -m optimum.habana.train --model=llama   1024 MiB  |\n"
        "|          -3-8b --bf16                                                            |\n"
        "+=============================================================================+\n"
    )
    (process,) = parse_hl_smi(head + rows).processes
    assert (process.aip, process.pid, process.usage) == (0, 12345, "1024 MiB")
    assert process.name == "python3 -m optimum.habana.train --model=llama-3-8b --bf16"
