"""One IB port judged: state and physical state, width and speed, counters against thresholds, a BER, saturation."""

from __future__ import annotations

import pytest

from gpufleet.catalog import load_ib_counters
from gpufleet.catalog.ib_counters import ib_counter_name
from gpufleet.health.ib_ports import (
    PortReading,
    describe_port,
    judge_counter,
    judge_counters,
    judge_link,
    judge_port,
    judge_state,
    lane_count,
    link_rate_gbps,
    normalise_phys_state,
    normalise_state,
    speed_generation,
    worst,
)
from gpufleet.health.symbol_errors import SymbolErrorBudget
from gpufleet.health.thresholds import BerWindow, SymbolErrors


@pytest.mark.parametrize(
    ("printed", "state"),
    [
        ("Active", "Active"),
        ("ACTIVE", "Active"),
        ("4: ACTIVE", "Active"),
        ("Initialize", "Init"),  # iblinkinfo (libibmad)
        ("Initializing", "Init"),  # ibstat
        ("2: INIT", "Init"),  # sysfs, ibstatus
        ("Armed", "Armed"),
        ("1: DOWN", "Down"),
        ("5: ACTIVE_DEFER", "ActiveDefer"),
        ("NoChange", "NoChange"),
        ("???", None),
        ("?(7)", None),
        ("4: ", "Active"),  # a code without a name
    ],
)
def test_state_spellings(printed: str, state: str | None) -> None:
    assert normalise_state(printed) == state


@pytest.mark.parametrize(
    ("printed", "phys"),
    [
        ("LinkUp", "LinkUp"),
        ("5: LinkUp", "LinkUp"),
        ("Polling", "Polling"),
        ("3: Disabled", "Disabled"),
        ("7: Phy Test", "PhyTest"),  # sysfs spells it with a space
        ("PhyTest", "PhyTest"),
        ("4: PortConfigurationTraining", "PortConfigurationTraining"),
        ("No state change", "NoChange"),
        ("0: <unknown>", "NoChange"),
        ("garbage", None),
    ],
)
def test_phys_state_spellings(printed: str, phys: str | None) -> None:
    assert normalise_phys_state(printed) == phys


@pytest.mark.parametrize(
    ("state", "phys", "peer_expected", "severity", "words"),
    [
        ("Active", "LinkUp", True, None, ""),
        ("Active", "LinkErrorRecovery", True, "warning", "retraining"),
        ("Down", "LinkUp", True, "critical", "subnet manager"),  # physically up, logically down
        ("Down", "LinkUp", False, "critical", "subnet manager"),  # even on a switch port
        ("Down", "Polling", True, "critical", "no link"),
        ("Down", "Polling", False, "info", "unused"),
        ("Down", "Sleep", True, "critical", "no link"),
        ("Down", "Disabled", True, "critical", "switched off"),
        ("Down", "Disabled", False, "warning", "switched off"),
        ("Down", "PortConfigurationTraining", True, "critical", "has not trained"),
        ("Down", "PhyTest", True, "warning", "test mode"),
        ("Init", "LinkUp", True, "critical", "subnet manager has not finished"),
        ("Initialize", "LinkUp", False, "critical", "subnet manager has not finished"),
        ("Armed", "LinkUp", True, "critical", "subnet manager has not finished"),
        ("1: DOWN", "2: Polling", True, "critical", "no link"),
        ("garbled", "garbled", True, "info", "cannot be read"),
    ],
)
def test_state_combinations(state: str, phys: str, peer_expected: bool, severity: str | None, words: str) -> None:
    issues = judge_state(state, phys, peer_expected=peer_expected)
    assert worst(issues) == severity
    assert all(words in i.message for i in issues)


def test_nothing_shown_is_nothing_judged() -> None:
    assert judge_state(None, None) == []


@pytest.mark.parametrize(
    ("text", "lanes"),
    [("4X", 4), ("1x", 1), ("12X", 12), ("2X", 2), ("undefined (3)", None), ("??", None), (None, None)],
)
def test_widths(text: str | None, lanes: int | None) -> None:
    assert lane_count(text) == lanes


@pytest.mark.parametrize(
    ("text", "gen"),
    [
        ("53.125 Gbps", "HDR"),
        ("106.25 Gbps", "NDR"),
        ("212.5 Gbps", "XDR"),
        ("25.78125 Gbps", "EDR"),
        ("14.0625 Gbps", "FDR"),
        ("10.0 Gbps (FDR10)", "FDR10"),
        ("10.0 Gbps", "QDR"),
        ("5.0 Gbps", "DDR"),
        ("2.5 Gbs", "SDR"),  # libibmad before 1.2 said Gbs
        ("400 Gb/sec (4X NDR)", "NDR"),
        ("NDR", "NDR"),
        ("undefined (64)", None),
        ("Extended speed", None),
        (None, None),
    ],
)
def test_speeds(text: str | None, gen: str | None) -> None:
    assert speed_generation(text) == gen


def test_link_rate_is_what_sysfs_counts() -> None:
    assert link_rate_gbps(4, "NDR") == 400
    assert link_rate_gbps(4, "HDR") == 200
    assert link_rate_gbps(4, "EDR") == 100
    assert link_rate_gbps(4, "FDR") == 56
    assert link_rate_gbps(1, "SDR") == 2.5
    assert link_rate_gbps(None, "NDR") is None


def test_link_below_what_both_ends_support_is_degraded() -> None:
    [width] = judge_link(1, "NDR", could_be="Could be 4X")
    assert (width.severity, width.check, width.code) == ("warning", "ib-link-width", "could be 4X")
    assert "1X NDR" in width.message and "4X" in width.message
    [speed] = judge_link(4, "HDR", could_be=" Could be 106.25 Gbps")
    assert (speed.check, speed.code) == ("ib-link-speed", "could be 106.25 Gbps")
    [fdr10] = judge_link(4, "QDR", could_be=" Could be FDR10 (Found link at QDR but expected speed is FDR10)")
    assert fdr10.code == "could be FDR10"
    [both] = judge_link(4, "EDR", could_be="Could be 12X Could be 53.125 Gbps")
    assert both.code == "could be 12X, 53.125 Gbps"


def test_one_lane_is_degraded_unless_the_tool_says_it_is_all_there_is() -> None:
    assert worst(judge_link(1, "HDR")) == "warning"  # no hint available (ibnetdiscover, ibstatus)
    assert judge_link(1, "HDR", could_be="") == []  # iblinkinfo compared both ends and found nothing better
    assert judge_link(4, "NDR") == []
    assert judge_link(2, "NDR") == []  # NDR200 split ports run 2X by design


def test_slower_than_comparable_ports() -> None:
    [issue] = judge_link(4, "HDR", expected_rate_gbps=400)
    assert issue.code == "200 Gb/s" and "400" in issue.message
    [narrow] = judge_link(2, "NDR", expected_width=4)
    assert narrow.code == "2X"


def test_every_old_counter_name_maps_to_the_catalog() -> None:
    old = {
        "SymbolErrors": "SymbolErrorCounter",
        "LinkRecovers": "LinkErrorRecoveryCounter",
        "LinkDowned": "LinkDownedCounter",
        "RcvErrors": "PortRcvErrors",
        "RcvRemotePhysErrors": "PortRcvRemotePhysicalErrors",
        "RcvSwRelayErrors": "PortRcvSwitchRelayErrors",
        "XmtDiscards": "PortXmitDiscards",
        "XmtConstraintErrors": "PortXmitConstraintErrors",
        "RcvConstraintErrors": "PortRcvConstraintErrors",
        "LinkIntegrityErrors": "LocalLinkIntegrityErrors",
        "ExcBufOverrunErrors": "ExcessiveBufferOverrunErrors",
        "VL15Dropped": "VL15Dropped",
        "XmtData": "PortXmitData",
        "RcvData": "PortRcvData",
        "XmtPkts": "PortXmitPkts",
        "RcvPkts": "PortRcvPkts",
        "XmtWait": "PortXmitWait",
    }
    assert {name: ib_counter_name(name) for name in old} == old
    assert all(ib_counter_name(name) == name for name in load_ib_counters())
    assert ib_counter_name("QP1Dropped") is None and ib_counter_name("PortLocalPhysicalErrors") is None
    assert ib_counter_name("symbolerrors") == "SymbolErrorCounter"


@pytest.mark.parametrize(
    ("name", "value", "severity"),
    [
        ("SymbolErrorCounter", 10, "info"),  # at the threshold is not over it
        ("SymbolErrorCounter", 11, "warning"),  # no time span: a count, not a BER
        ("LinkErrorRecoveryCounter", 11, "warning"),  # the fabric service's and the agent's rating too
        ("LinkDownedCounter", 3, "info"),
        ("LinkDownedCounter", 11, "critical"),
        ("PortRcvErrors", 77, "warning"),
        ("PortRcvRemotePhysicalErrors", 101, "warning"),
        ("PortRcvSwitchRelayErrors", 5000, "info"),
        ("PortXmitDiscards", 101, "warning"),
        ("PortXmitConstraintErrors", 101, "warning"),
        ("LocalLinkIntegrityErrors", 11, "critical"),
        ("ExcessiveBufferOverrunErrors", 11, "warning"),
        ("VL15Dropped", 101, "warning"),
        ("PortXmitWait", 1001, "warning"),
        ("XmtDiscards", 101, "warning"),  # an old name, judged as its PMA name
    ],
)
def test_counter_thresholds(name: str, value: int, severity: str) -> None:
    issue = judge_counter(name, value)
    assert issue is not None and issue.severity == severity
    assert issue.code == ib_counter_name(name)


def test_zero_traffic_and_unknown_counters_say_nothing() -> None:
    assert judge_counter("SymbolErrorCounter", 0) is None
    assert judge_counter("PortXmitData", 12345) is None
    assert judge_counter("QP1Dropped", 7) is None


@pytest.mark.parametrize(
    ("name", "bits"),
    [
        ("LocalLinkIntegrityErrors", 4),
        ("ExcessiveBufferOverrunErrors", 4),
        ("LinkDownedCounter", 8),
        ("LinkErrorRecoveryCounter", 8),
        ("SymbolErrorCounter", 16),
        ("VL15Dropped", 16),
        ("PortXmitWait", 32),
    ],
)
def test_a_saturated_counter_means_at_least(name: str, bits: int) -> None:
    full = (1 << bits) - 1
    issue = judge_counter(name, full)
    assert issue is not None
    assert f"at least {full}" in issue.message and f"{bits}-bit" in issue.message and "saturated" in issue.message
    assert issue.severity in ("warning", "critical")  # never less than a warning: the true count is hidden
    assert "perfquery -R" in issue.fix
    wide = judge_counter(name, full, extended=True)  # a 64-bit value is just a value
    assert wide is not None and "at least" not in wide.message


def test_saturated_traffic_is_a_note() -> None:
    issue = judge_counter("PortXmitData", (1 << 32) - 1)
    assert issue is not None and issue.severity == "info" and "perfquery -x" in issue.fix
    assert judge_counter("PortXmitData", (1 << 32) - 1, extended=True) is None


def test_symbol_errors_against_a_ber_when_the_window_is_known() -> None:
    # NVIDIA's rule: 400 Gb/s for 12 minutes at 1e-14 allows 2.88 errors
    assert BerWindow(window_s=720, ber=1e-14).budget(400) == pytest.approx(2.88)
    quiet = judge_counter("SymbolErrorCounter", 2, window_s=720, rate_gbps=400)
    assert quiet is not None and quiet.severity == "info" and "within" in quiet.message
    loud = judge_counter("SymbolErrorCounter", 3, window_s=720, rate_gbps=400)
    assert loud is not None and loud.severity == "critical"
    assert "12 min" in loud.message and "1e-14" in loud.message
    # a slower link has a smaller budget: 3 errors in 12 min at 100 Gb/s is still over it
    slow = judge_counter("SymbolErrorCounter", 3, window_s=720, rate_gbps=100)
    assert slow is not None and slow.severity == "critical"
    # a looser target passes it
    looser = SymbolErrorBudget(SymbolErrors(windows=[BerWindow(window_s=720, ber=1e-12)]))
    loose = judge_counter("SymbolErrorCounter", 3, window_s=720, rate_gbps=400, budget=looser)
    assert loose is not None and loose.severity == "info"
    # over only the 125-minute budget (1e-15: 3 errors at 400 Gb/s) is a warning, as the fabric service says it
    slow_burn = judge_counter("SymbolErrorCounter", 4, window_s=3600, rate_gbps=400)
    assert slow_burn is not None and slow_burn.severity == "warning" and "125 min" in slow_burn.message


def test_a_link_down_within_a_known_window_is_a_fault() -> None:
    issue = judge_counter("LinkDownedCounter", 1, window_s=600)
    assert issue is not None and issue.severity == "critical" and "10 min" in issue.message


def test_one_counter_printed_in_both_spellings_counts_once() -> None:
    issues = judge_counters({"SymbolErrors": 12, "SymbolErrorCounter": 15})
    assert [(i.code, "15" in i.message) for i in issues] == [("SymbolErrorCounter", True)]


def test_judge_port_puts_the_worst_first_and_skips_width_on_a_dead_port() -> None:
    down = judge_port(PortReading(state="Down", phys_state="Polling", width=1, speed="HDR"))
    assert [i.code for i in down] == ["Down/Polling"]  # a port without link has no width to judge
    issues = judge_port(
        PortReading(
            state="4: ACTIVE",
            phys_state="5: LinkUp",
            width=1,
            speed="NDR",
            counters={"SymbolErrorCounter": 20, "LinkDownedCounter": 30},
        )
    )
    assert [i.severity for i in issues] == sorted(
        (i.severity for i in issues), key=["critical", "warning", "info"].index
    )
    assert {i.code for i in issues} == {"1X", "SymbolErrorCounter", "LinkDownedCounter"}
    assert issues[0].code == "LinkDownedCounter"


def test_ber_from_the_reading_rate() -> None:
    issues = judge_port(PortReading(state="Active", phys_state="LinkUp", width=4, speed="NDR", window_s=720,
                                    counters={"SymbolErrorCounter": 5}))  # fmt: skip
    assert [(i.code, i.severity) for i in issues] == [("SymbolErrorCounter", "critical")]


def test_describe_port() -> None:
    assert describe_port(node="leaf1", guid="0x200002", lid=4, port=35) == '"leaf1" port 35 (GUID 0x200002, LID 4)'
    assert describe_port(device="mlx5_0", port=1, lid=5) == "mlx5_0 port 1 (LID 5)"
    assert describe_port() == "port"
