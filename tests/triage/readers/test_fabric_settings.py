"""Fabric settings through triage: each capture told by content and judged by fabric.settings, as
`gpufleet fabric settings` judges the same capture; what one capture cannot show alone is a note, not a verdict."""

from __future__ import annotations

import io

import pytest

from gpufleet.fabric.settings import judge
from gpufleet.fabric.settings_captures import opensm_from_text, roce_from_mlnx_qos
from gpufleet.model import Severity
from gpufleet.model.fabric_settings import HostFabricSettings
from gpufleet.triage.readers.fabric_settings import HOST
from gpufleet.triage.report import TriageReport
from gpufleet.triage.run import triage_lines
from tests.conftest import CAPTURES

IB = CAPTURES / "infiniband"
EXPECTED = {
    "mlnx_qos_ofed42_dscp_trust.txt": ("mlnx-qos", "healthy", []),
    "mlnx_qos_spiderpool_prio5.txt": ("mlnx-qos", "healthy", []),
    "opensm_3.3.23_create_config.conf": ("opensm-conf", "healthy", []),
    "saquery_smir_ibsim_two_sms.txt": ("saquery-smir", "degraded", ["sm-equal-priority"]),
    "smpquery_portinfo_ibsim_ca.txt": ("smpquery-portinfo", "healthy", []),
    "partitions_opensm_man_examples.conf": ("partitions-conf", "unknown", []),  # read, not judged alone
}
OPENSM = (IB / "opensm_3.3.23_create_config.conf").read_text()
SPIDERPOOL = (IB / "mlnx_qos_spiderpool_prio5.txt").read_text()
PORTINFO = (IB / "smpquery_portinfo_ibsim_ca.txt").read_text()


def _triage(text: str) -> TriageReport:
    return triage_lines(io.StringIO(text), "test")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_capture_is_told_and_judged(name: str) -> None:
    report = _triage((IB / name).read_text())
    fmt, verdict, kinds = EXPECTED[name]
    assert (report.format, report.verdict, [f.code for f in report.findings]) == (fmt, verdict, kinds)


def test_opensm_conf_gets_the_settings_judgement_and_says_what_needs_the_fabric() -> None:
    """The real default dump with sweeps turned off: OpenSM's last line of a key wins, as it does here."""
    report = _triage(OPENSM + "sweep_interval 0\n")
    assert report.format == "opensm-conf"
    want = judge([HostFabricSettings(host=HOST, opensm=opensm_from_text(OPENSM + "sweep_interval 0\n", "test"))])
    assert [(f.code, f.message, f.fix) for f in report.findings] == [(f.kind, f.message, f.fix) for f in want]
    assert [f.code for f in report.findings] == ["opensm-sweep-disabled"]
    # minhop on a fat tree is a finding only with the fabric's shape: said, not guessed
    assert any("minhop (the default)" in n and "--fat-tree" in n for n in report.notes)


def test_mlnx_qos_without_pfc_is_lossy_roce_named_by_the_command_pasted_with_it() -> None:
    off = SPIDERPOOL.replace("enabled     0   0   0   0   0   1", "enabled     0   0   0   0   0   0")
    report = _triage("$ mlnx_qos -i eth0\n" + off)
    assert report.format == "mlnx-qos" and report.verdict == "degraded"
    [finding] = report.findings
    assert finding.code == "roce-no-pfc" and "eth0" in finding.message and "mlnx_qos -i eth0" in finding.fix
    want = judge([HostFabricSettings(host=HOST, roce=[roce_from_mlnx_qos(off, "eth0")])])
    assert [f.message for f in want] == [finding.message]


def test_mlnx_qos_trust_pcp_with_pfc_is_the_untagged_roce_finding() -> None:
    report = _triage(SPIDERPOOL.replace("trust state: dscp", "trust state: pcp"))
    assert [f.code for f in report.findings] == ["roce-trust-pcp"]
    assert any("neither ECN" in n for n in report.notes)


def test_a_port_below_its_capability_is_told_and_an_mtu_mismatch_needs_the_other_ports() -> None:
    capped = PORTINFO.replace("NeighborMTU:.....................2048", "NeighborMTU:.....................1024")
    report = _triage(capped)
    assert report.format == "smpquery-portinfo"
    [finding] = report.findings
    assert finding.code == "ib-mtu-below-capability" and finding.severity is Severity.info
    assert report.verdict == "healthy"  # info: a fact to check, not a fault
    assert any("needs their ports too" in n for n in report.notes)


def test_partitions_conf_is_listed_with_no_verdict() -> None:
    report = _triage((IB / "partitions_opensm_man_examples.conf").read_text())
    assert report.verdict == "unknown" and not report.findings
    assert any(n.startswith("name Storage, pkey 0x0001, ipoib yes, ipoib mtu 4096") for n in report.notes), report.notes


def test_an_empty_smir_and_a_portinfo_without_fields_are_unknown() -> None:
    report = triage_lines(io.StringIO("SMInfoRecord dump:\n\t\tRID\n"), "test")
    assert report.format == "saquery-smir" and report.verdict == "unknown"
    forced = triage_lines(io.StringIO("nothing here\n"), "test", fmt="smpquery-portinfo")
    assert forced.verdict == "unknown" and "NeighborMTU" in " ".join(forced.notes)
