from pathlib import Path

from gpufleet.parsers.infiniband.smpquery import parse_portinfo

CAPTURES = Path(__file__).parents[2] / "captures" / "infiniband"


def test_portinfo_of_an_hca_port_on_ibsim() -> None:
    info = parse_portinfo((CAPTURES / "smpquery_portinfo_ibsim_ca.txt").read_text())
    assert info is not None
    assert (info.lid, info.port, info.link_state, info.neighbor_mtu, info.mtu_cap) == (12, 2, "Active", 2048, 2048)


def test_not_a_portinfo() -> None:
    assert parse_portinfo("smpquery: iberror: failed: can't resolve destination port 0x100002\n") is None
