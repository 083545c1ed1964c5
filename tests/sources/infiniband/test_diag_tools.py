"""Running the diag tools: a tool that hangs is stopped at its timeout, a missing one is one clear error, a failed
poll still reports what the other tools found; and the poll on the wire and back."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import msgspec
import pytest

from gpufleet.agent.fabric import poll_subnet
from gpufleet.fabric.discover import from_ibnetdiscover
from gpufleet.fabric.graph import End
from gpufleet.fabric.report import graph_from_report, readings_from_report, report_from_graph
from gpufleet.model.observe import FabricReport
from gpufleet.parsers.infiniband.diags import parse_ibnetdiscover, parse_sminfo
from gpufleet.sources.infiniband.diag_tools import FabricToolError, FabricTools
from tests.conftest import CAPTURES

CAPTURES = CAPTURES / "ibsim"


def _fake_tools(tmp_path: Path, scripts: dict[str, str]) -> dict[str, str]:
    """A PATH holding stand-ins for the tools (shell scripts printing captured output, or hanging)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in scripts.items():
        path = bin_dir / name
        path.write_text("#!/bin/sh\n" + body + "\n")
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"}


def test_a_hung_tool_is_stopped_at_its_timeout(tmp_path: Path) -> None:
    env = _fake_tools(tmp_path, {"ibnetdiscover": "sleep 30"})
    tools = FabricTools(timeout_s=0.5, env=env)
    with pytest.raises(FabricToolError) as caught:
        tools.run("ibnetdiscover")
    assert "did not finish in 0.5 s" in caught.value.message and "sminfo" in (caught.value.fix or "")


def test_a_missing_tool_names_the_package(tmp_path: Path) -> None:
    tools = FabricTools(env={**os.environ, "PATH": str(tmp_path)})
    with pytest.raises(FabricToolError) as caught:
        tools.run("ibnetdiscover")
    assert "infiniband-diags" in (caught.value.fix or "")


def test_a_poll_with_a_failing_counter_sweep_still_reports_the_topology(tmp_path: Path) -> None:
    env = _fake_tools(
        tmp_path,
        {
            "ibnetdiscover": f"cat {CAPTURES / 'ibnetdiscover.txt'}",
            "iblinkinfo": f"cat {CAPTURES / 'iblinkinfo.txt'}",
            "ibqueryerrors": "echo 'ibwarn: [1] mad_rpc_open_port: cannot open UMAD port' >&2; exit 255",
            "sminfo": "echo 'sminfo: sm lid 1 sm guid 0x200000, activity count 546 priority 0 state 3 SMINFO_MASTER'",
        },
    )
    report = poll_subnet(FabricTools(ca="mlx5_0", port=1, env=env), poll_s=30.0, now=lambda: 1_800_000_000.0)
    assert report.subnet == "mlx5_0/1" and len(report.links) == 19 and report.sm is not None
    assert report.sm.activity == 546 and report.sm.state == "SMINFO_MASTER"
    assert len(report.errors) == 1 and "exit 255" in report.errors[0] and "UMAD" in report.errors[0]


def test_a_foreign_output_is_an_error_of_the_poll_not_a_crash(tmp_path: Path) -> None:
    env = _fake_tools(tmp_path, {"ibnetdiscover": "echo '<html>proxy error</html>'"})
    report = poll_subnet(FabricTools(env=env))
    assert not report.links and report.errors and "not an ibnetdiscover line" in report.errors[0]


def test_sminfo() -> None:
    sm = parse_sminfo("sminfo: sm lid 1 sm guid 0x200000, activity count 532 priority 0 state 3 SMINFO_MASTER")
    assert sm is not None and (sm.lid, sm.guid, sm.activity) == (1, "0x0000000000200000", 532)
    assert parse_sminfo("ibwarn: sminfo: query failed") is None


def test_ibqueryerrors_counters_land_on_the_graphs_ports(tmp_path: Path) -> None:
    env = _fake_tools(
        tmp_path,
        {
            "ibnetdiscover": f"cat {CAPTURES / 'ibnetdiscover.txt'}",
            "iblinkinfo": f"cat {CAPTURES / 'iblinkinfo.txt'}",
            "ibqueryerrors": f"cat {CAPTURES / 'ibqueryerrors.txt'}; exit 1",
            "sminfo": "echo 'sminfo: sm lid 1 sm guid 0x200000, activity count 1 priority 0 state 3 SMINFO_MASTER'",
        },
    )
    report = poll_subnet(FabricTools(env=env))
    assert not report.errors
    assert readings_from_report(report)[End("node01/mlx5_0", 1)]["SymbolErrorCounter"] == 1234


def test_a_report_survives_the_wire_both_ways() -> None:
    graph = from_ibnetdiscover(parse_ibnetdiscover((CAPTURES / "ibnetdiscover.txt").read_text()))
    counters = {End("leaf1", 1): {"SymbolErrorCounter": 7, "PortXmitData": 2**40}}
    report = report_from_graph(graph, subnet="default", time=1_800_000_000.0, counters=counters)
    back = msgspec.json.decode(msgspec.json.encode(report), type=FabricReport)
    again = graph_from_report(back)
    assert {link.key for link in again.links} == {link.key for link in graph.links}
    assert again.nodes["leaf1"].lid == 4 and again.idle_ports == graph.idle_ports
    assert readings_from_report(back) == counters


def test_a_report_whose_counters_do_not_line_up_is_refused() -> None:
    body = {"subnet": "s", "time": 1.0, "counter_names": ["A", "B"], "counters": [["leaf1", 1, [1]]]}
    with pytest.raises(msgspec.ValidationError, match="1 values for 2 names"):
        msgspec.convert(body, FabricReport)
