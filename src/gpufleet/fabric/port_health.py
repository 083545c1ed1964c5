"""Every port's health, poll after poll, from its counter deltas and its link's state, judged per cable.

`PortHealth.observe` takes one poll's `Deltas` (counters.py) and the fabric as found, and returns what is wrong
(`FabricFinding`s) and which links went down or came up (`LinkChange`s). Thresholds are the `fabric` section of
the health thresholds (sources in its data file).

- Symbol errors against a bit error rate at the link's rate, in NVIDIA's two windows (1e-14 over 12 minutes,
  1e-15 over 125 minutes), judged by health.symbol_errors as the agent and triage judge them (its `symbol_errors`
  thresholds); packets dropped per packet received (the PDR rule); link downs (LinkDownedCounter, and
  the link's state), two within the flap window being a flap; and the other error counters against infiniband-diags'
  thresholds per window, a count over one rated as the IB counter catalog rates the counter (the rating triage's
  port rules give a count since the counters were cleared). PortXmitWait is congestion, as a share of the link's
  time, never a fault of the port. PortXmitDiscards counted in a poll in which the port's link was down are the
  link's (the counter counts what the port discarded "because the port is down or congested"), not congestion.
- Per cable: the two ends' findings of one physical problem become one, naming both ends. A down counted at both
  ends is the cable (isolate it). Symbol errors counted at one end only are that end's receiver or transceiver, or
  the cable toward it. Packets that arrive already marked bad (PortRcvRemotePhysicalErrors) on a link that counts
  no physical errors of its own were corrupted upstream: said so, and the port is not isolated.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from gpufleet.catalog.ib_counters import load_ib_counters
from gpufleet.errors import UserError
from gpufleet.fabric.counters import CLEAR_COUNTERS_FIX, Deltas
from gpufleet.fabric.findings import FabricFinding, worst_first
from gpufleet.fabric.graph import End, FabricGraph
from gpufleet.health.symbol_errors import SymbolErrorBudget
from gpufleet.health.thresholds import Fabric, Thresholds, load_thresholds
from gpufleet.model import Severity

ISOLATE = "isolate-port"
LinkKey = tuple[End, End]

SYMBOL = "SymbolErrorCounter"
DOWNED = "LinkDownedCounter"
RCV = "PortRcvErrors"
REMOTE = "PortRcvRemotePhysicalErrors"
RCV_PKTS = "PortRcvPkts"
WAIT = "PortXmitWait"
DISCARDS = "PortXmitDiscards"

# kinds judged by a count per window: (counter, threshold field, action). What a count over its threshold is (its
# severity) is the counter's one rating in the IB counter catalog, the rating triage's port rules give it too
_WINDOWED: dict[str, tuple[str, str, str]] = {
    "rcv-errors": (RCV, "rcv_errors_per_window", ISOLATE),
    "link-integrity": ("LocalLinkIntegrityErrors", "link_integrity_errors_per_window", ISOLATE),
    "buffer-overrun": ("ExcessiveBufferOverrunErrors", "buffer_overrun_errors_per_window", ""),
    "link-recovery": ("LinkErrorRecoveryCounter", "link_recoveries_per_window", ISOLATE),
    "xmit-discards": (DISCARDS, "xmit_discards_per_window", ""),
    "vl15-dropped": ("VL15Dropped", "vl15_dropped_per_window", ""),
    "remote-physical-errors": (REMOTE, "remote_physical_errors_per_window", ""),
}
# one physical problem of a cable: its two ends' findings are one
_PHYSICAL = frozenset(
    (
        "symbol-errors",
        "rcv-errors",
        "packet-drop-rate",
        "link-downed",
        "link-integrity",
        "buffer-overrun",
        "link-recovery",
    )
)
# counters that count physical errors on the port's own link
_OWN_LINK = (SYMBOL, RCV, DOWNED, "LocalLinkIntegrityErrors", "LinkErrorRecoveryCounter")

_WHAT = {
    "symbol-errors": "symbol errors",
    "rcv-errors": "receive errors",
    "packet-drop-rate": "dropped packets",
    "link-downed": "link downs",
    "link-integrity": "local link integrity errors",
    "buffer-overrun": "excessive buffer overruns",
    "link-recovery": "link error recoveries",
}
_LINK_DOWN_FIX = (
    "check the cable and the transceivers at both ends, and that the far end is powered and its port enabled "
    "(`ibportstate <lid> <port> query`); reseat or replace what is bad"
)


@dataclass(frozen=True, slots=True)
class LinkChange:
    """A link that went down or came up between two polls."""

    time: float
    ends: tuple[End, End]
    up: bool
    detail: str


@dataclass(slots=True)
class _Hit:
    """One port's evidence of one kind of problem, before the two ends of a cable are put together."""

    kind: str
    end: End
    severity: Severity
    what: str  # the evidence, about this port: "1234 symbol errors in 12 min at 200 Gb/s ..."
    action: str = ""


@dataclass(slots=True)
class _Events:
    """A port's nonzero deltas of one counter: (time, count, interval the count covers)."""

    items: deque[tuple[float, float, float]] = field(default_factory=deque)

    def add(self, time: float, count: float, interval: float) -> None:
        self.items.append((time, count, interval))

    def prune(self, before: float) -> None:
        while self.items and self.items[0][0] <= before:
            self.items.popleft()

    def total(self, now: float, window_s: float) -> tuple[float, float]:
        """The count within the window, and the time it covers (longer than the window when one reading spans
        more, a port read again after a gap)."""
        count, span = 0.0, window_s
        for time, n, interval in self.items:
            if time > now - window_s:
                count += n
                if not math.isnan(interval):
                    span = max(span, interval)
        return count, span


def _span(seconds: float) -> str:
    if seconds >= 120:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:g} s"


def _worst(a: Severity, b: Severity) -> Severity:
    return a if a.rank >= b.rank else b


def _fabric_thresholds(thresholds: Thresholds | Fabric | None) -> Fabric:
    if thresholds is None:
        return load_thresholds().fabric
    if isinstance(thresholds, Thresholds):
        return thresholds.fabric
    if isinstance(thresholds, Fabric):
        return thresholds
    raise UserError(f"fabric thresholds of type {type(thresholds).__name__}: expected Thresholds or its fabric section")


class PortHealth:
    """The judge of one subnet's ports. Keeps, between polls, each link's last state, the windows of error counts
    and the link downs of each port."""

    def __init__(self, thresholds: Thresholds | Fabric | None = None, *, graph: FabricGraph | None = None) -> None:
        self.t = _fabric_thresholds(thresholds)
        self.ber = SymbolErrorBudget(thresholds if isinstance(thresholds, Thresholds) else None)
        self._known: dict[LinkKey, bool] = {}  # each link's state at the last poll
        self._events: dict[str, dict[End, _Events]] = {}
        self._downs: dict[LinkKey | End, deque[tuple[float, int]]] = {}
        self._pending: dict[End, deque[float]] = {}  # downs a port's counter has yet to show (seen elsewhere first)
        self._graph = graph
        self._gone: dict[End, LinkKey] = {}  # each port of a link that is down, and that link
        if graph is not None:
            self._known = {link.key: link.up for link in graph.links}

    # --- one poll ---------------------------------------------------------------------------------------------------

    def observe(
        self,
        time: float,
        deltas: Deltas,
        graph: FabricGraph | None = None,
        *,
        states: Mapping[End, bool] | None = None,
    ) -> tuple[list[FabricFinding], list[LinkChange]]:
        """This poll's findings, worst first, and the links that changed state. `states` adds ports' own states
        (up or not) to the links' (a port that says it is down takes its link down)."""
        if not isinstance(deltas, Deltas):
            raise UserError(f"expected the tracker's Deltas, got {type(deltas).__name__}")
        graph = graph if graph is not None else self._graph or FabricGraph()
        self._graph = graph
        changes, down = self._link_states(time, graph, states or {})
        hits: list[_Hit] = []
        flapping = self._link_downs(time, deltas, graph, changes, down, hits)
        # discards of a poll in which the link was down, or still flapping (up between downs), are the link's
        lost = self._link_lost(deltas, graph, changes, down)
        lost.update(end for site in flapping for end in (site if isinstance(site, tuple) else (site,)))
        self._record(time, deltas, lost)
        hits += self._symbol_errors(time, deltas, graph)
        hits += self._windowed(time, deltas, graph, down, flapping)
        hits += self._packet_drops(deltas)
        hits += self._congestion(deltas, graph)
        hits = self._upstream(hits, time, deltas, graph)
        findings = self._merge(hits, graph)
        for key, why in down.items():
            if key not in flapping and key[0] not in flapping and key[1] not in flapping:
                findings.append(
                    FabricFinding(
                        "link-down",
                        Severity.critical,
                        f"link {key[0]} <-> {key[1]} is down ({why})",
                        _LINK_DOWN_FIX,
                        ends=key,
                    )
                )
        findings += self._saturated(deltas)
        findings += self._silent(deltas, graph, down)
        return worst_first(findings), changes

    def forget(self, ends: set[End]) -> None:
        """Forget ports that left the fabric for good (decommissioned), their links and their history: a link that
        is gone is otherwise reported down until it is back."""
        self._known = {k: v for k, v in self._known.items() if k[0] not in ends and k[1] not in ends}
        self._downs = {
            site: downs
            for site, downs in self._downs.items()
            if not (set(site) & ends if isinstance(site, tuple) else site in ends)
        }
        for per_port in self._events.values():
            for end in ends & per_port.keys():
                del per_port[end]
        for end in ends:
            self._pending.pop(end, None)
            self._gone.pop(end, None)

    # --- link state -------------------------------------------------------------------------------------------------

    def _link_states(
        self, time: float, graph: FabricGraph, states: Mapping[End, bool]
    ) -> tuple[list[LinkChange], dict[LinkKey, str]]:
        now: dict[LinkKey, tuple[bool, str]] = {}
        cabled: set[End] = set()
        for link in graph.links:
            a, b = link.a, link.b
            key = (a, b) if (a.node, a.port) <= (b.node, b.port) else (b, a)
            cabled.add(a)
            cabled.add(b)
            if states and (states.get(a) is False or states.get(b) is False):
                said = a if states.get(a) is False else b
                now[key] = (False, f"{said} reports its port down")
            else:
                now[key] = (link.up, "" if link.up else "its ports are not Active")
        for key in list(self._known):
            if key in now:
                continue
            if key[0] in cabled or key[1] in cabled:  # its ports are cabled elsewhere now: not this link's news
                del self._known[key]
                continue
            idle = graph.idle_ports.get(key[0]) or graph.idle_ports.get(key[1])
            now[key] = (False, f"no longer discovered{f', port {idle}' if idle else ''}")
        changes: list[LinkChange] = []
        for key, (up, why) in now.items():
            before = self._known.get(key)
            if before is None and up:
                self._known[key] = True
                continue
            if before != up:
                went = "went down" if before is not None else "found down"
                detail = f"link {key[0]} <-> {key[1]} " + ("came up" if up else f"{went} ({why})")
                changes.append(LinkChange(time, key, up, detail))
            self._known[key] = up
        down = {key: why for key, (up, why) in now.items() if not up}
        self._gone = {end: key for key in down for end in key}
        return changes, down

    # --- counts over windows ----------------------------------------------------------------------------------------

    def _link_lost(
        self, deltas: Deltas, graph: FabricGraph, changes: list[LinkChange], down: dict[LinkKey, str]
    ) -> set[End]:
        """The ports whose link was down at some time this poll covers: down now, seen going down, or a down counted
        by either end's LinkDownedCounter."""
        lost = {end for key in down for end in key}
        lost.update(end for change in changes if not change.up for end in change.ends)
        column = deltas.of(DOWNED)
        for r in np.flatnonzero(np.nan_to_num(column, nan=0.0) > 0):
            site = self._site(deltas.ports[r], graph)
            lost.update(site if isinstance(site, tuple) else (site,))
        return lost

    def _record(self, time: float, deltas: Deltas, link_lost: set[End]) -> None:
        """Keep the nonzero deltas of the counters judged over windows; drop what no window reaches any more.
        PortXmitDiscards counts the packets a port discarded "because the port is down or congested" (IBA,
        PortCounters): those of a poll in which the port's link was down (`link_lost`) are the link's, which its
        own finding (a down, a flap) says, and never count as congestion once the link is back."""
        longest = max(self.ber.longest_s, self.t.window_s)
        for name in {SYMBOL, *(spec[0] for spec in _WINDOWED.values())}:
            c = deltas.counters.index(name)
            column = deltas.delta[:, c]
            per_port = self._events.setdefault(name, {})
            for r in np.flatnonzero(column > 0):
                end = deltas.ports[r]
                if name == DISCARDS and end in link_lost:
                    continue
                per_port.setdefault(end, _Events()).add(time, float(column[r]), float(deltas.interval_s[r, c]))
            for end in list(per_port):
                per_port[end].prune(time - longest)
                if not per_port[end].items:
                    del per_port[end]

    def _total(self, name: str, end: End, time: float, window_s: float) -> tuple[float, float]:
        events = self._events.get(name, {}).get(end)
        return (0.0, window_s) if events is None else events.total(time, window_s)

    # --- link downs and flaps ---------------------------------------------------------------------------------------

    def _site(self, end: End, graph: FabricGraph) -> LinkKey | End:
        """The cable a port is on: its link in the fabric, or the link it had until it went down."""
        link = graph.link_at(end)
        if link is not None:
            return link.key
        return self._gone.get(end, end)

    def _link_downs(
        self,
        time: float,
        deltas: Deltas,
        graph: FabricGraph,
        changes: list[LinkChange],
        down: dict[LinkKey, str],
        hits: list[_Hit],
    ) -> set[LinkKey | End]:
        """Link-downed hits (the counter grew) and flaps (downs within the window, counted per cable: both ends'
        counters and the link's state see the same down). Returns the cables and ports that flap."""
        c = deltas.counters.index(DOWNED)
        column, spans = deltas.delta[:, c], deltas.interval_s[:, c]
        counted: dict[End, int] = {}
        for r in np.flatnonzero(column > 0):
            # downs counted over more than the flap window cannot all be placed in it
            counted[deltas.ports[r]] = 1 if spans[r] > self.t.flap_window_s else int(column[r])
        sites: dict[LinkKey | End, tuple[End, ...]] = {}
        for end in counted:
            site = self._site(end, graph)
            sites[site] = site if isinstance(site, tuple) else (site,)
        seen_down = {change.ends for change in changes if not change.up}
        for key in seen_down:
            sites[key] = key
        horizon = time - self.t.flap_window_s
        fresh: dict[End, int] = {}
        for site, ends in sites.items():
            for end in ends:
                # a down one end (or the state) showed at an earlier poll, that this end's counter shows only now
                pending = self._pending.get(end, deque())
                while pending and pending[0] <= horizon:
                    pending.popleft()
                raw = counted.get(end, 0)
                echo = min(raw, len(pending))
                for _ in range(echo):
                    pending.popleft()
                fresh[end] = raw - echo
            n = max((fresh[end] for end in ends), default=0)
            if site in seen_down:
                n = max(n, 1)
            if not n:
                continue
            self._downs.setdefault(site, deque()).append((time, n))
            for end in ends:
                missing = min(n - fresh[end], self.t.flap_downs)
                if missing > 0:
                    self._pending.setdefault(end, deque()).extend([time] * missing)
        flapping: set[LinkKey | End] = set()
        for site, downs in list(self._downs.items()):
            while downs and downs[0][0] <= horizon:
                downs.popleft()
            if not downs:
                del self._downs[site]
                continue
            total = sum(n for _, n in downs)
            if total >= self.t.flap_downs:
                flapping.add(site)
                hits.append(self._flap_hit(site, total, isinstance(site, tuple) and site in down, counted))
        for end, n in fresh.items():
            site = self._site(end, graph)
            if not n or site in flapping or (isinstance(site, tuple) and site in down):
                continue  # the flap, or the link still down, says it
            span = float(spans[deltas.row(end) or 0])
            hits.append(
                _Hit(
                    "link-downed",
                    end,
                    Severity.warning,
                    f"LinkDownedCounter of {end} grew by {n}" + (f" in {_span(span)}" if span > 0 else ""),
                )
            )
        return flapping

    def _flap_hit(self, site: LinkKey | End, total: int, still_down: bool, counted: dict[End, int]) -> _Hit:
        ends = site if isinstance(site, tuple) else (site,)
        where = f"link {ends[0]} <-> {ends[1]}" if len(ends) == 2 else f"the link of {ends[0]}"
        seen = ", ".join(f"{end} +{counted[end]}" for end in ends if end in counted)
        return _Hit(
            "link-flap",
            ends[0],
            Severity.critical,
            f"{where} went down {total} times within {_span(self.t.flap_window_s)}"
            + (f" (LinkDownedCounter this poll: {seen})" if seen else "")
            + ("; it is down now" if still_down else ""),
            ISOLATE,
        )

    # --- symbol errors: a bit error rate ------------------------------------------------------------------------------

    def _symbol_errors(self, time: float, deltas: Deltas, graph: FabricGraph) -> list[_Hit]:
        out: list[_Hit] = []
        for end in list(self._events.get(SYMBOL, {})):
            link = graph.link_at(end)
            counts = [self._total(SYMBOL, end, time, w.window_s) for w in self.ber.windows]
            verdict = self.ber.judge(counts, link.rate_gbps if link is not None else None)
            if verdict is None:
                continue
            what = f"symbol errors on {end}: {verdict.describe()}"
            out.append(_Hit("symbol-errors", end, verdict.severity, what, ISOLATE))
        return out

    # --- counts against thresholds per window -------------------------------------------------------------------------

    def _windowed(
        self,
        time: float,
        deltas: Deltas,
        graph: FabricGraph,
        down: dict[LinkKey, str],
        flapping: set[LinkKey | End],
    ) -> list[_Hit]:
        out: list[_Hit] = []
        window = self.t.window_s
        catalog = load_ib_counters()
        for kind, (name, field_name, action) in _WINDOWED.items():
            limit = float(getattr(self.t, field_name))
            severity = Severity(catalog[name].over_threshold)
            for end in list(self._events.get(name, {})):
                count, span = self._total(name, end, time, window)
                if count <= limit:
                    continue
                site = self._site(end, graph)
                link_trouble = site in flapping or (isinstance(site, tuple) and site in down)
                if kind == "xmit-discards" and link_trouble:
                    continue  # a port whose link is down discards what it cannot send: the link says it
                out.append(
                    _Hit(
                        kind,
                        end,
                        severity,
                        f"{count:.0f} {name} on {end} in {_span(span)} (threshold {limit:g})",
                        action,
                    )
                )
        return out

    # --- packet drop rate ---------------------------------------------------------------------------------------------

    def _packet_drops(self, deltas: Deltas) -> list[_Hit]:
        """NVIDIA's PDR rule: d(PortRcvErrors + PortRcvRemotePhysicalErrors) / d(PortRcvPkts) between two polls."""
        local, remote, packets = deltas.of(RCV), deltas.of(REMOTE), deltas.of(RCV_PKTS)
        dropped = np.nan_to_num(local, nan=0.0) + np.nan_to_num(remote, nan=0.0)
        known = ~(np.isnan(local) & np.isnan(remote)) & (packets > 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            rate = np.where(known, dropped / np.where(packets > 0, packets, 1.0), 0.0)
        out: list[_Hit] = []
        for r in np.flatnonzero(rate > self.t.packet_drop_rate):
            end = deltas.ports[r]
            own = float(np.nan_to_num(local[r], nan=0.0))
            marked = float(np.nan_to_num(remote[r], nan=0.0))
            what = (
                f"{end} dropped {own + marked:.0f} of {packets[r]:.0f} packets received ({rate[r]:.1e}, over "
                f"{self.t.packet_drop_rate:g}): {own:.0f} receive errors, {marked:.0f} already marked bad upstream"
            )
            if own > 0:
                out.append(_Hit("packet-drop-rate", end, Severity.critical, what, ISOLATE))
            else:  # only packets corrupted before they reached this link: see _upstream
                out.append(_Hit("packet-drop-rate", end, Severity.warning, what))
        return out

    # --- congestion ---------------------------------------------------------------------------------------------------

    def _congestion(self, deltas: Deltas, graph: FabricGraph) -> list[_Hit]:
        c = deltas.counters.index(WAIT)
        waited, spans, saturated = deltas.delta[:, c], deltas.interval_s[:, c], deltas.saturated[:, c]
        out: list[_Hit] = []
        for r in np.flatnonzero((waited > 0) & (spans > 0)):
            end = deltas.ports[r]
            link = graph.link_at(end)
            rate = link.rate_gbps if link is not None else None
            if not rate:
                continue  # no share of the link's time without its rate
            bits = waited[r] * self.t.xmit_wait_bytes_per_tick * 8
            share = bits / (rate * 1e9 * spans[r])
            if share < self.t.congestion_info_fraction:
                continue
            level: Severity = Severity.warning if share >= self.t.congestion_warning_fraction else Severity.info
            what = (
                f"{end} waited for credits {'at least ' if saturated[r] else ''}{min(share, 1.0):.0%} of the last "
                f"{_span(spans[r])} ({waited[r]:.0f} PortXmitWait ticks at {rate:g} Gb/s): congestion downstream "
                "of the port, not a fault of it"
            )
            out.append(_Hit("congestion", end, level, what))
        return out

    # --- upstream: packets corrupted before this link ----------------------------------------------------------------

    def _own_link_clean(self, end: End, time: float, deltas: Deltas, graph: FabricGraph) -> bool:
        """No physical errors counted on the port's own cable, at either end, this poll or in the window."""
        ends = [end]
        peer = graph.peer(end)
        if peer is not None:
            ends.append(peer)
        for e in ends:
            for name in _OWN_LINK:
                value = deltas.get(e, name)
                if value:
                    return False
                if name in (SYMBOL, RCV) and self._total(name, e, time, self.t.window_s)[0] > 0:
                    return False
        return True

    def _upstream(self, hits: list[_Hit], time: float, deltas: Deltas, graph: FabricGraph) -> list[_Hit]:
        """Packets that arrived already marked bad, on a link that counts no physical errors of its own: the fault
        is upstream, and the port is not isolated."""
        marked_only = {h.end for h in hits if h.kind == "packet-drop-rate" and not h.action}
        physical = sorted((h.end, h.kind) for h in hits if h.kind in _PHYSICAL and h.action)
        out: list[_Hit] = []
        for hit in hits:
            upstream = hit.kind == "remote-physical-errors" or (hit.kind == "packet-drop-rate" and not hit.action)
            if not upstream:
                out.append(hit)
                continue
            if hit.kind == "remote-physical-errors" and hit.end in marked_only:
                continue  # the drop rate says it
            if not self._own_link_clean(hit.end, time, deltas, graph):
                if hit.kind == "packet-drop-rate":
                    out.append(hit)  # the link's own physical findings say the rest
                continue
            peer = graph.peer(hit.end)
            suspects = [f"{end} ({kind})" for end, kind in physical if peer is not None and end.node == peer.node]
            hit.what += (
                f"; the cable of {hit.end} counts no physical errors of its own, so the packets were corrupted "
                "upstream, before they reached it"
                + (f" (the sending node's links with errors: {', '.join(suspects)})" if suspects else "")
            )
            hit.severity = Severity.warning
            out.append(hit)
        return out

    # --- the two ends of a cable --------------------------------------------------------------------------------------

    def _merge(self, hits: list[_Hit], graph: FabricGraph) -> list[FabricFinding]:
        groups: dict[tuple[str, LinkKey | End], list[_Hit]] = {}
        for hit in hits:
            site: LinkKey | End = hit.end
            marked_only = hit.kind == "packet-drop-rate" and not hit.action
            if (hit.kind in _PHYSICAL and not marked_only) or hit.kind == "link-flap":
                site = self._site(hit.end, graph)
            groups.setdefault((hit.kind, site), []).append(hit)
        out: list[FabricFinding] = []
        for (kind, site), group in groups.items():
            if kind == "link-flap":
                hit = group[0]
                ends = site if isinstance(site, tuple) else None
                out.append(
                    FabricFinding(
                        kind,
                        hit.severity,
                        hit.what + ": a bad cable or transceiver",
                        _flap_fix(site),
                        ends=ends,
                        port=None if ends else hit.end,
                        action=ISOLATE,
                    )
                )
            elif isinstance(site, tuple) and len({h.end for h in group}) == 2:
                out.append(_both_ends(kind, site, group))
            elif isinstance(site, tuple):
                out.append(_one_end(kind, site, group[0]))
            else:
                out += [_port_finding(hit) for hit in group]
        return out

    # --- saturated counters, silent ports ---------------------------------------------------------------------------

    def _saturated(self, deltas: Deltas) -> list[FabricFinding]:
        out: list[FabricFinding] = []
        catalog = load_ib_counters()
        for r in np.flatnonzero(deltas.saturated.any(axis=1)):
            end = deltas.ports[r]
            names = [n for n, s in zip(deltas.counters, deltas.saturated[r], strict=True) if s]
            errors = [n for n in names if catalog[n].kind != "traffic"]
            shown = ", ".join(f"{n} ({catalog[n].bits}-bit)" for n in names)
            out.append(
                FabricFinding(
                    "counter-saturated",
                    Severity.warning if errors else Severity.info,
                    f"{end}: {shown} at the counter's maximum: it no longer counts, so the true count is unknown "
                    "and new counts are hidden",
                    CLEAR_COUNTERS_FIX,
                    port=end,
                )
            )
        return out

    def _silent(self, deltas: Deltas, graph: FabricGraph, down: dict[LinkKey, str]) -> list[FabricFinding]:
        down_ends = {end for key in down for end in key}
        out: list[FabricFinding] = []
        for r in np.flatnonzero(deltas.silent):
            end = deltas.ports[r]
            if end in down_ends or end in graph.idle_ports:
                continue  # a port without a link cannot answer: its link-down finding says so
            out.append(
                FabricFinding(
                    "port-silent",
                    Severity.warning,
                    f"{end} has not answered {int(deltas.missed[r])} counter polls in a row: its counters are "
                    "unknown until it answers again (their history is kept: the next reading counts from the last)",
                    f"check that {end.node} is up and its performance agent answers (`perfquery <lid> {end.port}`); "
                    "a hung or rebooting node or switch stops answering",
                    port=end,
                )
            )
        return out


# --- finding texts ----------------------------------------------------------------------------------------------------


def _flap_fix(site: LinkKey | End) -> str:
    where = f"the cable between {site[0]} and {site[1]}" if isinstance(site, tuple) else f"the cable of {site}"
    return f"reseat or replace {where} and its transceivers; isolate the port until it is fixed"


def _one_end(kind: str, key: LinkKey, hit: _Hit) -> FabricFinding:
    """A physical problem counted at one end of a cable."""
    peer = key[1] if hit.end == key[0] else key[0]
    severity, action = hit.severity, hit.action
    if kind == "link-downed":
        message = (
            f"{hit.what}, while {peer} at the other end did not count it: the far end restarted or had its counters "
            "cleared, or was not read; a down counted by both ends would be the cable"
        )
        fix = f"check why the link of {hit.end} went down (the far end's host or switch log); {_LINK_DOWN_FIX}"
        action = ""
    else:
        message = (
            f"{hit.what}; only {hit.end} counts {_WHAT.get(kind, kind)}, not {peer}: the receiver or transceiver at "
            f"{hit.end}, or the cable toward it from {peer}"
        )
        fix = (
            f"reseat or replace the cable or transceiver at {hit.end} (then the one at {peer} if the errors go on)"
            + ("; isolate the port until it is fixed" if action else "")
        )
        if kind == "buffer-overrun":
            fix += "; check that both ends use the same VL and buffer settings"
    return FabricFinding(kind, severity, message, fix, ends=key, port=hit.end, action=action)


def _both_ends(kind: str, key: LinkKey, group: list[_Hit]) -> FabricFinding:
    """One physical problem counted at both ends of a cable: the cable itself."""
    severity: Severity = Severity.info
    for hit in group:
        severity = _worst(severity, hit.severity)
    evidence = "; ".join(hit.what for hit in sorted(group, key=lambda h: h.end))
    action = ISOLATE if any(h.action for h in group) else ""
    if kind == "link-downed":
        severity, action = Severity.critical, ISOLATE  # NVIDIA's rule: a down counted at both ends isolates the link
        cause = "a down counted at both ends is the cable or a transceiver"
    else:
        cause = f"both ends count {_WHAT.get(kind, kind)}: the cable itself, or both transceivers"
    fix = f"replace the cable between {key[0]} and {key[1]} (or both transceivers)" + (
        "; isolate the port until it is fixed" if action else ""
    )
    return FabricFinding(
        kind, severity, f"cable {key[0]} <-> {key[1]}: {evidence}: {cause}", fix, ends=key, action=action
    )


def _port_finding(hit: _Hit) -> FabricFinding:
    """A finding about one port, outside any cable's correlation."""
    if hit.kind == "congestion":
        fix = (
            f"check congestion and routing beyond {hit.end}: a slow receiver, an oversubscribed link or an unbalanced "
            "route (the routing engine, adaptive routing); it is not a fault of the port"
        )
    elif hit.kind == "xmit-discards":
        fix = (
            f"read the discard details (`perfquery -D <lid> {hit.end.port}`): timeouts point at congestion or "
            "routing, inactive discards at a link that was down"
        )
    elif hit.kind == "vl15-dropped":
        fix = "check whether the subnet manager sweeps too often or the port's management traffic is overloaded"
    elif hit.kind in ("remote-physical-errors", "packet-drop-rate") and not hit.action:
        fix = (
            f"look for symbol and receive errors on the links the packets cross before {hit.end}; "
            "do not isolate this port"
        )
    elif hit.action:
        fix = f"reseat or replace the cable or transceiver at {hit.end}; isolate the port until it is fixed"
    else:
        fix = f"check the link of {hit.end} and both ends' settings"
    return FabricFinding(hit.kind, hit.severity, hit.what, fix, port=hit.end, action=hit.action)
