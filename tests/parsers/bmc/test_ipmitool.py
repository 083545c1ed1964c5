"""ipmitool's sensor list and event log, read from real outputs (tests/captures/bmc, each with its .source.txt) and
from lines in the exact shapes ipmitool's printf calls make (lib/ipmi_sdr.c, lib/ipmi_sel.c)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpufleet.errors import ParseError
from gpufleet.model.bmc import BmcSensor
from gpufleet.parsers.bmc.ipmitool import parse_sdr, parse_sel
from tests.conftest import CAPTURES

BMC = CAPTURES / "bmc"


def _sensors(name: str) -> dict[str, BmcSensor]:
    return {s.name: s for s in parse_sdr((BMC / name).read_text()).sensors}


def test_sdr_list_dell_r320_reads_its_failed_fans() -> None:
    report = parse_sdr((BMC / "sdr_list_full_dell_r320_fans_failed.txt").read_text())
    assert len(report.sensors) == 17 and not report.extended and not report.problems
    by = {s.name: s for s in report.sensors}
    assert (by["Fan3B"].status, by["Fan3B"].reading, by["Fan3B"].unit, by["Fan3B"].kind) == ("cr", 0.0, "RPM", "fan")
    assert by["Fan3B"].level == "cr" and by["Fan3B"].low is None  # `sdr list` does not say the side
    assert (by["Fan1A"].status, by["Fan1A"].reading) == ("ok", 7560.0)
    assert (by["Inlet Temp"].kind, by["Inlet Temp"].reading) == ("temperature", 32.0)
    assert (by["Pwr Consumption"].kind, by["Pwr Consumption"].reading) == ("power", 84.0)
    assert by["Current 1"].kind == "other" and by["Current 1"].reading == 0.4


def test_sdr_elist_hpe_gen10_has_numbers_entities_and_states() -> None:
    report = parse_sdr((BMC / "sdr_elist_hpe_dl360_gen10_excerpt.txt").read_text())
    assert report.extended and len(report.sensors) == 15
    by = {s.name: s for s in report.sensors}
    inlet = by["01-Inlet Ambient"]
    assert (inlet.number, inlet.entity, inlet.reading, inlet.kind) == (0xA2, "55.1", 19.0, "temperature")
    assert by["SysHealth_Stat"].states == ("Transition to OK",)
    assert by["UID"].reading is None and by["UID"].states == ()  # an empty reading column
    assert by["04-P1 DIMM 1-6"].entity == "32.11"  # a two-digit instance widens the column
    assert by["05-PMM 1-6"].status == "ns"


def test_sdr_hpe_g7_fans_in_percent_and_supplies_in_watts() -> None:
    by = _sensors("sdr_hpe_dl380_g7_excerpt.txt")
    assert [by[f"Fan {i}"].unit for i in range(1, 7)] == ["percent"] * 6
    assert by["Fan 6"].reading == 13.72 and by["Fan 6"].kind == "fan"
    assert (by["Power Supply 2"].kind, by["Power Supply 2"].reading) == ("power", 155.0)
    assert by["Power Supplies"].kind == "psu" and by["Fans"].kind == "fan"  # their discrete 0x00 status sensors


def test_sdr_supermicro_absent_fans_are_no_reading() -> None:
    by = _sensors("sdr_list_full_supermicro_fans_absent.txt")
    assert [n for n, s in by.items() if s.kind == "fan" and s.status == "ns"] == [
        "FAN3", "FAN4", "FAN5", "FAN6", "FANB",
    ]  # fmt: skip
    assert by["FANA"].reading == 3500.0
    assert by["MB_10G Temp"].kind == "temperature"


def test_sdr_type_names_the_kind() -> None:
    report = parse_sdr((BMC / "sdr_type_temperature_dell_r510.txt").read_text(), sensor_type="Temperature")
    assert {s.kind for s in report.sensors} == {"temperature"}
    # without the command, the disabled `Temp` sensors on power-supply entities (10.x) are still temperatures
    assert {s.kind for s in parse_sdr((BMC / "sdr_type_temperature_dell_r510.txt").read_text()).sensors} == {
        "temperature"
    }


@pytest.mark.parametrize("status", ["lnc", "unc", "lcr", "ucr", "lnr", "unr"])
def test_extended_statuses_carry_their_side(status: str) -> None:
    # printf("%-16s | %02Xh | %-3s | %2d.%1d | ", ...) then "%s %s" value and unit
    sensor = parse_sdr(f"FAN1             | 41h | {status:<3} | 29.1 | 300 RPM\n").sensors[0]
    assert sensor.level == status[1:] and sensor.low is (status[0] == "l")


def test_a_power_supply_with_states() -> None:
    line = "PS2 Status       | C9h | ok  | 10.2 | Presence detected, Failure detected, Power Supply AC lost\n"
    sensor = parse_sdr(line).sensors[0]
    assert sensor.kind == "psu" and sensor.states == (
        "Presence detected", "Failure detected", "Power Supply AC lost",
    )  # fmt: skip


def test_not_ipmitool_is_refused() -> None:
    with pytest.raises(ParseError):
        parse_sdr("hello | world\n")
    with pytest.raises(ParseError):
        parse_sel("nothing here\n")


def test_sel_elist_real_records() -> None:
    report = parse_sel((BMC / "sel_elist_psu_ac_lost_fan_nr.txt").read_text())
    assert [e.record for e in report.entries] == list(range(0x92, 0x9C)) and report.last_record == 0x9B
    ac = report.entries[6]
    assert (ac.sensor_type, ac.sensor, ac.event, ac.asserted) == (
        "Power Supply", "PSU1 AC Lost", "Power Supply AC lost", True,
    )  # fmt: skip
    assert ac.logged == datetime(2025, 3, 6, 19, 0, 47, tzinfo=UTC).isoformat()  # 1.8.18 and before: %m/%d/%Y in UTC
    fan = report.entries[8]
    assert (fan.sensor_type, fan.sensor, fan.event) == ("Fan", "PSU1 Slow FAN1", "Transition to Non-recoverable")
    assert report.entries[9].asserted is False


def test_sel_shapes_of_every_release() -> None:
    text = (
        "   1 | 04/18/2019 | 10:00:00 | Power Supply #0x63 | Power Supply AC lost | Asserted\n"
        "  3a | 12/14/22 | 23:09:44 CET | Memory #0x88 | Correctable ECC | Asserted\n"
        "  3b | 12/14/22 | 23:09:45 UTC | Fan FAN3 | Lower Critical going low  | Asserted"
        " | Reading 0 < Threshold 400 RPM\n"
        "   5 |  Pre-Init  |0000000123| System Event #0x01 | Timestamp Clock Sync | Asserted\n"
        "   9 | Linux kernel panic: Fatal excep\n"
        "  1f | 11/23/2020 | 03:12:43 | OEM record c1 | 000000 | 0a0b0c0d0e0f\n"
    )
    e = parse_sel(text).entries
    assert (e[0].sensor_type, e[0].sensor) == ("Power Supply", "#0x63")
    assert e[1].logged == "2022-12-14T23:09:44"  # a local zone: no offset
    assert e[2].logged == "2022-12-14T23:09:45+00:00"
    assert (e[2].event, e[2].detail) == ("Lower Critical going low", "Reading 0 < Threshold 400 RPM")
    assert (e[3].pre_init, e[3].logged) == (123, None)
    assert (e[4].sensor_type, e[4].event) == ("Linux kernel panic", "Fatal excep")
    assert e[5].sensor_type == "OEM record c1"


def test_an_empty_sel() -> None:
    assert parse_sel("SEL has no entries\n").entries == []
