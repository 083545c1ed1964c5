"""ibstat and ibstatus: records, every version's fields, excerpts that start mid-record and outputs cut short."""

from __future__ import annotations

import random
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.parsers.infiniband.ibstat import parse_ibstat, parse_ibstatus

DATA = Path(__file__).parents[2] / "triage" / "readers" / "data" / "ib"  # shared with the IB readers' tests


def _text(name: str) -> str:
    return (DATA / name).read_text()


def test_ibstat_all_devices() -> None:
    report = parse_ibstat(_text("ibstat_dgx_h100.txt"))
    assert [d.name for d in report.devices] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4"]
    assert not report.truncated and not report.starts_mid_record and not report.unreadable
    first = report.devices[0]
    assert (first.node_type, first.device_type, first.number_of_ports) == ("CA", "MT4129", 1)
    assert first.fields["Firmware version"] == "28.39.1002"
    down = report.devices[2].ports[0]
    assert (down.device, down.number, down.state, down.phys_state) == ("mlx5_2", 1, "Down", "Polling")
    assert (down.rate_gbps, down.base_lid, down.sm_lid, down.port_guid) == (10.0, 65535, 0, "0x946dae03005e4f18")
    assert report.devices[4].ports[0].link_layer == "Ethernet"
    assert "State: Down" in "".join(down.lines) and down.lines[0].strip() == "Port 1:"


def test_ibstat_newest_fields_and_a_second_port() -> None:
    report = parse_ibstat(_text("ibstat_effective_speed.txt"))
    [device] = report.devices
    assert [p.number for p in device.ports] == [1, 2]
    assert device.ports[0].fields["Effective speed"] == "400"
    assert (device.ports[1].state, device.ports[1].phys_state) == ("Down", "Disabled")
    assert not report.truncated


def test_ibstat_oldest_fields() -> None:
    """Versions before 2010 print no `Link layer`: only the last record, which may have been cut before it, is in
    doubt."""
    report = parse_ibstat(_text("ibstat_mthca_old.txt"))
    [device] = report.devices
    assert [(p.number, p.state, p.rate_gbps, p.link_layer) for p in device.ports] == [
        (1, "Active", 20.0, None),
        (2, "Initializing", 20.0, None),
    ]
    assert report.truncated == "port 2 of mthca0 stops before Link layer"


def test_ibstat_captured_from_a_simulated_fabric() -> None:
    switch = parse_ibstat(_text("ibstat_switch_ibsim.txt"))
    [device] = switch.devices
    assert (device.node_type, device.name, device.number_of_ports) == ("Switch", "ibsim0", 0)
    assert [(p.number, p.link_layer) for p in device.ports] == [(0, "IB")]  # a switch's port 0
    one = parse_ibstat(_text("ibstat_one_port_ibsim.txt"))  # `ibstat ibsim0 1`: no indentation, no header fields
    [device] = one.devices
    assert device.single_port and [(p.number, p.state, p.base_lid) for p in device.ports] == [(1, "Active", 11)]
    assert not one.truncated
    short = parse_ibstat(_text("ibstat_short_ibsim.txt"))
    assert short.short_format and not short.truncated


def test_ibstat_fdr10_rate() -> None:
    report = parse_ibstat("CA 'mlx4_0'\n\tPort 1:\n\t\tState: Active\n\t\tRate: 40 (FDR10)\n\t\tRate2: x\n")
    [port] = report.ports
    assert (port.rate_gbps, port.rate_detail) == (40.0, "FDR10")
    assert report.unreadable == [(5, "\t\tRate2: x")]


def test_ibstat_excerpt_starting_mid_record() -> None:
    lines = _text("ibstat_dgx_h100.txt").splitlines()
    start = lines.index("\t\tPhysical state: LinkUp")  # mlx5_0's port, after its State line
    report = parse_ibstat("\n".join(lines[start:]))
    assert report.starts_mid_record
    headless = report.devices[0]
    assert headless.name is None and headless.ports[0].number is None
    assert headless.ports[0].phys_state == "LinkUp" and headless.ports[0].state is None
    assert not report.truncated  # it owes only the fields after the first it shows
    assert [d.name for d in report.devices[1:]] == ["mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4"]


def test_ibstat_cut_anywhere_inside_a_record_says_so() -> None:
    lines = _text("ibstat_dgx_h100.txt").splitlines()
    boundaries = {i for i, line in enumerate(lines) if line.startswith("CA '")}
    for cut in range(1, len(lines)):
        report = parse_ibstat("\n".join(lines[:cut]))
        if cut in boundaries:  # whole devices: nothing in ibstat's output tells how many more there were
            assert not report.truncated, cut
        elif cut == 7:  # one whole device header and nothing else is what `ibstat -s` prints: nothing to judge
            assert report.short_format and not report.ports
        else:
            assert report.truncated, (cut, lines[cut - 1])


def test_ibstat_fewer_ports_than_the_device_has() -> None:
    text = _text("ibstat_effective_speed.txt")
    report = parse_ibstat(text[: text.index("\tPort 2:")])
    assert "port 2 is not listed" in report.truncated


def test_ibstat_a_port_header_lost_in_the_middle() -> None:
    text = _text("ibstat_effective_speed.txt").replace("\tPort 2:\n", "")
    report = parse_ibstat(text)
    assert [p.number for p in report.ports] == [1, None] and "port 2 is not listed" in report.truncated


def test_ibstat_tool_errors() -> None:
    report = parse_ibstat("ibpanic: [14432] main: 'mlx5_0' IB device can't be found: Success\n")
    assert report.diagnostics and not report.devices


def test_ibstatus_fields() -> None:
    report = parse_ibstatus(_text("ibstatus_ndr.txt"))
    assert [(p.device, p.number) for p in report.ports] == [("mlx5_0", 1), ("mlx5_1", 1), ("mlx5_2", 1), ("mlx5_3", 1)]
    first = report.ports[0]
    assert (first.state, first.phys_state, first.link_layer) == ("4: ACTIVE", "5: LinkUp", "InfiniBand")
    assert (first.rate_gbps, first.width, first.speed, first.base_lid, first.sm_lid) == (400.0, 4, "NDR", 97, 1)
    assert (report.ports[1].width, report.ports[1].rate_gbps) == (1, 100.0)
    assert report.ports[2].base_lid == 0xFFFF
    assert not report.truncated and not report.starts_mid_record


def test_ibstatus_old_script() -> None:
    report = parse_ibstatus(_text("ibstatus_old.txt"))
    assert report.diagnostics and "deprecated" in report.diagnostics[0]
    assert [(p.state, p.phys_state, p.width, p.speed, p.link_layer) for p in report.ports] == [
        ("2: INIT", "5: LinkUp", 4, "DDR", None),
        ("1: DOWN", "3: Disabled", 4, None, None),  # old kernels print SDR as `10 Gb/sec (4X)`
    ]
    assert "stops before link_layer" in report.truncated  # old scripts print none: the last record is in doubt


def test_ibstatus_unknown_values() -> None:
    text = "Infiniband device 'x' port 1 status:\n\tdefault gid:\t unknown\n\tbase lid:\t unknown\n"
    text += "\tsm lid:\t\t unknown\n\tstate:\t\t unknown\n\tphys state:\t unknown\n\trate:\t\t unknown\n"
    [port] = parse_ibstatus(text).ports
    assert (port.state, port.phys_state, port.rate_gbps, port.base_lid) == (None, None, None, None)


def test_ibstatus_cut_and_excerpt() -> None:
    lines = _text("ibstatus_ndr.txt").splitlines()
    for cut in range(1, len(lines)):
        report = parse_ibstatus("\n".join(lines[:cut]))
        last = lines[cut - 1].strip()
        if not last or last.startswith("link_layer"):
            assert not report.truncated, cut
        else:
            assert report.truncated, (cut, last)
    excerpt = parse_ibstatus("\n".join(lines[lines.index("\tstate:\t\t 4: ACTIVE") :]))
    assert excerpt.starts_mid_record and excerpt.ports[0].device is None and not excerpt.truncated
    assert parse_ibstatus("Fatal error:  No devices\n").diagnostics == ["Fatal error:  No devices"]


def test_damaged_captures_never_raise() -> None:
    rng = random.Random(7)
    texts = [_text(n) for n in ("ibstat_dgx_h100.txt", "ibstat_mthca_old.txt", "ibstatus_ndr.txt")]
    for _ in range(300):
        chars = list(rng.choice(texts))
        for _ in range(rng.randint(1, 10)):
            at = rng.randrange(len(chars))
            chars.insert(at, rng.choice(["\n", "\t", ":", "'", "9" * 5000, "\x00", "1e400", "Port 9:", "CA 'x'"]))
        text = "".join(chars)
        parse_ibstat(text)
        parse_ibstatus(text)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_random_text_never_raises(text: str) -> None:
    parse_ibstat(text)
    parse_ibstatus(text)
