"""ibv_devinfo on real captures: plain and -vv, MLNX_OFED's `Device ports:` line, the verbs speed and width codes,
and what libibverbs writes to stderr when a device is missing."""

from __future__ import annotations

from gpufleet.parsers.infiniband.ibv_devinfo import parse_ibv_devinfo
from tests.conftest import CAPTURES

IB = CAPTURES / "infiniband"


def test_plain_output_of_two_dual_port_hcas() -> None:
    parsed = parse_ibv_devinfo((IB / "ibv_devinfo_mlx4_port2_down.txt").read_text())
    assert [d.name for d in parsed.devices] == ["mlx4_1", "mlx4_0"]
    assert [(p.device, p.number, p.state, p.lid) for p in parsed.ports] == [
        ("mlx4_1", 1, "Active", 22),
        ("mlx4_1", 2, "Down", 0),
        ("mlx4_0", 1, "Active", 32),
        ("mlx4_0", 2, "Down", 0),
    ]
    assert all(p.width is None and p.phys_state is None for p in parsed.ports)  # no -v
    assert parsed.devices[0].port_count == 2 and not parsed.truncated and not parsed.starts_mid_record


def test_verbose_output_reads_width_speed_and_physical_state() -> None:
    parsed = parse_ibv_devinfo((IB / "ibv_devinfo_vv_cx6_port_disabled.txt").read_text())
    up, off = parsed.ports
    assert (up.state, up.phys_state, up.width, up.speed, up.rate_gbps) == ("Active", "LinkUp", 4, "HDR", 200.0)
    assert (off.state, off.phys_state, off.speed, off.rate_gbps) == ("Down", "Disabled", None, None)
    assert parsed.devices[1].node_guid == "0x88e9a4ffff25a463"


def test_speed_codes_and_rates() -> None:
    text = (
        "hca_id:\tmlx5_0\n\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n"
        "\t\t\tactive_width:\t\t{w}\n\t\t\tactive_speed:\t\t{s}\n"
    )
    for width, speed, generation, rate in (
        ("4X (2)", "100.0 Gbps (128)", "NDR", 400.0),
        ("2X (16)", "50.0 Gbps (64)", "HDR", 100.0),
        ("4X (2)", "10.0 Gbps (8)", "FDR10", 40.0),
        ("1X (1)", "25.0 Gbps (32)", "EDR", 25.0),
    ):
        port = parse_ibv_devinfo(text.format(w=width, s=speed)).ports[0]
        assert (port.speed, port.rate_gbps) == (generation, rate)


def test_stderr_lines_and_the_device_list() -> None:
    parsed = parse_ibv_devinfo("IB device 'mlx5_3' wasn't found\n")
    assert parsed.diagnostics == [(None, "IB device 'mlx5_3' wasn't found")] and not parsed.devices
    listed = parse_ibv_devinfo("2 HCAs found:\n\tmlx4_1\n\tmlx4_0\n")
    assert (listed.listed_count, listed.listed) == (2, ["mlx4_1", "mlx4_0"])


def test_an_excerpt_and_a_cut() -> None:
    lines = (IB / "ibv_devinfo_mlx4_port2_down.txt").read_text().splitlines()
    assert parse_ibv_devinfo("\n".join(lines[12:])).starts_mid_record
    assert parse_ibv_devinfo("\n".join(lines[:14])).truncated  # stops after `state:`
