"""Ports judged poll by poll: each finding kind just past its threshold and just short of it, link state changes,
flaps over their window, and the two ends of a cable put together (a down at both ends is the cable, symbol errors
at one end are that end's, packets corrupted upstream are not this port's fault)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from gpufleet.catalog.ib_counters import load_ib_counters
from gpufleet.errors import ManifestError, UserError
from gpufleet.fabric.counters import CounterTracker, Readings, counter_columns
from gpufleet.fabric.findings import FabricFinding
from gpufleet.fabric.graph import End, FabricGraph, Link, Node, NodeKind
from gpufleet.fabric.port_health import _WINDOWED, LinkChange, PortHealth
from gpufleet.health.thresholds import load_thresholds

T0 = 1_800_000_000.0
F = load_thresholds().fabric
LEAF, HCA = End("leaf1", 1), End("node01/mlx5_0", 1)  # 4X HDR: 200 Gb/s
UPLINK, SPINE = End("leaf1", 35), End("spine1", 1)
LEAF2, HCA2 = End("leaf1", 2), End("node02/mlx5_0", 1)
CABLE = (LEAF, HCA)  # the link's key: its ends in order
PORTS = (LEAF, HCA, UPLINK, SPINE, LEAF2, HCA2)
ALL_64 = {name: 64 for name in counter_columns()}  # 64-bit readings unless a test says otherwise


def fabric(*, without: tuple[End, End] | None = None, down: tuple[End, End] | None = None) -> FabricGraph:
    graph = FabricGraph(source="test")
    graph.add_node(Node("leaf1", NodeKind.switch, lid=4, ports=36))
    graph.add_node(Node("spine1", NodeKind.switch, lid=1, ports=36))
    graph.add_node(Node("node01/mlx5_0", NodeKind.hca))
    graph.add_node(Node("node02/mlx5_0", NodeKind.hca))
    for a, b in ((LEAF, HCA), (UPLINK, SPINE), (LEAF2, HCA2)):
        if without == (a, b):
            graph.idle_ports[a] = "Down/Polling"
            continue
        graph.add_link(Link(a, b, width=4, speed="HDR", up=down != (a, b)))
    return graph


class Fleet:
    """The counters of a few ports, polled every minute: `poll` adds counts and judges."""

    def __init__(self, thresholds: object = None, *, widths: Mapping[str, int] = ALL_64) -> None:
        self.graph = fabric()
        self.tracker = CounterTracker(silent_after=F.silent_after_polls)
        self.health = PortHealth(thresholds, graph=self.graph)  # type: ignore[arg-type]
        self.values = {end: dict.fromkeys(counter_columns(), 0) for end in PORTS}
        self.widths = widths
        self.time = T0
        self.changes: list[LinkChange] = []
        findings, _ = self.judge(self.graph, PORTS)
        assert findings == []

    def poll(
        self,
        add: Mapping[End, Mapping[str, int]] | None = None,
        *,
        dt: float = 60.0,
        graph: FabricGraph | None = None,
        answered: tuple[End, ...] = PORTS,
        states: Mapping[End, bool] | None = None,
    ) -> list[FabricFinding]:
        self.time += dt
        for end, counts in (add or {}).items():
            for name, n in counts.items():
                self.values[end][name] += n
        findings, self.changes = self.judge(graph or self.graph, answered, states)
        return findings

    def set(self, end: End, name: str, value: int) -> None:
        self.values[end][name] = value

    def judge(
        self, graph: FabricGraph, answered: tuple[End, ...], states: Mapping[End, bool] | None = None
    ) -> tuple[list[FabricFinding], list[LinkChange]]:
        readings = Readings.from_mapping({e: self.values[e] for e in answered}, widths=self.widths)
        deltas = self.tracker.update(self.time, readings)
        return self.health.observe(self.time, deltas, graph, states=states)


def kinds(findings: list[FabricFinding]) -> list[tuple[str, str]]:
    return [(f.kind, f.severity) for f in findings]


def only(findings: list[FabricFinding], kind: str) -> FabricFinding:
    found = [f for f in findings if f.kind == kind]
    assert len(found) == 1, kinds(findings)
    return found[0]


# --- symbol errors: a bit error rate at the link's rate ---------------------------------------------------------


def test_symbol_errors_within_the_ber_budget_are_quiet() -> None:
    fleet = Fleet()  # 200 Gb/s: 1.44 errors allowed in 12 min at 1e-14, 1.5 in 125 min at 1e-15
    assert fleet.poll({HCA: {"SymbolErrorCounter": 1}}) == []


def test_symbol_errors_over_the_12_minute_budget_at_one_end_name_that_end() -> None:
    fleet = Fleet()
    found = only(fleet.poll({HCA: {"SymbolErrorCounter": 2}}), "symbol-errors")
    assert found.severity == "critical" and found.action == "isolate-port"
    assert found.port == HCA and found.ends == CABLE
    assert "about 1.4e-14, over 1e-14" in found.message
    assert "only node01/mlx5_0/1 counts symbol errors, not leaf1/1" in found.message
    assert "receiver or transceiver at node01/mlx5_0/1" in found.message
    assert found.fix.startswith("reseat or replace the cable or transceiver at node01/mlx5_0/1")
    assert "isolate the port" in found.fix


def test_symbol_errors_over_the_125_minute_budget_only_are_a_warning() -> None:
    fleet = Fleet()
    assert fleet.poll({HCA: {"SymbolErrorCounter": 1}}) == []
    found = only(fleet.poll({HCA: {"SymbolErrorCounter": 1}}, dt=13 * 60), "symbol-errors")
    assert found.severity == "warning" and found.action == "isolate-port"
    assert "2 in 125 min" in found.message and "over 1e-15" in found.message


def test_symbol_errors_at_both_ends_are_the_cable() -> None:
    fleet = Fleet()
    found = only(fleet.poll({HCA: {"SymbolErrorCounter": 5}, LEAF: {"SymbolErrorCounter": 3}}), "symbol-errors")
    assert found.ends == CABLE and found.port is None
    assert "both ends count symbol errors: the cable itself" in found.message
    assert found.fix.startswith("replace the cable between leaf1/1 and node01/mlx5_0/1")


def test_symbol_errors_without_a_link_rate_fall_back_to_the_error_threshold() -> None:
    fleet = Fleet()
    fleet.graph.links[0].speed = None
    assert fleet.poll({HCA: {"SymbolErrorCounter": 10}}) == []
    found = only(fleet.poll({HCA: {"SymbolErrorCounter": 1}}), "symbol-errors")
    assert found.severity == "warning" and "link rate unknown" in found.message


# --- link downs and flaps ---------------------------------------------------------------------------------------


def test_a_down_counted_at_both_ends_is_the_cable_and_isolates() -> None:
    fleet = Fleet()
    found = only(fleet.poll({HCA: {"LinkDownedCounter": 1}, LEAF: {"LinkDownedCounter": 1}}), "link-downed")
    assert found.severity == "critical" and found.action == "isolate-port"
    assert found.ends == CABLE and found.port is None
    assert "counted at both ends is the cable" in found.message


def test_a_down_counted_at_one_end_only_is_a_warning_without_isolation() -> None:
    fleet = Fleet()
    found = only(fleet.poll({LEAF: {"LinkDownedCounter": 1}}), "link-downed")
    assert found.severity == "warning" and found.action == ""
    assert found.port == LEAF and "did not count it" in found.message


def test_no_downs_no_finding() -> None:
    assert Fleet().poll({HCA: {"PortXmitData": 1000}}) == []


def test_two_downs_within_the_flap_window_are_a_flap_that_supersedes_link_downed() -> None:
    fleet = Fleet()
    fleet.poll({LEAF: {"LinkDownedCounter": 1}, HCA: {"LinkDownedCounter": 1}})
    findings = fleet.poll({LEAF: {"LinkDownedCounter": 1}, HCA: {"LinkDownedCounter": 1}}, dt=F.flap_window_s - 60)
    found = only(findings, "link-flap")
    assert found.severity == "critical" and found.action == "isolate-port" and found.ends == CABLE
    assert "went down 2 times within 10 min" in found.message
    assert "link-downed" not in {f.kind for f in findings}


def test_two_downs_counted_in_one_poll_are_a_flap() -> None:
    fleet = Fleet()
    assert only(fleet.poll({LEAF: {"LinkDownedCounter": 2}}), "link-flap").ends == CABLE


def test_two_downs_further_apart_than_the_flap_window_are_not_a_flap() -> None:
    fleet = Fleet()
    fleet.poll({LEAF: {"LinkDownedCounter": 1}, HCA: {"LinkDownedCounter": 1}})
    findings = fleet.poll({LEAF: {"LinkDownedCounter": 1}, HCA: {"LinkDownedCounter": 1}}, dt=F.flap_window_s + 60)
    assert kinds(findings) == [("link-downed", "critical")]


def test_a_down_seen_in_the_state_and_later_in_a_counter_is_one_down() -> None:
    fleet = Fleet()
    gone = fabric(without=CABLE)
    # the HCA behind the dead link cannot be read; the switch counts the down
    findings = fleet.poll({LEAF: {"LinkDownedCounter": 1}}, graph=gone, answered=(LEAF, UPLINK, SPINE, LEAF2, HCA2))
    assert kinds(findings) == [("link-down", "critical")]
    findings = fleet.poll({HCA: {"LinkDownedCounter": 1}})  # back; the HCA's counter shows the same down
    assert findings == []


# --- link state -------------------------------------------------------------------------------------------------


def test_a_link_gone_from_the_fabric_is_down_and_back_is_up() -> None:
    fleet = Fleet()
    findings = fleet.poll(graph=fabric(without=CABLE), answered=(LEAF, UPLINK, SPINE, LEAF2, HCA2))
    found = only(findings, "link-down")
    assert found.ends == CABLE and "Down/Polling" in found.message and found.severity == "critical"
    assert [(c.ends, c.up) for c in fleet.changes] == [(CABLE, False)]
    assert "went down" in fleet.changes[0].detail
    still = fleet.poll(graph=fabric(without=CABLE), answered=(LEAF, UPLINK, SPINE, LEAF2, HCA2))
    assert kinds(still) == [("link-down", "critical")] and fleet.changes == []  # a link that stays down stays found
    back = fleet.poll()
    assert back == [] and [(c.ends, c.up) for c in fleet.changes] == [(CABLE, True)]


def test_a_link_the_graph_shows_down_and_a_port_that_says_it_is_down() -> None:
    fleet = Fleet()
    assert kinds(fleet.poll(graph=fabric(down=(UPLINK, SPINE)))) == [("link-down", "critical")]
    assert fleet.changes[0].ends == (UPLINK, SPINE)
    fleet.poll()
    found = only(fleet.poll(states={HCA2: False}), "link-down")
    assert found.ends == (LEAF2, HCA2) and "node02/mlx5_0/1 reports its port down" in found.message


def test_a_port_recabled_elsewhere_is_not_a_link_down() -> None:
    fleet = Fleet()
    recabled = fabric(without=CABLE)
    recabled.add_link(Link(End("leaf1", 3), HCA, width=4, speed="HDR"))
    assert fleet.poll(graph=recabled) == [] and fleet.changes == []


# --- counts per window ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "counter", "limit", "severity", "action"),
    [
        ("rcv-errors", "PortRcvErrors", F.rcv_errors_per_window, "warning", "isolate-port"),
        ("link-integrity", "LocalLinkIntegrityErrors", F.link_integrity_errors_per_window, "critical", "isolate-port"),
        ("buffer-overrun", "ExcessiveBufferOverrunErrors", F.buffer_overrun_errors_per_window, "warning", ""),
        ("link-recovery", "LinkErrorRecoveryCounter", F.link_recoveries_per_window, "warning", "isolate-port"),
        ("xmit-discards", "PortXmitDiscards", F.xmit_discards_per_window, "warning", ""),
        ("vl15-dropped", "VL15Dropped", F.vl15_dropped_per_window, "warning", ""),
    ],
)
def test_counts_over_their_window_threshold(kind: str, counter: str, limit: float, severity: str, action: str) -> None:
    fleet = Fleet()
    assert fleet.poll({LEAF2: {counter: int(limit)}}) == []  # at the threshold: quiet
    found = only(fleet.poll({LEAF2: {counter: 1}}), kind)  # the window now holds one more
    assert (found.severity, found.action, found.port) == (severity, action, LEAF2)
    assert f"{int(limit) + 1} {counter} on leaf1/2 in 10 min (threshold {limit:g})" in found.message
    assert fleet.poll(dt=F.window_s) == []  # the window has moved past them


def test_physical_counts_at_one_end_name_the_cable_and_the_counting_port() -> None:
    fleet = Fleet()
    found = only(fleet.poll({HCA2: {"PortRcvErrors": 11}}), "rcv-errors")
    assert found.ends == (LEAF2, HCA2) and found.port == HCA2
    assert "only node02/mlx5_0/1 counts receive errors, not leaf1/2" in found.message


def test_a_count_over_its_threshold_is_rated_as_the_ib_counter_catalog_rates_it() -> None:
    """One rating per counter, the one triage's port rules give a count since the counters were cleared."""
    catalog = load_ib_counters()
    for kind, (counter, _, _) in _WINDOWED.items():
        assert catalog[counter].over_threshold, (kind, counter)
    found = only(Fleet().poll({LEAF2: {"VL15Dropped": int(F.vl15_dropped_per_window) + 1}}), "vl15-dropped")
    assert found.severity == catalog["VL15Dropped"].over_threshold


def test_transmit_discards_on_a_link_that_is_down_are_the_link_s() -> None:
    fleet = Fleet()
    findings = fleet.poll({LEAF2: {"PortXmitDiscards": 500}}, graph=fabric(down=(LEAF2, HCA2)))
    assert kinds(findings) == [("link-down", "critical")]


def test_transmit_discards_of_a_poll_in_which_the_link_went_down_stay_the_link_s_once_it_is_back() -> None:
    """A link that goes down and comes back between two polls: the switch port discarded what it could not send
    (PortXmitDiscards counts packets discarded "because the port is down or congested"). Those discards are the
    down's, not congestion, in this poll and in every later one their window reaches; discards counted later on
    the working link are congestion again."""
    fleet = Fleet()
    downed = {"LinkDownedCounter": 1}
    findings = fleet.poll({LEAF: {**downed, "PortXmitDiscards": 747_680}, HCA: downed})
    assert kinds(findings) == [("link-downed", "critical")]
    for _ in range(int(F.window_s // 60) - 1):
        assert fleet.poll() == []
    found = only(fleet.poll({LEAF: {"PortXmitDiscards": int(F.xmit_discards_per_window) + 1}}), "xmit-discards")
    assert found.port == LEAF and f"{int(F.xmit_discards_per_window) + 1} PortXmitDiscards" in found.message


def test_transmit_discards_counted_between_the_downs_of_a_flap_stay_the_flap_s_once_it_is_over() -> None:
    """A link that flaps: its downs are counted in some polls and the switch port's discards in another, while the
    link is up between two downs. Those discards are the flap's too, also once its window has passed (the fault
    campaign's ib-congestion on leaf-su2-r2/9 some minutes after the flap on dgx-040/mlx5_2 ended)."""
    fleet = Fleet()
    downed = {"LinkDownedCounter": 1}
    fleet.poll({LEAF: downed, HCA: downed})
    fleet.poll({LEAF: downed, HCA: downed})
    assert kinds(fleet.poll({LEAF: {"PortXmitDiscards": 747_680}})) == [("link-flap", "critical")]
    for _ in range(int(F.window_s // 60) - 2):
        assert not [f for f in fleet.poll() if f.kind == "xmit-discards"]
    found = only(fleet.poll({LEAF: {"PortXmitDiscards": int(F.xmit_discards_per_window) + 1}}), "xmit-discards")
    assert f"{int(F.xmit_discards_per_window) + 1} PortXmitDiscards" in found.message


def test_transmit_discards_counted_by_a_port_whose_link_a_state_change_took_down_are_the_link_s() -> None:
    fleet = Fleet()
    gone = fabric(without=(LEAF2, HCA2))
    answered = (LEAF, HCA, UPLINK, SPINE, LEAF2)
    assert kinds(fleet.poll({LEAF2: {"PortXmitDiscards": 5_000}}, graph=gone, answered=answered)) == [
        ("link-down", "critical")
    ]
    assert fleet.poll() == []  # back: what it discarded while down is not congestion


# --- packet drop rate and upstream corruption -------------------------------------------------------------------


def test_packet_drop_rate_over_the_limit() -> None:
    fleet = Fleet()
    found = only(fleet.poll({HCA: {"PortRcvErrors": 1, "PortRcvPkts": 10**9}}), "packet-drop-rate")
    assert found.severity == "critical" and found.action == "isolate-port" and found.port == HCA
    assert "dropped 1 of 1000000000 packets" in found.message


def test_no_drops_no_packet_drop_rate() -> None:
    assert Fleet().poll({HCA: {"PortRcvPkts": 10**9}}) == []


def test_packets_corrupted_upstream_on_a_clean_link_are_not_this_port_s_fault() -> None:
    fleet = Fleet()
    findings = fleet.poll(
        {
            HCA2: {"PortRcvRemotePhysicalErrors": 4, "PortRcvPkts": 10**6},
            UPLINK: {"SymbolErrorCounter": 50},  # the sending switch's uplink is the bad one
        }
    )
    found = only(findings, "packet-drop-rate")
    assert found.port == HCA2 and found.action == "" and found.severity == "warning"
    assert "corrupted upstream" in found.message
    assert "leaf1/35 (symbol-errors)" in found.message
    assert "do not isolate" in found.fix
    assert only(findings, "symbol-errors").port == UPLINK


def test_remote_physical_errors_over_their_threshold_point_upstream() -> None:
    fleet = Fleet()
    assert fleet.poll({HCA2: {"PortRcvRemotePhysicalErrors": int(F.remote_physical_errors_per_window)}}) == []
    found = only(fleet.poll({HCA2: {"PortRcvRemotePhysicalErrors": 1}}), "remote-physical-errors")
    assert found.action == "" and found.severity == "warning" and "upstream" in found.message


def test_remote_physical_errors_on_a_link_with_its_own_errors_are_left_to_that_link() -> None:
    fleet = Fleet()
    findings = fleet.poll({HCA2: {"PortRcvRemotePhysicalErrors": 200, "SymbolErrorCounter": 9}})
    assert kinds(findings) == [("symbol-errors", "critical")]


# --- congestion -------------------------------------------------------------------------------------------------


def ticks(share: float, *, rate_gbps: float = 200.0, seconds: float = 60.0) -> int:
    return int(share * rate_gbps * 1e9 * seconds / (F.xmit_wait_bytes_per_tick * 8))


@pytest.mark.parametrize(("share", "severity"), [(0.01, None), (0.10, "info"), (0.30, "warning")])
def test_xmit_wait_as_a_share_of_the_link_s_time_is_congestion(share: float, severity: str | None) -> None:
    findings = Fleet().poll({LEAF: {"PortXmitWait": ticks(share)}})
    if severity is None:
        assert findings == []
        return
    found = only(findings, "congestion")
    assert found.severity == severity and found.action == "" and found.port == LEAF
    assert f"{share:.0%} of the last 60 s" in found.message and "not a fault" in found.message
    assert "congestion and routing" in found.fix


# --- saturated counters, silent ports ---------------------------------------------------------------------------


def test_a_saturated_16_bit_counter_says_to_clear_the_counters() -> None:
    fleet = Fleet(widths={})  # PortCounters widths
    fleet.set(LEAF2, "VL15Dropped", 2**16 - 1)
    found = only(fleet.poll(), "counter-saturated")
    assert found.severity == "warning" and found.port == LEAF2
    assert "VL15Dropped (16-bit)" in found.message and "perfquery -R" in found.fix


def test_a_saturated_traffic_counter_is_a_note() -> None:
    fleet = Fleet(widths={})
    fleet.set(LEAF2, "PortXmitData", 2**32 - 1)
    assert only(fleet.poll(), "counter-saturated").severity == "info"


def test_a_port_that_stops_answering_is_silent_after_three_polls() -> None:
    fleet = Fleet()
    quiet = (LEAF, HCA, UPLINK, SPINE, LEAF2)
    assert fleet.poll(answered=quiet) == []
    assert fleet.poll(answered=quiet) == []
    found = only(fleet.poll(answered=quiet), "port-silent")
    assert found.port == HCA2 and found.severity == "warning" and "3 counter polls" in found.message


def test_a_port_whose_link_is_down_is_not_reported_silent() -> None:
    fleet = Fleet()
    gone = fabric(without=(LEAF2, HCA2))
    for _ in range(3):
        findings = fleet.poll(graph=gone, answered=(LEAF, HCA, UPLINK, SPINE, LEAF2))
    assert kinds(findings) == [("link-down", "critical")]


# --- thresholds -------------------------------------------------------------------------------------------------


def test_site_thresholds_override_the_defaults(tmp_path: Path) -> None:
    site = tmp_path / "thresholds.yaml"
    site.write_text("fabric:\n  rcv_errors_per_window: 100\n", encoding="utf-8")
    fleet = Fleet(load_thresholds(site))
    assert fleet.poll({LEAF2: {"PortRcvErrors": 50}}) == []


def test_bad_site_thresholds_are_a_clear_error(tmp_path: Path) -> None:
    site = tmp_path / "thresholds.yaml"
    site.write_text("fabric:\n  congestion_info_fraction: 0.5\n  congestion_warning_fraction: 0.2\n", encoding="utf-8")
    with pytest.raises(ManifestError, match="congestion_info_fraction must not be above"):
        load_thresholds(site)
    site.write_text("symbol_errors:\n  windows: []\n", encoding="utf-8")
    with pytest.raises(ManifestError, match=r"symbol_errors\.windows"):
        load_thresholds(site)
    # the symbol-error windows live in one section now: an older site file is told where they went
    site.write_text("fabric:\n  symbol_windows: []\n", encoding="utf-8")
    with pytest.raises(ManifestError, match=r"fabric\.symbol_windows moved.*symbol_errors\.windows"):
        load_thresholds(site)


def test_observe_wants_the_tracker_s_deltas() -> None:
    with pytest.raises(UserError, match="Deltas"):
        PortHealth().observe(T0, {}, fabric())  # type: ignore[arg-type]


def test_findings_are_plain_data_for_the_api() -> None:
    found = only(Fleet().poll({HCA: {"LinkDownedCounter": 1}, LEAF: {"LinkDownedCounter": 1}}), "link-downed")
    assert found.to_dict()["ends"] == ["leaf1/1", "node01/mlx5_0/1"]
    assert found.key == "link-downed:leaf1/1|node01/mlx5_0/1"
