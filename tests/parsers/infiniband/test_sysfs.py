"""An HCA's sysfs directory as a snapshot of `path = value` lines (a corpus capture): counters under the catalog's
names, and a corrupted line named by file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.catalog import load_ib_counters
from gpufleet.errors import ParseError
from gpufleet.parsers.infiniband.sysfs import parse_sysfs_snapshot


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
