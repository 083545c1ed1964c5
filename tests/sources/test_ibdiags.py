"""IB counters and links: sysfs (corpus snapshot and a live-style tree), perfquery, ibqueryerrors, iblinkinfo,
ibnetdiscover (in the formats infiniband-diags 44 prints against ibsim), and link flaps in syslog (corpus)."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from gpufleet.catalog import load_ib_counters
from gpufleet.errors import ParseError
from gpufleet.sources import ib_sysfs
from gpufleet.sources.ib_sysfs import parse_sysfs_snapshot, read_sysfs
from gpufleet.sources.ibdiags import (
    count_flaps,
    parse_iblinkinfo,
    parse_ibnetdiscover,
    parse_ibqueryerrors,
    parse_link_events,
    parse_perfquery,
)

IBSIM = Path(__file__).parent / "data" / "ibsim"  # real tool output from a simulated fabric (see README.md)


def _capture(name: str) -> str:
    return (IBSIM / name).read_text()


def test_sysfs_snapshot_uses_catalog_names(corpus: Path) -> None:
    snap = parse_sysfs_snapshot((corpus / "ib_sysfs_counters_mlx5_0_h100_gpud.txt").read_text(), hca="mlx5_0")
    assert snap.attributes == {"board_id": "MT_0000000838", "fw_ver": "28.41.1000", "hca_type": "MT4129"}
    [port] = snap.ports
    assert port.port == 1 and port.up and port.rate_gbps == 400 and port.rate_detail == "4X NDR"
    assert port.link_layer == "InfiniBand"
    # every error/traffic counter the catalog knows is present, under its PMA name
    assert set(port.counters) == set(load_ib_counters())
    assert port.counters["ExcessiveBufferOverrunErrors"] == 15 and port.counters["PortRcvErrors"] == 14
    assert port.counters["PortRcvSwitchRelayErrors"] == 1 and port.counters["PortXmitWait"] == 2489603687
    assert port.unmapped_counters["unicast_rcv_packets"] == 317548853677
    assert port.hw_counters["roce_adp_retrans"] == 3 and port.hw_counters["rx_dct_connect"] == 422237


def test_corrupted_snapshot_names_file_and_line(corpus: Path) -> None:
    text = (corpus / "ib_sysfs_counters_mlx5_0_h100_gpud.txt").read_text()
    broken = text.replace("port_rcv_errors = 14", "port_rcv_errors = 1\x004")
    with pytest.raises(ParseError) as info:
        parse_sysfs_snapshot(broken, hca="mlx5_0", source="snap.txt")
    line = text.splitlines().index("ports/1/counters/port_rcv_errors = 14") + 1
    assert f"snap.txt:{line}: ports/1/counters/port_rcv_errors" in info.value.message
    with pytest.raises(ParseError, match="N: NAME"):
        parse_sysfs_snapshot("ports/1/state = ACTIVE\n", hca="x")


def _make_port(root: Path, hca: str, port: int, counters: dict[str, str]) -> Path:
    port_dir = root / hca / "ports" / str(port)
    (port_dir / "counters").mkdir(parents=True)
    (port_dir / "state").write_text("4: ACTIVE\n")
    (port_dir / "phys_state").write_text("5: LinkUp\n")
    (port_dir / "rate").write_text("200 Gb/sec (4X HDR)\n")
    for name, value in counters.items():
        (port_dir / "counters" / name).write_text(value)
    return port_dir


def test_live_tree_keeps_good_ports_when_one_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _make_port(tmp_path, "mlx5_0", 1, {"symbol_error": "5\n", "link_downed": "0\n"})
    bad = _make_port(tmp_path, "mlx5_0", 2, {"symbol_error": "7\n"})
    corrupt = _make_port(tmp_path, "mlx5_1", 1, {"port_rcv_errors": "12abc\n"})
    (tmp_path / "mlx5_0" / "fw_ver").write_text("28.41.1000\n")
    real_read = ib_sysfs._read_text

    def flaky(path: Path) -> str:
        if path.parent.parent == bad:  # the port's device went away mid-read
            raise OSError(errno.ENODEV, "No such device", str(path))
        return real_read(path)

    monkeypatch.setattr(ib_sysfs, "_read_text", flaky)
    hcas = {h.hca: h for h in read_sysfs(tmp_path)}
    mlx0 = hcas["mlx5_0"]
    assert mlx0.attributes["fw_ver"] == "28.41.1000"
    assert [(p.port, p.counters) for p in mlx0.ports] == [(1, {"SymbolErrorCounter": 5, "LinkDownedCounter": 0})]
    [error] = mlx0.errors
    assert error.port == "2" and "No such device" in error.message and str(bad) in error.path
    [parse_error] = hcas["mlx5_1"].errors
    assert str(corrupt / "counters" / "port_rcv_errors") in parse_error.message
    assert hcas["mlx5_1"].ports == []


def test_missing_sysfs_root_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ParseError, match="no InfiniBand sysfs"):
        read_sysfs(tmp_path / "nope")


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
