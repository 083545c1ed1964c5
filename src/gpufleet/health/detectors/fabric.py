"""InfiniBand detectors: port state and counters against BER and error thresholds.

- Link down: the port leaves ACTIVE/LinkUp (sysfs state, read every collection), or LinkDownedCounter grows
  between two readings (a down too short to be seen in the state). Each change of state is also a `LinkEvent`.
- Link flap: `fabric.flap_downs` (two) or more downs within the flap window; it supersedes the link-down finding
  for that port.
- Symbol errors against a bit error rate at the port's link rate (infiniband_port_rate_bytes_per_second in the
  frame), in NVIDIA's two windows (1e-14 over 12 minutes, critical; 1e-15 over 125 minutes, a warning), judged by
  health.symbol_errors as the fabric service and triage judge them: a bad cable or transceiver. A port whose rate is
  unknown is held against infiniband-diags' threshold instead. Receive errors above infiniband-diags' threshold
  point at the same physical layer.
- Transmit discards and VL15 drops above their thresholds: congestion, unless the port's link is down; discards
  counted while it was down (a reading that saw it down, go down or come back) stay the link's once it is back. A
  count over its threshold (receive errors included) is rated as the IB counter catalog rates the counter, for every
  judge of it.
"""

from __future__ import annotations

from collections import defaultdict, deque

import numpy as np

from gpufleet.catalog.ib_counters import load_ib_counters
from gpufleet.health.detectors.base import NodeSetup, node_detector
from gpufleet.health.detectors.seen import NodeSeen
from gpufleet.health.detectors.window import CounterWindow
from gpufleet.health.symbol_errors import SymbolErrorBudget
from gpufleet.health.thresholds import Thresholds
from gpufleet.model import Entity, EntityKind, RootCause, Severity
from gpufleet.model.observe import Finding, LinkEvent
from gpufleet.telemetry.frame import MetricFrame

SYMBOL = "infiniband_port_symbol_errors_total"
RCV = "infiniband_port_receive_errors_total"
DOWNED = "infiniband_port_link_downed_total"
DISCARDS = "infiniband_port_transmit_discards_total"
VL15 = "infiniband_port_vl15_dropped_total"


@node_detector("fabric", needs=("frame",))
class FabricDetectors:
    def __init__(self, frame: MetricFrame, thresholds: Thresholds) -> None:
        self.t = thresholds.infiniband
        self.flap_downs = thresholds.fabric.flap_downs  # as many downs in the window as the fabric service counts
        n = len(frame.ib_ports)
        self.ports = list(frame.ib_ports)
        self.entities = [Entity(EntityKind.port, p.hostname, p.port, p.hca) for p in frame.ib_ports]
        self.ber = SymbolErrorBudget(thresholds)
        self.symbol = [CounterWindow(w.window_s, resolution_s=5.0) for w in self.ber.windows]  # shortest first
        self.rcv = CounterWindow(self.t.window_s, resolution_s=5.0)
        self.discards = CounterWindow(self.t.window_s, resolution_s=5.0)
        self.vl15 = CounterWindow(self.t.window_s, resolution_s=5.0)
        self.last_downed = np.full(n, np.nan)
        self.last_discards = np.full(n, np.nan)
        self.discards_lost = np.zeros(n)  # discards counted while a port's link was down: the link's, not congestion
        self.up = np.ones(n, dtype=bool)
        self.downs: dict[int, deque[float]] = defaultdict(deque)

    @classmethod
    def build(cls, setup: NodeSetup) -> FabricDetectors:
        return cls(setup.frame, setup.thresholds)

    def _state(self, now: float, frame: MetricFrame, links: list[LinkEvent], out: list[Finding]) -> None:
        reading = frame.ib_up
        known = ~np.isnan(reading)
        up_now = reading >= 0.5
        for i in np.flatnonzero(known & (up_now != self.up)):
            p = self.ports[int(i)]
            came_up = bool(up_now[i])
            detail = f"{p.hca} port {p.port} {'came up (ACTIVE/LinkUp)' if came_up else 'went down'}"
            links.append(
                LinkEvent(now, p.hostname, p.hca, p.port, came_up, "ACTIVE" if came_up else "DOWN", "", detail)
            )
            if not came_up:
                out += self._down(now, int(i), f"{p.hostname}: {detail}")
        self.up = np.where(known, up_now, self.up)

    def _down(self, now: float, i: int, evidence: str) -> list[Finding]:
        downs = self.downs[i]
        if downs and now - downs[-1] < 2.0:  # the state and the counter report the same event
            return []
        downs.append(now)
        while downs and now - downs[0] > self.t.flap_window_s:
            downs.popleft()
        ent = self.entities[i]
        if len(downs) >= self.flap_downs:
            return [
                Finding(
                    now,
                    RootCause.ib_link_flap,
                    ent,
                    Severity.critical,
                    f"link flapping on {ent}",
                    f"{len(downs)} link downs within {self.t.flap_window_s / 60:.0f} min; last: {evidence}",
                    "fabric",
                    action="ISOLATE_PORT",
                )
            ]
        return [
            Finding(
                now,
                RootCause.ib_link_down,
                ent,
                Severity.critical,
                f"link down on {ent}",
                evidence,
                "fabric",
                action="ISOLATE_PORT",
            )
        ]

    def _discards_while_down(self, frame: MetricFrame, link_lost: np.ndarray) -> None:
        """Set aside the transmit discards of each port whose link was down at some time since the last reading:
        PortXmitDiscards counts what a port discarded "because the port is down or congested" (IBA PortCounters),
        and those are the link's, said by its own finding, not congestion once the link is back."""
        discards = frame.ib(DISCARDS)
        step = discards - self.last_discards  # NaN where either reading is missing: nothing set aside
        self.discards_lost = np.where(step < 0, 0.0, self.discards_lost)  # the counters were cleared
        self.discards_lost += np.where(link_lost & (step > 0), step, 0.0)
        self.last_discards = np.where(np.isnan(discards), self.last_discards, discards)

    def _symbol_errors(self, now: float, frame: MetricFrame) -> list[Finding]:
        """Each port's symbol errors within each window, judged by the one symbol-error judgement."""
        values = frame.ib(SYMBOL)
        for window in self.symbol:
            window.push(now, values)
        grown = [w.growth() for w in self.symbol]
        if any(g is None for g in grown):
            return []
        counts = [g for g in grown if g is not None]
        rates = frame.ib_rate_gbps()  # NaN where the port's rate is unknown: judged against the counter's threshold
        out: list[Finding] = []
        for i in np.flatnonzero(np.nan_to_num(counts[-1]) > 0):  # the longest window holds every shorter one's
            verdict = self.ber.judge(
                [(float(c[i]), w.window_s) for c, w in zip(counts, self.ber.windows, strict=True)],
                float(rates[i]),
            )
            if verdict is None:
                continue
            ent = self.entities[i]
            out.append(
                Finding(
                    now,
                    RootCause.ib_symbol_errors,
                    ent,
                    verdict.severity,
                    f"bad link (symbol errors) on {ent}",
                    f"symbol errors: {verdict.describe()}",
                    "fabric",
                    action="ISOLATE_PORT",
                )
            )
        return out

    def detect(self, now: float, seen: NodeSeen) -> list[Finding]:
        """Findings of this collection; state changes are recorded in `seen.links`."""
        out: list[Finding] = []
        frame = seen.frame
        if frame is None or not len(self.entities):
            return out
        was_up = self.up.copy()
        self._state(now, frame, seen.links, out)
        downed = frame.ib(DOWNED)
        went_down = np.nan_to_num(downed - self.last_downed, nan=0.0) > 0
        for i in np.flatnonzero(went_down):
            out += self._down(now, int(i), f"LinkDownedCounter {self.last_downed[i]:.0f} -> {downed[i]:.0f}")
        self.last_downed = np.where(np.isnan(downed), self.last_downed, downed)
        # a flapping link discards between its downs too: the flap's, as the fabric service judges it
        flapping = np.zeros(len(self.entities), dtype=bool)
        for at_port, downs in self.downs.items():
            flapping[at_port] = sum(1 for at in downs if now - at <= self.t.flap_window_s) >= self.flap_downs
        self._discards_while_down(frame, ~was_up | ~self.up | went_down | flapping)
        for i in np.flatnonzero(~self.up):  # a link that stays down stays an active incident
            ent = self.entities[i]
            cause = RootCause.ib_link_flap if len(self.downs[int(i)]) >= self.flap_downs else RootCause.ib_link_down
            out.append(
                Finding(
                    now,
                    cause,
                    ent,
                    Severity.critical,
                    f"link down on {ent}",
                    "link still down",
                    "fabric",
                    action="ISOLATE_PORT",
                )
            )

        out += self._symbol_errors(now, frame)
        catalog = load_ib_counters()
        for window, counter, metric, limit, cause, what in (
            (self.rcv, "PortRcvErrors", RCV, self.t.rcv_errors_per_window, RootCause.ib_symbol_errors,
             "receive errors"),
            (self.discards, "PortXmitDiscards", DISCARDS, self.t.xmit_discards_per_window, RootCause.ib_congestion,
             "transmit discards"),
            (self.vl15, "VL15Dropped", VL15, self.t.vl15_dropped_per_window, RootCause.ib_congestion, "VL15 drops"),
        ):  # fmt: skip
            # over its threshold, a count is what the IB counter catalog rates it, for every judge of the counter
            severity = Severity(catalog[counter].over_threshold)
            window.push(now, frame.ib(metric) - self.discards_lost if metric == DISCARDS else frame.ib(metric))
            grown = window.growth()
            if grown is None:
                continue
            for i in np.flatnonzero((grown > limit) & self.up):  # discards on a dead link are the link's fault
                ent = self.entities[i]
                out.append(
                    Finding(
                        now,
                        cause,
                        ent,
                        severity,
                        f"{what} on {ent}",
                        f"{grown[i]:.0f} {what} in {window.span() / 60:.0f} min (threshold {limit:g})",
                        "fabric",
                        action="ISOLATE_PORT" if cause is RootCause.ib_symbol_errors else "",
                    )
                )
        return out
