"""ibdiagnet through triage: judged per stage, Port Counters entries and db_csv counters by the port rules."""

from __future__ import annotations

import io

from gpufleet.triage.report import TriageReport
from gpufleet.triage.run import triage_lines
from tests.conftest import CAPTURES
from tests.parsers.infiniband.test_ibdiagnet import STAGES

IB = CAPTURES / "infiniband"


def _triage(text: str) -> TriageReport:
    return triage_lines(io.StringIO(text), "test")


def test_speed_width_errors_are_degraded_and_info_stages_listed() -> None:
    report = _triage((IB / "ibdiagnet_summary_speed_width_errors.txt").read_text())
    assert (report.format, report.verdict) == ("ibdiagnet", "degraded")
    assert {f.code for f in report.findings} == {
        "Speed / Width checks: 15 error(s)",
        "Discovery: 3 warning(s)",
        "Nodes Information: 16 warning(s)",
    }


def test_discovery_warnings_alone_are_healthy() -> None:
    report = _triage((IB / "ibdiagnet_summary_ufm_ar_healthy.txt").read_text())
    assert (report.format, report.verdict) == ("ibdiagnet", "healthy")


def test_errors_in_a_stage_the_fabric_needs_are_faulty() -> None:
    text = (IB / "ibdiagnet_summary_ufm_ar_healthy.txt").read_text() + "-I- Links Check               0          2\n"
    assert _triage(text).verdict == "faulty"


def test_port_counter_entries_are_judged_as_perfquery_judges_them() -> None:
    report = _triage(STAGES)
    assert report.format == "ibdiagnet"
    codes = {f.code: f for f in report.findings}
    assert {"SymbolErrorCounter", "LinkDownedCounter"} <= set(codes)
    assert codes["SymbolErrorCounter"].entity == "port 9 (GUID 0x248a0703008b3f5c, LID 3)"
    perfquery = _triage("# Port counters: Lid 3 port 9 (CapMask: 0x1400)\nSymbolErrorCounter:..............52\n"
                        "LinkDownedCounter:...............3\n")  # fmt: skip
    both = ("SymbolErrorCounter", "LinkDownedCounter")
    assert {f.code: f.severity for f in perfquery.findings} == {c: codes[c].severity for c in both}


def test_db_csv_counters_and_down_links() -> None:
    text = (
        'START_NODES\nNodeDesc,NumPorts,NodeType,NodeGUID\n"gpu-node-3 mlx5_0",1,1,0xb8599f0300e4a2c0\nEND_NODES\n'
        "START_PORTS\nNodeGuid,PortGuid,PortNum,PortState,PortPhyState\n0xb8599f0300e4a2c0,0xb8599f0300e4a2c0,1,1,2\n"
        "END_PORTS\nSTART_LINKS\nNodeGuid1,PortNum1,NodeGuid2,PortNum2\n0xb8599f0300e4a2c0,1,0x946dae0300f1a2b0,7\n"
        "END_LINKS\nSTART_PM_INFO\nNodeGUID,PortGUID,PortNumber,SymbolErrorCounter,LinkDownedCounter\n"
        "0xb8599f0300e4a2c0,0xb8599f0300e4a2c0,1,12000,0\nEND_PM_INFO\n"
    )
    report = _triage(text)
    assert report.format == "ibdiagnet" and report.verdict == "faulty"
    assert {(f.code, f.entity.split(" (")[0]) for f in report.findings} == {
        ("Down/Polling", '"gpu-node-3 mlx5_0" port 1'),
        ("SymbolErrorCounter", '"gpu-node-3 mlx5_0" port 1'),
    }


def test_a_cut_db_csv_is_not_healthy() -> None:
    report = _triage("START_PM_INFO\nNodeGUID,PortGUID,PortNumber,SymbolErrorCounter\n0x1,0x1,1,0\n")
    assert report.verdict == "unknown"


def test_a_run_that_fails_before_its_stages_is_faulty() -> None:
    text = (
        "Loading IBDIAGNET from: /usr/lib64/ibdiagnet1.5.7\n-W- Topology file is not specified.\n"
        "-E- Failed to find a local port in the state Active\n"
    )
    report = _triage(text)
    assert (report.format, report.verdict) == ("ibdiagnet", "faulty")
    assert report.findings[0].code == "ibdiagnet failed" and not any("not ibdiagnet output" in n for n in report.notes)
