"""ipmitool run as the agent runs it, through a fake `ipmitool` on PATH that prints recorded real outputs
(tests/captures/bmc): what it reads, what is new in the SEL, and every way it cannot read the BMC."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.parsers.bmc.ipmitool import parse_sel
from gpufleet.sources.node.bmc import BmcUnavailable, IpmiTool, new_entries, position, read_bmc
from tests.conftest import CAPTURES
from tests.sources.node.fake_ipmitool import install

BMC = CAPTURES / "bmc"
SEL = BMC / "sel_elist_psu_ac_lost_fan_nr.txt"


def test_reads_sensors_and_sel_through_ipmitool(tmp_path: Path) -> None:
    env = install(tmp_path / "bin", BMC / "sdr_elist_hpe_dl360_gen10_excerpt.txt", SEL)
    sensors, entries = read_bmc(IpmiTool(env=env))
    assert len(sensors) == 15 and sensors[2].name == "01-Inlet Ambient"
    assert [e.record for e in entries][-1] == 0x9B


def test_an_empty_sel_is_no_record(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_text("")
    env = install(tmp_path / "bin", BMC / "sdr_list_full_dell_r320_fans_failed.txt", empty)
    sensors, entries = read_bmc(IpmiTool(env=env))
    assert len(sensors) == 17 and entries == []


def test_no_ipmitool_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(BmcUnavailable, match="ipmitool is not installed") as caught:
        IpmiTool(env={"PATH": str(tmp_path)}).run("sdr", "elist")
    assert caught.value.fix and "--no-bmc" in caught.value.fix


@pytest.mark.parametrize(
    ("message", "fix"),
    [
        ("Could not open device at /dev/ipmi0 or /dev/ipmi/0 or /dev/ipmidev/0: No such file or directory",
         "modprobe ipmi_devintf"),
        ("Could not open device at /dev/ipmi0 or /dev/ipmi/0 or /dev/ipmidev/0: Permission denied", "as root"),
    ],
)  # fmt: skip
def test_no_device_or_no_permission(tmp_path: Path, message: str, fix: str) -> None:
    env = install(tmp_path / "bin", SEL, SEL, FAKE_IPMI_FAIL=message)
    with pytest.raises(BmcUnavailable) as caught:
        IpmiTool(env=env).run("sdr", "elist")
    assert message in caught.value.message and fix in (caught.value.fix or "")


def test_a_hung_bmc_is_stopped_at_the_timeout(tmp_path: Path) -> None:
    env = install(tmp_path / "bin", SEL, SEL, FAKE_IPMI_SLEEP="5")
    with pytest.raises(BmcUnavailable, match=r"did not finish in 0\.2 s"):
        IpmiTool(timeout_s=0.2, env=env).run("sel", "elist")


def test_new_entries_after_the_stored_record() -> None:
    entries = parse_sel(SEL.read_text()).entries
    assert new_entries(entries, None) is None  # a first read: none is new
    assert [e.record for e in new_entries(entries, position(entries[6])) or []] == [0x99, 0x9A, 0x9B]
    assert new_entries(entries, position(entries[-1])) == []
    # the SEL was cleared: its stored record is gone, or its id now holds another line
    assert new_entries(entries, "1ff   1ff | 01/01/2020 | 00:00:00 | Fan #0x01 | x | Asserted") == entries
    assert new_entries(entries, f"{entries[2].record:x} another line") == entries
