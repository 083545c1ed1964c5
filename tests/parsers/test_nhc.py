"""aznhc .health.log lines (corpus capture from the project's README)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpufleet.errors import ParseError
from gpufleet.health.xid_policy import classify
from gpufleet.parsers.nhc import parse_health_log


def test_health_log(corpus: Path) -> None:
    nodes = parse_health_log((corpus / "aznhc_health_log_real.txt").read_text())
    assert len(nodes) == 8
    assert [n.node for n in nodes if n.healthy] == ["mynode-042"]
    by_node = {n.node: n for n in nodes}
    xid = by_node["mynode-066"]
    assert xid.check == "check_gpu_xid"
    [event] = xid.kernel_events
    assert (event.xid, event.pci, event.host, event.uptime_s) == (
        119,
        "0002:00:00",
        "mynode-066",
        3606.832215,
    )
    assert classify(event).action == "RESET_GPU"
    assert by_node["mynode-273"].check == "check_hw_ib" and "mlx5_ib7:1" in by_node["mynode-273"].message
    assert by_node["mynode-084"].check is None and by_node["mynode-084"].message.startswith("Bandwidth is low")
    assert by_node["mynode-108"].message == "No results reported"
    assert all(n.kernel_events == [] for n in nodes if n.node != "mynode-066")


def test_bad_health_lines() -> None:
    with pytest.raises(ParseError, match=re.escape("node | status")):
        parse_health_log("no separator here\n")
    with pytest.raises(ParseError, match="neither Healthy nor ERROR"):
        parse_health_log("n1 | Sick\n")
