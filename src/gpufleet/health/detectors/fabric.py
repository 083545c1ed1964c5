"""InfiniBand detectors: port counters against BER and error thresholds, and link state from the host's own log.

- Symbol errors over NVIDIA's 12-minute window against a BER of 1e-14 (2.88 errors at 400 Gb/s): a bad cable or
  transceiver. Receive errors above infiniband-diags' threshold point at the same physical layer.
- Link down: the moment the host reports carrier lost (systemd-networkd / the kernel), or LinkDownedCounter grows.
- Link flap: two or more downs within the flap window; it supersedes the link-down finding for that port.
- Transmit discards and VL15 drops above their thresholds: congestion, unless the port's link is down.
"""

from __future__ import annotations

import re
from collections import defaultdict, deque

import numpy as np

from gpufleet.health.detectors.window import CounterWindow
from gpufleet.health.findings import Finding
from gpufleet.health.thresholds import Thresholds
from gpufleet.model import Entity, EntityKind, RootCause, Severity
from gpufleet.telemetry.frame import MetricFrame

_CARRIER = re.compile(r"\b(?P<dev>ib\d+|ibp\S+|en\S+): (?P<what>lost carrier|Gained carrier|Link down|Link up)", re.I)

SYMBOL = "infiniband_port_symbol_errors_total"
RCV = "infiniband_port_receive_errors_total"
DOWNED = "infiniband_port_link_downed_total"
DISCARDS = "infiniband_port_transmit_discards_total"
VL15 = "infiniband_port_vl15_dropped_total"


class FabricDetectors:
    def __init__(
        self,
        frame: MetricFrame,
        thresholds: Thresholds,
        speeds_gbps: np.ndarray | None = None,
        netdev_to_hca: dict[tuple[str, str], str] | None = None,
    ) -> None:
        self.t = thresholds.infiniband
        n = len(frame.ib_ports)
        self.entities = [Entity(EntityKind.port, p.hostname, p.port, p.hca) for p in frame.ib_ports]
        self.index = {(p.hostname, p.hca): i for i, p in enumerate(frame.ib_ports)}
        self.speeds = speeds_gbps if speeds_gbps is not None else np.full(n, 400.0)
        self.netdev_to_hca = netdev_to_hca or {}
        self.symbol = CounterWindow(self.t.symbol_window_s, resolution_s=5.0)
        self.rcv = CounterWindow(self.t.window_s, resolution_s=5.0)
        self.discards = CounterWindow(self.t.window_s, resolution_s=5.0)
        self.vl15 = CounterWindow(self.t.window_s, resolution_s=5.0)
        self.last_downed = np.full(n, np.nan)
        self.up = np.ones(n, dtype=bool)
        self.downs: dict[int, deque[float]] = defaultdict(deque)

    def _hca(self, node: str, netdev: str) -> str:
        mapped = self.netdev_to_hca.get((node, netdev))
        if mapped:
            return mapped
        digits = re.sub(r"\D", "", netdev)
        return f"mlx5_{digits or 0}"

    def link_event(self, now: float, node: str, message: str) -> list[Finding]:
        """A line from the host's log; returns findings if it reports a port going down."""
        match = _CARRIER.search(message)
        if match is None:
            return []
        i = self.index.get((node, self._hca(node, match.group("dev"))))
        if i is None:
            return []
        down = match.group("what").lower() in ("lost carrier", "link down")
        self.up[i] = not down
        return self._down(now, i, message.strip()) if down else []

    def _down(self, now: float, i: int, evidence: str) -> list[Finding]:
        downs = self.downs[i]
        if downs and now - downs[-1] < 2.0:  # the log line and the counter report the same event
            return []
        downs.append(now)
        while downs and now - downs[0] > self.t.flap_window_s:
            downs.popleft()
        ent = self.entities[i]
        if len(downs) >= 2:
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

    def observe(self, now: float, frame: MetricFrame) -> list[Finding]:
        out: list[Finding] = []
        if not len(self.entities):
            return out
        downed = frame.ib(DOWNED)
        grew = np.flatnonzero(np.nan_to_num(downed - self.last_downed, nan=0.0) > 0)
        for i in grew:
            out += self._down(now, int(i), f"LinkDownedCounter {self.last_downed[i]:.0f} -> {downed[i]:.0f}")
        self.last_downed = np.where(np.isnan(downed), self.last_downed, downed)
        for i in np.flatnonzero(~self.up):  # a link that stays down stays an active incident
            ent = self.entities[i]
            cause = RootCause.ib_link_flap if len(self.downs[int(i)]) >= 2 else RootCause.ib_link_down
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

        self.symbol.push(now, frame.ib(SYMBOL))
        grown = self.symbol.growth()
        if grown is not None:
            budget = self.t.symbol_budget(1.0) * self.speeds
            for i in np.flatnonzero(grown > budget):
                ent = self.entities[i]
                out.append(
                    Finding(
                        now,
                        RootCause.ib_symbol_errors,
                        ent,
                        Severity.warning,
                        f"bad link (symbol errors) on {ent}",
                        f"{grown[i]:.0f} symbol errors in {self.symbol.span() / 60:.0f} min, over the "
                        f"{budget[i]:.2f} a BER of {self.t.symbol_ber:g} allows at {self.speeds[i]:g} Gb/s",
                        "fabric",
                        action="ISOLATE_PORT",
                    )
                )
        for window, metric, limit, cause, what in (
            (self.rcv, RCV, self.t.rcv_errors_per_window, RootCause.ib_symbol_errors, "receive errors"),
            (self.discards, DISCARDS, self.t.xmit_discards_per_window, RootCause.ib_congestion, "transmit discards"),
            (self.vl15, VL15, self.t.vl15_dropped_per_window, RootCause.ib_congestion, "VL15 drops"),
        ):
            window.push(now, frame.ib(metric))
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
                        Severity.warning,
                        f"{what} on {ent}",
                        f"{grown[i]:.0f} {what} in {window.span() / 60:.0f} min (threshold {limit:g})",
                        "fabric",
                        action="ISOLATE_PORT" if cause is RootCause.ib_symbol_errors else "",
                    )
                )
        return out
