"""IB counters and links: perfquery, ibqueryerrors, iblinkinfo,
ibnetdiscover (in the formats infiniband-diags 44 prints against ibsim), and link flaps in syslog (corpus)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.catalog import load_ib_counters
from gpufleet.errors import ParseError
from gpufleet.parsers.infiniband.diags import (
    count_flaps,
    parse_iblinkinfo,
    parse_ibnetdiscover,
    parse_ibqueryerrors,
    parse_link_events,
    parse_link_line,
    parse_perfquery,
    scan_iblinkinfo,
    scan_ibnetdiscover,
    scan_perfquery,
)
from tests.conftest import CAPTURES

IBSIM = CAPTURES / "ibsim"  # real tool output from a simulated fabric (see README.md)


def _capture(name: str) -> str:
    return (IBSIM / name).read_text()


def test_perfquery_plain_and_extended() -> None:
    [plain] = parse_perfquery(_capture("perfquery_lid2_port1.txt"))
    assert (plain.lid, plain.port, plain.extended, plain.cap_mask) == (2, 1, False, "0x1200")
    assert plain.counters["SymbolErrorCounter"] == 1234 and plain.counters["LinkDownedCounter"] == 3
    assert plain.counters["PortRcvErrors"] == 77 and plain.counters["PortXmitData"] == 3024
    assert "PortSelect" not in plain.counters and plain.counters["QP1Dropped"] == 0
    assert set(plain.known()) == set(load_ib_counters())
    [ext] = parse_perfquery(_capture("perfquery_x_lid2_port1.txt"))
    assert ext.extended and (ext.cap_mask, ext.cap_mask2) == ("0x1200", "0x0000000")
    assert ext.counters["PortXmitData"] == 3168 and ext.counters["PortRcvPkts"] == 45
    assert ext.counters["PortUnicastRcvPkts"] == 0
    both = parse_perfquery(_capture("perfquery_lid2_port1.txt") + _capture("perfquery_x_lid2_port1.txt"))
    assert [b.extended for b in both] == [False, True]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("SymbolErrorCounter:....1\n", "before any"),
        (_capture("perfquery_lid2_port1.txt").replace("1234", "12x4"), "non-numeric"),
        ("", "no `# Port counters`"),
        ("# Port counters: Lid 2 port 1\n!!!\n", "not a perfquery counter line"),
    ],
)
def test_perfquery_errors(text: str, fragment: str) -> None:
    with pytest.raises(ParseError, match=fragment):
        parse_perfquery(text, source="pq.txt")


def test_ibqueryerrors() -> None:
    report = parse_ibqueryerrors(_capture("ibqueryerrors.txt"))
    assert [(p.node, p.port, p.counters) for p in report.ports] == [
        ("node01 mlx5_0", 1, {"SymbolErrorCounter": 1234, "LinkDownedCounter": 3, "PortRcvErrors": 77}),
        ("leaf1", None, {"PortXmitDiscards": 1}),  # the switch's all-ports aggregate
        ("leaf1", 35, {"PortXmitDiscards": 1}),
    ]
    assert (report.nodes_checked, report.bad_nodes, report.ports_checked, report.bad_ports) == (14, 2, 228, 2)
    assert all(name in load_ib_counters() for p in report.ports for name in p.counters)


def test_iblinkinfo() -> None:
    links = parse_iblinkinfo(_capture("iblinkinfo.txt"))
    assert len(links) == 6 * 36 + 4 * 1 + 4 * 2  # every switch port, every HCA port
    cables = 4 + 4 * 2 + 4 * 2  # single-port HCAs, dual-port HCAs, leaf-to-spine uplinks
    up = [link for link in links if link.up]
    assert len(up) == 2 * cables - 2  # every cable seen from both ends, but leaf1[35]-spine1 is unlinked
    first = links[0]
    assert (first.node, first.node_type, first.lid, first.port) == ("node02 mlx5_0", "CA", 5, 1)
    assert (first.width, first.speed_gbps, first.remote_lid, first.remote_port, first.remote_name) == (
        "4X",
        53.125,
        4,
        2,
        "leaf1",
    )
    assert first.note == "Could be 12X"
    unlinked = next(link for link in links if link.node == "leaf1" and link.port == 35)
    assert (unlinked.state, unlinked.phys_state, unlinked.remote_lid, unlinked.remote_name) == (
        "Down",
        "Polling",
        None,
        "",
    )
    with pytest.raises(ParseError, match="cannot read link line"):
        parse_iblinkinfo("Switch: 0x1 s:\n   4 1[ ] ==( garbage )==> ???\n")


def test_ibnetdiscover() -> None:
    topo = parse_ibnetdiscover(_capture("ibnetdiscover.txt"))
    types = [node.type for node in topo.nodes.values()]
    assert (types.count("Switch"), types.count("Ca")) == (6, 8)
    spine = next(node for node in topo.nodes.values() if node.description == "spine2")
    assert (spine.id, spine.ports, spine.lid) == ("S-0000000000200001", 36, 3)
    node08 = topo.nodes["H-0000000000100011"]
    assert (node08.type, node08.ports, node08.description, node08.lid) == ("Ca", 2, "node08 mlx5_0", 17)
    assert all((link.width, link.speed) == ("4x", "HDR") for link in topo.links)
    leaf4 = [link for link in topo.links if link.node == "S-0000000000200005"]
    assert [(link.port, link.remote_description, link.remote_port) for link in leaf4][:2] == [
        (1, "node05 mlx5_0", 2),
        (2, "node06 mlx5_0", 2),
    ]
    with pytest.raises(ParseError, match="before any Switch"):
        parse_ibnetdiscover('[1]\t"S-1"[2]\n')


def test_link_flaps_in_syslog(corpus: Path) -> None:
    events = parse_link_events((corpus / "ib_linkflap_syslog_aznhc.log").read_text(), year=2024)
    assert [e.state for e in events] == ["down"] * 6 + ["up"] * 6
    assert {e.interface for e in events} == {"ib6"} and events[0].host == "jplc7eb7-vm-0"
    assert events[0].line == 3 and events[0].wall_time is not None and events[0].wall_time.hour == 6
    assert count_flaps(events) == {"ib6": 6}


def test_kernel_link_messages() -> None:
    text = "[ 12.0] mlx5_core 0000:3b:00.0 ib0: Link down\n[ 13.0] mlx5_core 0000:3b:00.0 ib0: Link up\n"
    assert [(e.interface, e.state) for e in parse_link_events(text)] == [("ib0", "down"), ("ib0", "up")]


# -- every version's names and modes (real captures from ibsim and outputs written from the tools' source) -----
IB = Path(__file__).parents[2] / "triage" / "readers" / "data" / "ib"  # shared with the IB readers' tests


def _ib(name: str) -> str:
    return (IB / name).read_text()


def test_perfquery_names_before_2010_are_the_catalogs() -> None:
    [old] = parse_perfquery(_ib("perfquery_old_names_2008.txt"))
    assert (old.lid, old.port, old.extended, old.cap_mask, old.complete) == (4, 1, False, None, True)
    assert old.counters["SymbolErrorCounter"] == 65535 and old.counters["LinkErrorRecoveryCounter"] == 255
    assert old.counters["PortXmitDiscards"] == 87 and old.counters["PortXmitData"] == 4294967295
    assert old.printed["SymbolErrorCounter"] == "SymbolErrors" and "SymbolErrors" not in old.counters
    assert set(old.known()) == set(load_ib_counters()) - {"PortXmitWait"}  # before XmtWait existed
    [later] = parse_perfquery(_ib("perfquery_old_names_2010.txt"))
    assert later.counters["PortXmitWait"] == 1523 and later.printed["PortXmitWait"] == "XmtWait"
    assert later.cap_mask == "0x1200" and later.complete


def test_perfquery_attributes_and_port_names() -> None:
    [details] = parse_perfquery(_ib("perfquery_rcv_error_details_ibsim.txt"))
    assert (details.attribute, details.counters["PortLocalPhysicalErrors"], details.complete) == (
        "PortRcvErrorDetails",
        5,
        True,
    )
    [summed] = parse_perfquery(_ib("perfquery_all_ports_ibsim.txt"))
    assert (summed.lid, summed.port, summed.cap_mask) == (4, 255, "0x1300")
    [dr] = parse_perfquery(_ib("perfquery_dr_path_busy.txt"))
    assert (dr.lid, dr.port, dr.where) == (None, 1, "DR path slid 0; dlid 0; 0,1")
    [ext] = parse_perfquery(_ib("perfquery_x_error_counters.txt"))
    assert ext.extended and ext.cap_mask2 == "0x0000002" and ext.complete
    assert (ext.counters["SymbolErrorCounter"], ext.counters["LinkDownedCounter"]) == (123456, 300)


def test_perfquery_records_that_lack_fields_are_incomplete() -> None:
    for name in ("perfquery_saturated_ibsim.txt", "perfquery_x_error_counters.txt", "perfquery_old_names_2008.txt"):
        lines = _ib(name).splitlines()
        for cut in range(2, len(lines)):  # every cut inside the record (QP1Dropped came late: optional)
            if all("QP1Dropped" in line for line in lines[cut:]):
                continue
            scan = scan_perfquery("\n".join(lines[:cut]))
            assert scan.truncated and not scan.blocks[0].complete, (name, cut)
        for drop in range(3, len(lines)):  # a line left out in the middle (QP1Dropped came late: optional)
            if "QP1Dropped" in lines[drop]:
                continue
            scan = scan_perfquery("\n".join(lines[:drop] + lines[drop + 1 :]))
            assert scan.truncated, (name, lines[drop])


def test_perfquery_excerpt_and_failures() -> None:
    lines = _ib("perfquery_x_ibsim.txt").splitlines()
    scan = scan_perfquery("\n".join(lines[4:]))  # from PortRcvData on: no header
    [block] = scan.blocks
    assert scan.starts_mid_record and (block.attribute, block.extended, block.lid) == (
        "PortCountersExtended",
        True,
        None,
    )
    assert block.complete  # it owes only the fields after its first
    failed = scan_perfquery(_ib("perfquery_failed_ibsim.txt"))
    assert not failed.blocks and any("iberror" in d for d in failed.diagnostics)
    with pytest.raises(ParseError, match="classportinfo"):
        parse_perfquery(_ib("perfquery_failed_ibsim.txt"))


def test_ibqueryerrors_every_version() -> None:
    old = parse_ibqueryerrors(_ib("ibqueryerrors_old_names_1_5.txt"))
    assert not old.summary and old.suppressed == ["PortRcvSwitchRelayErrors"]
    assert [(p.node, p.port, p.counters) for p in old.ports] == [
        (
            "ISR9024D Voltaire",
            3,
            {"SymbolErrorCounter": 65535, "LinkErrorRecoveryCounter": 255, "LinkDownedCounter": 12},
        ),
        ("ISR9024D Voltaire", 9, {"PortXmitDiscards": 231, "PortXmitWait": 2867}),
        ("node17 HCA-1", 1, {"PortRcvErrors": 14}),
    ]
    assert old.ports[0].printed["LinkErrorRecoveryCounter"] == "LinkRecovers"
    perl = parse_ibqueryerrors(_ib("ibqueryerrors_perl_2008.txt"))
    assert perl.ports[0].counters == {"SymbolErrorCounter": 4, "LinkErrorRecoveryCounter": 1}
    wide = parse_ibqueryerrors(_ib("ibqueryerrors_64bit.txt"))
    assert wide.ports[0].counters["SymbolErrorCounter"] == 70213 and "SymbolErrorCounter" in wide.ports[0].wide
    assert (wide.pma_failures, wide.thresholds, wide.summary, wide.bad_ports) == (3, {}, True, 2)
    assert wide.ports[1].port is None and wide.ports[1].node_guid == "0x946dae0300f1a2b0"
    signed = parse_ibqueryerrors('Errors for "n"\n   GUID 0x1 port 1: [PortXmitWait == -2]\n')
    assert signed.ports[0].counters == {"PortXmitWait": (1 << 32) - 2}  # versions printing %d wrapped
    thresholds = parse_ibqueryerrors(_ib("ibqueryerrors_thresholds_ibsim.txt"))
    assert thresholds.thresholds == {"SymbolErrorCounter": 10, "PortXmitWait": 1000, "LinkDownedCounter": 10}
    suppressed = parse_ibqueryerrors(_ib("ibqueryerrors_suppressed_ibsim.txt"))
    assert suppressed.suppressed == ["SymbolErrorCounter", "PortXmitWait"]


def test_ibqueryerrors_link_info_and_data_counters() -> None:
    report = parse_ibqueryerrors(_ib("ibqueryerrors_report_port_ibsim.txt"))
    leaf = next(p for p in report.ports if p.node == "leaf1" and p.port == 35)
    link = parse_link_line(leaf.detail)
    assert link is not None and (link.lid, link.port, link.state, link.phys_state) == (4, 35, "Down", "Polling")
    data = parse_ibqueryerrors(_ib("ibqueryerrors_data_ibsim.txt"))
    node01 = data.ports[0]
    assert node01.counters["PortXmitData"] == 12456 and "PortXmitData" in node01.wide
    assert "SymbolErrorCounter" not in node01.wide  # 16-bit PortCounters value
    counters_only = parse_ibqueryerrors('Data Counters for 0x1 "n"\n   GUID 0x1 port 1: [PortXmitData == 8 (8.000B)]\n')
    assert counters_only.ports[0].data_only


def test_iblinkinfo_every_mode() -> None:
    line_mode = scan_iblinkinfo(_ib("iblinkinfo_line_ibsim.txt"))
    types = {(link.node, link.node_type) for link in line_mode.links}
    assert ("leaf1", "Switch") in types and ("node01 mlx5_0", "CA") in types and not line_mode.unreadable
    first = line_mode.links[0]
    assert first.remote_guid is not None and first.remote_lid is not None
    settings = scan_iblinkinfo(_ib("iblinkinfo_settings_ibsim.txt"))
    assert settings.links[0].settings == "(HOQ:0 VL_Stall:7)" and settings.links[0].note == "Could be 12X"
    fdr = {link.port: link for link in scan_iblinkinfo(_ib("iblinkinfo_fdr_states.txt")).links}
    assert (fdr[2].speed, fdr[2].speed_gbps) == ("10.0 Gbps (FDR10)", 10.0)
    assert fdr[3].note == "Could be FDR10 (Found link at QDR but expected speed is FDR10)"
    assert (fdr[4].state, fdr[5].state, fdr[6].phys_state) == ("Armed", "Initialize", "LinkUp")
    perl = scan_iblinkinfo(_ib("iblinkinfo_perl_2008.txt"))
    assert [(li.node, li.node_type, li.port, li.width, li.state, li.phys_state, li.note) for li in perl.links[:3]] == [
        ("ISR9024D Voltaire", "Switch", 1, "4X", "Active", "LinkUp", ""),
        ("ISR9024D Voltaire", "Switch", 2, "1X", "Active", "LinkUp", "Could be 4X"),
        ("ISR9024D Voltaire", "Switch", 3, "4X", "Down", "Polling", ""),
    ]
    assert len(perl.links) == 24 and not perl.unreadable
    degraded = {li.port: li for li in scan_iblinkinfo(_ib("iblinkinfo_degraded_ibsim.txt")).links if li.node == "leafA"}
    assert not degraded[3].far_end_available and degraded[3].note == "Port not available"
    assert degraded[1].width == "1X" and degraded[2].speed_gbps == 25.78125


def test_iblinkinfo_far_end_cut_off_and_excerpts() -> None:
    line = "           4    1[  ] ==( 4X        53.125 Gbps Active/  LinkUp)"
    [link] = scan_iblinkinfo(line).links
    assert not link.far_end_shown and link.remote_port is None and link.up
    scan = scan_iblinkinfo(_ib("iblinkinfo_ibsim.txt").split("Switch: 0x0000000000200002 leaf1:\n", 1)[1])
    assert scan.starts_mid_record or scan.links[0].node == ""
    assert scan_iblinkinfo("Switch: 0x1 s:\nCA: x:\n").empty_nodes == ["s", "x"]


def test_ibnetdiscover_every_mode() -> None:
    grouped = parse_ibnetdiscover(_ib("ibnetdiscover_grouped_ibsim.txt"))
    full = parse_ibnetdiscover(_ib("ibnetdiscover_full_ibsim.txt"))
    assert len(grouped.links) == len(full.links) == 40
    assert all((link.width, link.speed) == ("4x", "HDR") for link in full.links)  # ` s=4 w=2 v=4` after it
    ports = scan_ibnetdiscover(_ib("ibnetdiscover_ports_degraded_ibsim.txt"))
    assert ports.ports_report and len(ports.links) == 12 and len(ports.unconnected) == 8
    gpu01 = next(link for link in ports.links if link.node == "Ca:gpu01 mlx5_0")
    assert (gpu01.width, gpu01.speed, gpu01.lid, gpu01.remote_lid, gpu01.remote) == ("1x", "HDR", 2, 3, "Switch:leafA")
    no_sm = parse_ibnetdiscover(_ib("ibnetdiscover_init_no_sm_ibsim.txt"))
    assert {link.lid for link in no_sm.links} == {0} and {link.remote_lid for link in no_sm.links} == {0}
    mixed = parse_ibnetdiscover(_ib("ibnetdiscover_ndr_mixed.txt"))
    switch_side = {link.port: (link.width, link.speed) for link in mixed.links if link.node.startswith("S-")}
    assert switch_side == {1: ("4x", "NDR"), 2: ("2x", "NDR"), 3: ("1x", "NDR"), 4: ("4x", "EDR")}
    unknown = scan_ibnetdiscover(
        'Switch\t8 "S-1"\t\t# "s" base port 0 lid 3 lmc 0\n[1]\t"H-2"[1](3) \t\t# "h" lid 4 ?????\n'
    )
    assert (unknown.links[0].width, unknown.links[0].speed, unknown.links[0].remote_lid) == (None, None, 4)
    with pytest.raises(ParseError, match="not an ibnetdiscover line"):
        parse_ibnetdiscover('Ca\t : 0x0000000000100011 ports 2 devid 0x0 vendid 0x0 "node08 mlx5_0"\n')
