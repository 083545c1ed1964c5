"""InfiniBand outputs through triage: ibstat, ibstatus, perfquery, ibqueryerrors, iblinkinfo and ibnetdiscover, told by
content and judged port by port; every version's counter names and modes, each state combination, saturation, pasted
and truncated inputs, a seeded fuzz, and (where ibsim is installed) real tools against a simulated fabric."""

from __future__ import annotations

import io
import random
import re
import subprocess
from pathlib import Path

import pytest

from gpufleet.parsers.infiniband.diags import scan_iblinkinfo
from gpufleet.triage.formats import read
from gpufleet.triage.readers.common import MAX_FINDINGS
from gpufleet.triage.report import TriageReport
from gpufleet.triage.run import triage_lines
from tests.conftest import CAPTURES
from tests.parsers.infiniband.test_diags_ibsim import Fabric, fabric  # noqa: F401 (a fixture: a simulated fabric)

DATA = Path(__file__).resolve().parent / "data" / "ib"
IBSIM = CAPTURES / "ibsim"

# fixture -> (format, verdict, codes it must find)
EXPECTED: dict[str, tuple[str, str, set[str]]] = {
    "ibstat_dgx_h100.txt": ("ibstat", "faulty", {"Down/Polling", "200 Gb/s"}),
    "ibstat_effective_speed.txt": ("ibstat", "faulty", {"Down/Disabled"}),
    "ibstat_mthca_old.txt": ("ibstat", "faulty", {"Init/LinkUp"}),
    "ibstat_init_no_sm_ibsim.txt": ("ibstat", "faulty", {"Init/LinkUp"}),
    "ibstat_ca_ibsim.txt": ("ibstat", "healthy", set()),
    "ibstat_switch_ibsim.txt": ("ibstat", "healthy", set()),
    "ibstat_one_port_ibsim.txt": ("ibstat", "healthy", set()),
    "ibstat_short_ibsim.txt": ("ibstat", "unknown", set()),
    "ibstatus_ndr.txt": ("ibstatus", "faulty", {"Down/Polling", "1X"}),
    "ibstatus_old.txt": ("ibstatus", "faulty", {"Init/LinkUp", "Down/Disabled"}),
    "ibstatus_healthy.txt": ("ibstatus", "healthy", set()),
    "perfquery_saturated_ibsim.txt": (
        "perfquery",
        "faulty",
        {"SymbolErrorCounter", "LinkDownedCounter", "PortRcvErrors", "PortXmitWait"},
    ),
    "perfquery_integrity_overrun_ibsim.txt": ("perfquery", "degraded", {"ExcessiveBufferOverrunErrors"}),
    "perfquery_xmit_wait_ibsim.txt": ("perfquery", "degraded", {"PortXmitWait"}),
    "perfquery_old_names_2008.txt": (
        "perfquery",
        "faulty",
        {"SymbolErrorCounter", "LinkErrorRecoveryCounter", "LinkDownedCounter", "PortRcvErrors"},
    ),
    "perfquery_old_names_2010.txt": ("perfquery", "degraded", {"PortXmitWait"}),
    "perfquery_x_error_counters.txt": ("perfquery", "faulty", {"LinkDownedCounter", "SymbolErrorCounter"}),
    "perfquery_x_ibsim.txt": ("perfquery", "healthy", set()),
    "perfquery_clean_ibsim.txt": ("perfquery", "healthy", set()),
    "perfquery_all_ports_ibsim.txt": ("perfquery", "healthy", set()),
    "perfquery_dr_path_busy.txt": ("perfquery", "healthy", {"PortXmitData"}),
    "perfquery_rcv_error_details_ibsim.txt": ("perfquery", "healthy", {"PortLocalPhysicalErrors"}),
    "perfquery_failed_ibsim.txt": ("perfquery", "unknown", set()),
    "ibqueryerrors_ibsim.txt": ("ibqueryerrors", "faulty", {"LinkDownedCounter", "PortRcvErrors", "PortXmitWait"}),
    "ibqueryerrors_report_port_ibsim.txt": ("ibqueryerrors", "faulty", {"Down/Polling", "LinkDownedCounter"}),
    "ibqueryerrors_data_ibsim.txt": ("ibqueryerrors", "faulty", {"LinkDownedCounter"}),
    "ibqueryerrors_details_ibsim.txt": ("ibqueryerrors", "faulty", {"PortInactiveDiscards"}),
    "ibqueryerrors_thresholds_ibsim.txt": ("ibqueryerrors", "faulty", {"PortRcvErrors"}),
    "ibqueryerrors_suppressed_ibsim.txt": ("ibqueryerrors", "faulty", {"LinkDownedCounter"}),
    "ibqueryerrors_clean_ibsim.txt": ("ibqueryerrors", "healthy", set()),
    "ibqueryerrors_64bit.txt": (
        "ibqueryerrors",
        "degraded",  # receive errors and link recoveries over their thresholds: warnings, as the fabric rates them
        {"LinkErrorRecoveryCounter", "PortRcvErrors", "PortXmitWait", "PMA query failures"},
    ),
    "ibqueryerrors_old_names_1_5.txt": ("ibqueryerrors", "faulty", {"LinkErrorRecoveryCounter", "PortXmitWait"}),
    "ibqueryerrors_perl_2008.txt": ("ibqueryerrors", "unknown", {"SymbolErrorCounter"}),
    "iblinkinfo_ibsim.txt": ("iblinkinfo", "degraded", {"Down/Polling", "could be 12X", "no link"}),
    "iblinkinfo_line_ibsim.txt": ("iblinkinfo", "degraded", {"Down/Polling", "could be 12X"}),
    "iblinkinfo_switches_only_ibsim.txt": ("iblinkinfo", "degraded", {"Down/Polling"}),
    "iblinkinfo_settings_ibsim.txt": ("iblinkinfo", "degraded", {"could be 12X"}),
    "iblinkinfo_degraded_ibsim.txt": (
        "iblinkinfo",
        "degraded",
        {"could be 12X, 53.125 Gbps", "Active/Disabled", "far end not available"},
    ),
    "iblinkinfo_init_no_sm_ibsim.txt": ("iblinkinfo", "faulty", {"Init/LinkUp"}),
    "iblinkinfo_quantum_ndr.txt": ("iblinkinfo", "degraded", {"could be 4X", "could be 106.25 Gbps", "Down/Disabled"}),
    "iblinkinfo_fdr_states.txt": (
        "iblinkinfo",
        "faulty",
        {"Armed/LinkUp", "Init/LinkUp", "Down/LinkUp", "could be FDR10"},
    ),
    "iblinkinfo_perl_2008.txt": ("iblinkinfo", "degraded", {"could be 4X"}),
    "ibnetdiscover_degraded_ibsim.txt": ("ibnetdiscover", "degraded", {"1X", "EDR"}),
    "ibnetdiscover_ports_degraded_ibsim.txt": ("ibnetdiscover", "degraded", {"1X"}),
    "ibnetdiscover_init_no_sm_ibsim.txt": ("ibnetdiscover", "faulty", {"lid 0"}),
    "ibnetdiscover_grouped_ibsim.txt": ("ibnetdiscover", "healthy", set()),
    "ibnetdiscover_full_ibsim.txt": ("ibnetdiscover", "healthy", set()),
    "ibnetdiscover_ndr_mixed.txt": ("ibnetdiscover", "degraded", {"1X", "EDR"}),
}
# captures of the same fabric the source parsers are tested on
SOURCE_CAPTURES = {
    "iblinkinfo.txt": ("iblinkinfo", "degraded"),
    "ibnetdiscover.txt": ("ibnetdiscover", "healthy"),
    "ibqueryerrors.txt": ("ibqueryerrors", "degraded"),  # 77 receive errors, 1234 symbol errors: warnings
    "perfquery_lid2_port1.txt": ("perfquery", "degraded"),
    "perfquery_x_lid2_port1.txt": ("perfquery", "healthy"),
}
# where a new record starts: a cut just before it leaves whole records, which these formats cannot tell from a
# whole output (ibstat prints no device count, ibstatus and perfquery no record count)
RECORD_STARTS = {
    "ibstat": re.compile(r"^(?:CA|Switch|Router):? '"),
    "ibstatus": re.compile(r"^Infiniband device "),
    "perfquery": re.compile(r"^# Port"),
}


def _triage(text: str) -> TriageReport:
    return triage_lines(io.StringIO(text), "test")


def _read(fmt: str, text: str) -> TriageReport:
    return read(fmt, iter(text.splitlines()), "test")


def _fixtures() -> list[tuple[str, str]]:
    out = [(name, (DATA / name).read_text()) for name in sorted(EXPECTED)]
    return out + [(name, (IBSIM / name).read_text()) for name in sorted(SOURCE_CAPTURES)]


def test_every_fixture_is_listed() -> None:
    assert {p.name for p in DATA.glob("*.txt")} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixtures(name: str) -> None:
    report = _triage((DATA / name).read_text())
    fmt, verdict, codes = EXPECTED[name]
    assert (report.format, report.verdict) == (fmt, verdict), report.notes
    assert codes <= {f.code for f in report.findings}


@pytest.mark.parametrize("name", sorted(SOURCE_CAPTURES))
def test_the_source_parsers_captures(name: str) -> None:
    report = _triage((IBSIM / name).read_text())
    assert (report.format, report.verdict) == SOURCE_CAPTURES[name]


def test_findings_name_the_port() -> None:
    ibstat = _triage((DATA / "ibstat_dgx_h100.txt").read_text())
    [down] = [f for f in ibstat.findings if f.severity == "critical"]
    assert down.entity == "mlx5_2 port 1 (GUID 0x946dae03005e4f18, LID 65535)"
    assert down.evidence[:3] == ["\tPort 1:", "\t\tState: Down", "\t\tPhysical state: Polling"]
    links = _triage((DATA / "iblinkinfo_quantum_ndr.txt").read_text())
    narrow = next(f for f in links.findings if f.code == "could be 4X")
    assert narrow.entity == '"gpu-node-017 mlx5_1" port 1 (GUID 0xb83fd20300a4c1f4, LID 98)'
    assert len(narrow.evidence) == 2  # the cable seen from both ends is one finding quoting both lines
    errors = _triage((DATA / "ibqueryerrors_ibsim.txt").read_text())
    node01 = next(f for f in errors.findings if f.code == "LinkDownedCounter")
    assert node01.entity == '"node01 mlx5_0" port 1 (GUID 0x100001)'
    assert node01.evidence == ["   GUID 0x100001 port 1: [SymbolErrorCounter == 65535] [LinkDownedCounter == 255] "
                               "[PortRcvErrors == 77] [PortXmitWait == 4294967295]"]  # fmt: skip
    status = _triage((DATA / "ibstatus_ndr.txt").read_text())
    assert (
        next(f for f in status.findings if f.code == "1X").entity == "mlx5_1 port 1 (GUID 0x946dae03005e4f14, LID 98)"
    )
    counters = _triage((DATA / "perfquery_saturated_ibsim.txt").read_text())
    assert {f.entity for f in counters.findings} == {"port 1 (LID 2)"}
    assert next(f for f in counters.findings if f.code == "PortRcvErrors").evidence == [
        "PortRcvErrors:...................77"
    ]


def test_old_and_new_counter_names_are_judged_alike() -> None:
    old = (DATA / "perfquery_old_names_2008.txt").read_text()
    renamed = old
    for before, after in (
        ("SymbolErrors:", "SymbolErrorCounter:"),
        ("LinkRecovers:", "LinkErrorRecoveryCounter:"),
        ("LinkDowned:", "LinkDownedCounter:"),
        ("RcvErrors:", "PortRcvErrors:"),
        ("XmtDiscards:", "PortXmitDiscards:"),
    ):
        renamed = renamed.replace(before, after)

    def judged(text: str) -> set[tuple[str, str]]:
        return {(f.code, f.severity) for f in _read("perfquery", text).findings}

    assert judged(old) == judged(renamed)
    assert ("LinkErrorRecoveryCounter", "warning") in judged(old)  # LinkRecovers == 255: saturated, 8 bits
    queried = _read("ibqueryerrors", (DATA / "ibqueryerrors_old_names_1_5.txt").read_text())
    assert {"SymbolErrorCounter", "LinkErrorRecoveryCounter", "LinkDownedCounter"} <= {f.code for f in queried.findings}


def test_a_saturated_counter_says_at_least() -> None:
    report = _triage((DATA / "perfquery_saturated_ibsim.txt").read_text())
    symbol = next(f for f in report.findings if f.code == "SymbolErrorCounter")
    assert symbol.severity == "warning" and "at least 65535" in symbol.message and "16-bit" in symbol.message
    wide = _triage((DATA / "ibqueryerrors_64bit.txt").read_text())  # 64-bit values: no saturation
    assert not any("at least" in f.message for f in wide.findings)
    overrun = _triage((DATA / "perfquery_integrity_overrun_ibsim.txt").read_text())
    [four_bits] = [f for f in overrun.findings if f.code == "ExcessiveBufferOverrunErrors"]
    assert "at least 15" in four_bits.message and "4-bit" in four_bits.message


def test_without_a_time_window_symbol_errors_are_a_count() -> None:
    report = _triage((DATA / "perfquery_saturated_ibsim.txt").read_text())
    assert any("not bit error rate" in note for note in report.notes)


def _ibstat(state: str, phys: str, rate: str = "400") -> str:
    return (
        "CA 'mlx5_0'\n\tCA type: MT4129\n\tNumber of ports: 1\n\tFirmware version: 28.39.1002\n\tHardware version: 0\n"
        "\tNode GUID: 0x946dae03005e4f10\n\tSystem image GUID: 0x946dae03005e4f10\n\tPort 1:\n"
        f"\t\tState: {state}\n\t\tPhysical state: {phys}\n\t\tRate: {rate}\n\t\tBase lid: 97\n\t\tLMC: 0\n"
        "\t\tSM lid: 1\n\t\tCapability mask: 0xa751e848\n\t\tPort GUID: 0x946dae03005e4f10\n"
        "\t\tLink layer: InfiniBand\n"
    )


def _ibstatus(state: str, phys: str, rate: str = "400 Gb/sec (4X NDR)") -> str:
    return (
        "Infiniband device 'mlx5_0' port 1 status:\n\tdefault gid:\t fe80:0000:0000:0000:946d:ae03:005e:4f10\n"
        f"\tbase lid:\t 0x61\n\tsm lid:\t\t 0x1\n\tstate:\t\t {state}\n\tphys state:\t {phys}\n\trate:\t\t {rate}\n"
        "\tlink_layer:\t InfiniBand\n\n"
    )


def _iblinkinfo(state: str, phys: str, node: str = "CA") -> str:
    """One port in iblinkinfo's format; an up port comes with its far end, as a whole output shows both."""
    up = state != "Down"
    link = f"( 4X        106.25 Gbps {state:>6}/{phys:>8})" if up else f"(              Down/{phys:>8})"
    ca_far, leaf_far = '      12   33[  ] "leaf" ( )', '      97    1[  ] "gpu mlx5_0" ( )'
    down_far = '           [  ] "" ( )'
    ca = f"CA: gpu mlx5_0:\n      0x946dae03005e4f10     97    1[  ] =={link}==>  {ca_far if up else down_far}\n"
    leaf = f"Switch: 0x946dae0300f1a2b0 leaf:\n          12   33[  ] =={link}==>  {leaf_far if up else down_far}\n"
    if node == "CA":
        return ca + (leaf if up else "")
    return leaf


@pytest.mark.parametrize(
    ("ibstat", "ibstatus", "links", "verdict"),
    [
        (("Active", "LinkUp"), ("4: ACTIVE", "5: LinkUp"), ("Active", "LinkUp"), "healthy"),
        (("Down", "Polling"), ("1: DOWN", "2: Polling"), ("Down", "Polling"), "faulty"),  # no link
        (("Down", "LinkUp"), ("1: DOWN", "5: LinkUp"), ("Down", "LinkUp"), "faulty"),  # SM or configuration
        (("Down", "Disabled"), ("1: DOWN", "3: Disabled"), ("Down", "Disabled"), "faulty"),
        (("Initializing", "LinkUp"), ("2: INIT", "5: LinkUp"), ("Initialize", "LinkUp"), "faulty"),  # SM not done
        (("Armed", "LinkUp"), ("3: ARMED", "5: LinkUp"), ("Armed", "LinkUp"), "faulty"),
        (
            ("Active", "LinkErrorRecovery"),
            ("4: ACTIVE", "6: LinkErrorRecovery"),
            ("Active", "LinkErrorRecovery"),
            "degraded",
        ),
    ],
)
def test_each_state_combination_in_each_host_format(
    ibstat: tuple[str, str], ibstatus: tuple[str, str], links: tuple[str, str], verdict: str
) -> None:
    assert _read("ibstat", _ibstat(*ibstat)).verdict == verdict
    assert _read("ibstatus", _ibstatus(*ibstatus)).verdict == verdict
    assert _read("iblinkinfo", _iblinkinfo(*links)).verdict == verdict  # an HCA's port: a far end is expected


def test_a_switch_port_without_link_is_unused_unless_its_peers_say_otherwise() -> None:
    assert _read("iblinkinfo", _iblinkinfo("Down", "Polling", node="Switch")).verdict == "healthy"
    assert _read("iblinkinfo", _iblinkinfo("Down", "LinkUp", node="Switch")).verdict == "faulty"
    report = _read("iblinkinfo", (DATA / "iblinkinfo_ibsim.txt").read_text())
    [uplink] = [f for f in report.findings if f.code == "Down/Polling"]
    assert uplink.severity == "warning" and '"leaf1" port 35' in uplink.entity  # up on leaf2..leaf4
    assert "other switches named like this one" in uplink.message


def test_rates() -> None:
    assert _read("ibstatus", _ibstatus("4: ACTIVE", "5: LinkUp", "100 Gb/sec (1X NDR)")).verdict == "degraded"
    assert _read("ibstatus", _ibstatus("4: ACTIVE", "5: LinkUp", "200 Gb/sec (2X NDR)")).verdict == "healthy"
    report = _read("ibstat", (DATA / "ibstat_dgx_h100.txt").read_text())
    slower = next(f for f in report.findings if f.code == "200 Gb/s")
    assert slower.severity == "info" and "mlx5_3" in slower.entity  # the Ethernet port at 200 is not compared


def _pasted(text: str, rng: random.Random) -> str:
    """As someone pastes it: a prompt, quoting, CRLF, an author's marker, a code fence, an elision line."""
    out = ["$ sudo ibtool --all"]
    for line in text.splitlines():
        if rng.random() < 0.03:
            out.append("...")
        out.append(line + ("   <=== look" if line.strip() and rng.random() < 0.05 else ""))
    quoted = [f"> {line}" for line in out] if rng.random() < 0.5 else out
    sep = "\r\n" if rng.random() < 0.5 else "\n"
    return "```\n" + sep.join(quoted) + sep + "```\n"


@pytest.mark.parametrize(("name", "text"), _fixtures(), ids=[name for name, _ in _fixtures()])
def test_pasting_does_not_change_the_verdict(name: str, text: str) -> None:
    rng = random.Random(name)
    whole = _triage(text)
    for _ in range(3):
        pasted = _triage(_pasted(text, rng))
        assert (pasted.format, pasted.verdict) == (whole.format, whole.verdict)


def _cut_is_blind(fmt: str, lines: list[str], cut: int) -> bool:
    """A cut the format cannot reveal: just before a record in formats that print no count of their records, or
    inside a switch's list of ports in iblinkinfo, which never prints how many ports a switch has."""
    rest = [line for line in lines[cut:] if line.strip()]
    if not rest:
        return False
    starts = RECORD_STARTS.get(fmt)
    if starts is not None:
        return bool(starts.match(rest[0]))
    if fmt == "iblinkinfo":
        if re.match(r"^(?:Switch|CA|Router):? ", rest[0]):
            return True
        kept = scan_iblinkinfo("\n".join(lines[:cut])).links
        following = scan_iblinkinfo(rest[0]).links
        return bool(kept and following and kept[-1].node_type == "Switch" and following[0].lid == kept[-1].lid)
    return False


@pytest.mark.parametrize(("name", "text"), _fixtures(), ids=[name for name, _ in _fixtures()])
def test_a_cut_never_turns_a_fault_healthy(name: str, text: str) -> None:
    whole = _triage(text)
    lines = text.splitlines()
    for cut in range(1, len(lines)):
        report = read(whole.format, iter(lines[:cut]), "cut")
        if whole.verdict in ("faulty", "degraded") and report.verdict == "healthy":
            assert _cut_is_blind(whole.format, lines, cut), (cut, lines[cut - 1], report.notes)


def test_truncation_is_said() -> None:
    text = (DATA / "ibqueryerrors_ibsim.txt").read_text()
    cut = _read("ibqueryerrors", text[: text.index("## Summary")])
    assert cut.verdict == "faulty" and any("no `## Summary`" in n for n in cut.notes)
    links = (DATA / "iblinkinfo_quantum_ndr.txt").read_text().splitlines()
    partial = _read("iblinkinfo", "\n".join(links[:6]))  # the CAs, not the switches their links lead to
    assert partial.complete and any("not in the input" in n and "only the ports shown" in n for n in partial.notes)
    topology = (DATA / "ibnetdiscover_grouped_ibsim.txt").read_text().splitlines()
    half = _read("ibnetdiscover", "\n".join(topology[: len(topology) // 2]))
    assert half.verdict == "unknown" and any("cut short" in n for n in half.notes)
    record = (DATA / "ibstatus_ndr.txt").read_text().splitlines()
    assert _read("ibstatus", "\n".join(record[:4])).verdict == "unknown"


def test_an_ibnetdiscover_excerpt_is_judged_and_a_cut_dump_is_not() -> None:
    lines = (DATA / "ibnetdiscover_grouped_ibsim.txt").read_text().splitlines()
    body = [line for line in lines if not line.startswith("#")]  # nodes picked out: no `# Topology file` header
    starts = [i for i, line in enumerate(body) if line.startswith(("Switch", "Ca", "Rt"))]
    excerpt = _read("ibnetdiscover", "\n".join(body[starts[0] : starts[2]]))
    assert (excerpt.verdict, excerpt.complete) == ("healthy", True)
    assert any("taken for an excerpt" in note and "only the links shown" in note for note in excerpt.notes)
    record_cut = _read("ibnetdiscover", "\n".join(body[starts[0] : starts[2] + 1]))  # a node header, no ports
    assert record_cut.verdict == "unknown" and any("record has no port lines: cut short" in n for n in record_cut.notes)
    dump_cut = _read("ibnetdiscover", "\n".join(lines[: len(lines) // 2]))  # the header: a whole dump, cut
    assert dump_cut.verdict == "unknown" and any("a whole dump, cut short" in n for n in dump_cut.notes)


def test_an_excerpt_starting_mid_record_is_not_called_healthy() -> None:
    lines = (DATA / "ibstatus_healthy.txt").read_text().splitlines()
    report = _read("ibstatus", "\n".join(lines[4:]))
    assert report.verdict == "unknown" and any("starts inside a record" in n for n in report.notes)


def test_failed_queries_are_unknown_with_the_tools_words() -> None:
    report = _triage((DATA / "perfquery_failed_ibsim.txt").read_text())
    assert report.verdict == "unknown" and any("classportinfo" in n for n in report.notes)


def test_a_far_end_missing_from_every_link_is_not_called_healthy() -> None:
    lines = [
        re.sub(r"\)==>.*$", ")", line) for line in (DATA / "iblinkinfo_settings_ibsim.txt").read_text().splitlines()
    ]
    report = _read("iblinkinfo", "\n".join(lines))
    assert report.verdict == "unknown" and any("far end" in n for n in report.notes)


def test_many_findings_are_capped() -> None:
    lines = ["Switch: 0x946dae0300f1a2b0 leaf:"]
    lines += [f"          12 {p:4d}[  ] ==(                Down/Disabled)==>             [  ] \"\" ( )"
              for p in range(1, 2 * MAX_FINDINGS)]  # fmt: skip
    report = _read("iblinkinfo", "\n".join(lines))
    assert len(report.findings) == MAX_FINDINGS and any("more findings not listed" in n for n in report.notes)


@pytest.mark.parametrize("fmt", ["ibstat", "ibstatus", "perfquery", "ibqueryerrors", "iblinkinfo", "ibnetdiscover"])
@pytest.mark.parametrize(
    "text",
    [
        "",
        "x",
        "\x00\x01\x02\xff" * 100,
        "9" * 5000,
        "Rate: " + "9" * 5000 + "\nState: Active\n",
        "SymbolErrorCounter:........" + "9" * 5000 + "\n",
        "   GUID 0x1 port 1: [SymbolErrorCounter == " + "9" * 5000 + "]\n",
        "   GUID 0x1 port 1: [SymbolErrorCounter == 1e400]\n",
        "      4 " + "9" * 5000 + '[  ] ==( 4X 1e400 Gbps Active/ LinkUp)==>  1 1[ ] "x" ( )\n',
        "==(" * 20000,
        "[" * 10000 + "]" * 10000,
        '[1]\t"S-1"[1]\t\t# "' + '"' * 5000 + '" lid 1 4xHDR\n',
        "Port 1:\n" * 1000,
    ],
)
def test_hostile_inputs_never_escape(fmt: str, text: str) -> None:
    report = _read(fmt, text)
    assert report.verdict in ("healthy", "degraded", "faulty", "unknown")


@pytest.mark.parametrize(("name", "text"), _fixtures(), ids=[name for name, _ in _fixtures()])
def test_seeded_fuzz(name: str, text: str) -> None:
    """Random byte damage and dropped lines: an answer, never an exception."""
    rng = random.Random(f"ib-{name}")
    fmt = _triage(text).format
    lines = text.splitlines()
    for _ in range(40):
        chars = list(text)
        for _ in range(rng.randint(1, 10)):
            at = rng.randrange(len(chars))
            action = rng.random()
            if action < 0.4:
                del chars[at : at + rng.randint(1, 30)]
            elif action < 0.8:
                chars.insert(at, rng.choice(["\n", "\t", ":", "[", "]", "(", ")", "==>", "0x", "\x00", "\ufffd",
                                             "9" * 40, "-", "/", '"', "'"]))  # fmt: skip
            else:
                chars[at] = chr(rng.randrange(1, 0x2FF))
        _read(fmt, "".join(chars))
        dropped = [line for line in lines if rng.random() > 0.1]
        _read(fmt, "\n".join(dropped))
        _triage("\n".join(dropped))


# -- real tools against a simulated fabric -----------------------------------------------------------------------
def _sim_tool(fabric: Fabric, *args: str, host: str | None = None) -> str:  # noqa: F811
    env = {**fabric.env, **({"SIM_HOST": host} if host else {})}
    done = subprocess.run(list(args), cwd=fabric.work, env=env, capture_output=True, text=True, timeout=20, check=False)
    return done.stdout


@pytest.mark.real
def test_real_tools_on_a_simulated_fabric(fabric: Fabric) -> None:  # noqa: F811
    """ibstat of an HCA, perfquery and ibqueryerrors after errors are set on its port, iblinkinfo after an uplink
    is unlinked: each triaged as a person would paste it."""
    ibstat = _triage(_sim_tool(fabric, "ibstat", host="node02 mlx5_0"))
    assert (ibstat.format, ibstat.verdict) == ("ibstat", "healthy")
    for counter in ("SymbolErrorCounter=1234", "PortRcvErrors=77", "LinkDownedCounter=3"):
        fabric.sim(f'PerformanceSet "node02 mlx5_0"[1] PortCounters.{counter}', "has been set")
    topology = _triage(_sim_tool(fabric, "ibnetdiscover"))
    assert (topology.format, topology.verdict) == ("ibnetdiscover", "healthy")
    node02 = re.search(r'"node02 mlx5_0" lid (\d+)', _sim_tool(fabric, "ibnetdiscover"))
    assert node02 is not None
    counters = _triage(_sim_tool(fabric, "perfquery", node02.group(1), "1"))
    assert (counters.format, counters.verdict) == ("perfquery", "degraded")  # warnings over their thresholds
    assert {"SymbolErrorCounter", "PortRcvErrors", "LinkDownedCounter"} <= {f.code for f in counters.findings}
    errors = _triage(_sim_tool(fabric, "ibqueryerrors"))
    assert (errors.format, errors.verdict) == ("ibqueryerrors", "degraded")
    assert any(f.code == "PortRcvErrors" and "node02 mlx5_0" in f.entity for f in errors.findings)
    fabric.sim('Unlink "leaf2"[35]', "")
    for _ in range(100):
        links = _triage(_sim_tool(fabric, "iblinkinfo"))
        if any(f.code == "Down/Polling" and '"leaf2" port 35' in f.entity for f in links.findings):
            break
    assert (links.format, links.verdict) == ("iblinkinfo", "degraded")
    assert any(f.code == "Down/Polling" and '"leaf2" port 35' in f.entity for f in links.findings)


@pytest.mark.parametrize(
    ("text", "fmt", "entity"),
    [
        ("ibpanic: [1323906] main: stat of IB device 'mlx5_8' failed: No such file or directory\n", "ibstat", "mlx5_8"),
        ("Fatal error:  device '*': sys files not found (/sys/class/infiniband/*/ports)\n", "ibstatus", "host"),
    ],
)
def test_a_vanished_hca_is_faulty_and_the_finding_names_it(text: str, fmt: str, entity: str) -> None:
    report = _triage(text)
    assert (report.format, report.verdict) == (fmt, "faulty")
    assert [(f.code, f.entity) for f in report.findings] == [("HCA missing", entity)]


def test_a_gap_in_the_hca_numbering_is_said() -> None:
    text = (DATA / "ibstat_dgx_h100.txt").read_text()
    names = re.findall(r"^CA '(mlx5_\d+)'", text, re.MULTILINE)
    gone = names[len(names) // 2]
    lines, skip = [], False
    for line in text.splitlines():
        if line.startswith("CA '"):
            skip = line == f"CA '{gone}'"
        if not skip:
            lines.append(line)
    report = _triage("\n".join(lines))
    assert any(f.code == "HCA missing" and f.entity == gone for f in report.findings), [f.code for f in report.findings]
