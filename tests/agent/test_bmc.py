"""The agent's BMC source end to end: a fake `ipmitool` on PATH prints recorded real outputs (tests/captures/bmc),
the real parser reads them, the series land in the frame and on /metrics, the SEL's new records go to the edge and its
position survives a restart, and a node without ipmitool is `gpufleet_source_up{source="bmc"} 0` with the rest of
the agent unaffected."""

from __future__ import annotations

import shutil
from pathlib import Path

from gpufleet.agent.bmc import FAN_RATIO, FAN_RPM, POSITION_KEY, POWER, SENSOR_STATE, TEMPERATURE, BmcWatch
from gpufleet.agent.collector import Collector
from gpufleet.agent.kernel import MemoryPositions
from gpufleet.model.bmc import BmcRead
from gpufleet.sources.node.bmc import IpmiTool
from gpufleet.telemetry.exposition.dcgm import render
from gpufleet.telemetry.frame import MetricFrame
from tests.conftest import CAPTURES
from tests.sources.node.fake_ipmitool import install

BMC = CAPTURES / "bmc"
SEL = BMC / "sel_elist_psu_ac_lost_fan_nr.txt"


def watch(tmp_path: Path, sdr: Path, sel: Path, **kw: object) -> tuple[BmcWatch, list[BmcRead]]:
    reads: list[BmcRead] = []
    env = install(tmp_path / "bin", sdr, sel)
    return BmcWatch("n1", IpmiTool(env=env), deliver=reads.append, **kw), reads  # type: ignore[arg-type]


def test_dell_r320_failed_fans_become_series_and_states(tmp_path: Path) -> None:
    bmc, reads = watch(tmp_path, BMC / "sdr_list_full_dell_r320_fans_failed.txt", SEL)
    frame = MetricFrame((), ())
    collector = Collector(frame, [bmc])
    collector.collect_once()
    assert "bmc" not in collector.source_up  # not read yet: nothing said
    assert bmc.read_once() is not None
    collector.collect_once()
    g = frame.gauges
    assert g[(FAN_RPM, (("sensor", "Fan1A"),))] == 7560.0
    assert g[(FAN_RPM, (("sensor", "Fan3B"),))] == 0.0
    assert g[(SENSOR_STATE, (("sensor", "Fan3B"), ("type", "fan")))] == 2.0
    assert g[(SENSOR_STATE, (("sensor", "Fan1A"), ("type", "fan")))] == 0.0
    assert g[(TEMPERATURE, (("sensor", "Inlet Temp"),))] == 32.0
    assert g[(POWER, (("sensor", "Pwr Consumption"),))] == 84.0
    assert collector.source_up["bmc"] is True
    body = render(frame)
    assert 'gpufleet_node_fan_speed_rpm{sensor="Fan3B"} 0' in body
    assert "# HELP gpufleet_node_sensor_state" in body
    assert reads[0].new_entries == ()  # a first start reports none of the records already there


def test_hpe_fans_in_percent_and_repeated_names(tmp_path: Path) -> None:
    bmc, _ = watch(tmp_path, BMC / "sdr_hpe_dl380_g7_excerpt.txt", SEL)
    frame = MetricFrame((), ())
    bmc.read_once()
    bmc.collect(frame)
    assert frame.gauges[(FAN_RATIO, (("sensor", "Fan 1"),))] == 0.4351
    dell, _ = watch(tmp_path / "r510", BMC / "sdr_type_temperature_dell_r510.txt", SEL)
    dell.read_once()
    dell.collect(frame := MetricFrame((), ()))
    # Dell names several sensors `Temp`: each keeps its own series by its sensor number
    assert frame.gauges[(TEMPERATURE, (("sensor", "Ambient Temp 0Eh"),))] == 29.0
    assert (SENSOR_STATE, (("sensor", "Temp 01h"), ("type", "temperature"))) not in frame.gauges  # ns: no state


def test_new_sel_records_and_the_position_across_restarts(tmp_path: Path) -> None:
    positions = MemoryPositions()
    sel = tmp_path / "sel.txt"
    lines = SEL.read_text().splitlines(keepends=True)
    sel.write_text("".join(lines[:6]))
    first, reads = watch(tmp_path, BMC / "sdr_list_full_dell_r320_fans_failed.txt", sel, positions=positions)
    first.read_once()
    assert reads[-1].new_entries == () and positions.get(POSITION_KEY) is not None
    sel.write_text("".join(lines[:8]))  # two records logged while the agent was down
    second, reads = watch(tmp_path, BMC / "sdr_list_full_dell_r320_fans_failed.txt", sel, positions=positions)
    second.read_once()
    assert [e.record for e in reads[-1].new_entries] == [0x98, 0x99]
    second.read_once()
    assert reads[-1].new_entries == ()
    sel.write_text("".join(lines[8:]))  # cleared, then two records
    second.read_once()
    assert [e.record for e in reads[-1].new_entries] == [0x9A, 0x9B]


def test_a_node_without_ipmitool_is_source_down_and_the_rest_goes_on(tmp_path: Path) -> None:
    class Other:
        name = "other"

        def collect(self, frame: MetricFrame) -> None:
            frame.set_gauge("gpufleet_other", {}, 1.0)

    bmc = BmcWatch("n1", IpmiTool(env={"PATH": str(tmp_path)}))
    frame = MetricFrame((), ())
    collector = Collector(frame, [bmc, Other()])
    assert bmc.read_once() is None
    collector.collect_once()
    assert collector.source_up == {"bmc": False, "other": True}
    assert frame.gauges[("gpufleet_source_up", (("source", "bmc"),))] == 0.0
    assert frame.gauges[("gpufleet_other", ())] == 1.0


def test_a_later_read_replaces_the_series(tmp_path: Path) -> None:
    sdr = tmp_path / "sdr.txt"
    shutil.copy(BMC / "sdr_list_full_dell_r320_fans_failed.txt", sdr)
    bmc, _ = watch(tmp_path, sdr, SEL)
    frame = MetricFrame((), ())
    bmc.read_once()
    bmc.collect(frame)
    sdr.write_text("".join(line for line in sdr.read_text().splitlines(keepends=True) if "Fan5B" not in line))
    bmc.read_once()
    bmc.collect(frame)
    assert (FAN_RPM, (("sensor", "Fan5B"),)) not in frame.gauges and (FAN_RPM, (("sensor", "Fan5A"),)) in frame.gauges


def test_with_a_control_plane_reads_go_to_the_edge_and_the_position_to_the_spool(tmp_path: Path) -> None:
    from gpufleet.agent.runtime import assemble
    from gpufleet.model.observe import NodeInventory

    sel = tmp_path / "sel.txt"
    lines = SEL.read_text().splitlines(keepends=True)
    sel.write_text("".join(lines[:6]))
    env = install(tmp_path / "bin", BMC / "sdr_list_full_dell_r320_fans_failed.txt", sel)
    bmc = BmcWatch("n1", IpmiTool(env=env))
    agent = assemble(
        "n1", MetricFrame((), ()), [], inventory=lambda: NodeInventory(node="n1"), interval=1.0, host="127.0.0.1",
        port=0, data_dir=tmp_path / "data", control_plane="http://127.0.0.1:9", token=lambda: None, kernel_log=None,
        bmc=bmc,
    )  # fmt: skip
    assert agent.spool is not None and bmc in agent.stoppers and bmc in agent.collector.sources
    bmc.read_once()  # the failed fans: two findings
    assert len(agent.spool) == 2
    sel.write_text("".join(lines[:9]))
    bmc.read_once()  # three new records, the AC loss and the fan a fault each; the fans held back
    assert len(agent.spool) == 2 + 3 + 2
    assert agent.spool.get(POSITION_KEY) == f"9a {lines[8].strip()}"
    agent.spool.close()
