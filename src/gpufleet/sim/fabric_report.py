"""What the twin's fabric watcher reports each poll: the fabric as discovery would find it (a cable that is down is
not discovered; its ports show Down/Polling, or Down/Disabled when isolated), and the counters of the ports with
errors, as ibqueryerrors --data lists them. It goes through the same door as a real subnet's poll."""

from __future__ import annotations

import msgspec
import numpy as np

from gpufleet.fabric.graph import End, FabricGraph, Link, NodeKind
from gpufleet.fabric.intended import intended_graph
from gpufleet.fabric.report import report_from_graph
from gpufleet.model.observe import FabricReport, SubnetManagerFact
from gpufleet.sim.source import PORT_COUNTERS
from gpufleet.sim.twin import Twin

# the twin's counters by the PMA names the tools print; data counters count octets divided by 4
PMA_NAMES = {**PORT_COUNTERS, "xmit_bytes": "PortXmitData", "rcv_bytes": "PortRcvData"}
ERROR_COUNTERS = ("symbol_errors", "link_error_recovery", "link_downed", "rcv_errors", "rcv_remote_phys_errors",
                  "xmit_discards", "vl15_dropped")  # fmt: skip
SM_SWEEP_S = 5.0  # OpenSM's sweep_interval in the shared ibsim recipe


class TwinFabricWatch:
    """Builds the twin's fabric poll; the topology's static part is made once."""

    def __init__(self, twin: Twin, poll_s: float = 30.0) -> None:
        self.twin = twin
        self.poll_s = poll_s
        self.next_poll = 0.0
        # the twin's cables train as designed: nodes, widths and speeds are the manifest's intended fabric
        self.design = intended_graph(twin.cluster)
        self.nodes = list(self.design.nodes.values())
        lid = 1
        for node in self.nodes:
            if node.kind is NodeKind.switch:
                node.lid = lid
                lid += 1
        self.port_lid: dict[int, int] = {}
        for i, owner in enumerate(twin.ports.owner):
            if "/" in owner:
                self.port_lid[i] = lid
                lid += 1
        self.switch_lid = {n.name: n.lid for n in self.nodes if n.kind is NodeKind.switch}
        self._topology: tuple[tuple[bytes, frozenset[int]], FabricReport] | None = None  # (cabling, as found)

    def due(self, now: float) -> bool:
        return now >= self.next_poll

    def report(self, now: float, wall: float) -> FabricReport:
        """The poll at twin time `now`, stamped `wall` (the epoch time the twin's agents use)."""
        self.next_poll = now + self.poll_s
        ports = self.twin.ports
        cabling = (ports.up.tobytes(), frozenset(ports.disabled))
        if self._topology is None or self._topology[0] != cabling:  # discovery finds what it found last poll
            self._topology = (cabling, self._discovered(wall))
        counters = self._counters()
        polled = report_from_graph(FabricGraph(source="twin"), subnet="default", time=wall, counters=counters)
        report = msgspec.structs.replace(
            self._topology[1], time=wall, counter_names=polled.counter_names, counters=polled.counters
        )
        first_switch = next((n for n in self.nodes if n.kind is NodeKind.switch), None)
        if first_switch is not None:
            report.sm = SubnetManagerFact(first_switch.lid or 1, first_switch.guid, int(now // SM_SWEEP_S), 0,
                                          "SMINFO_MASTER")  # fmt: skip
        return report

    def _discovered(self, wall: float) -> FabricReport:
        """The topology as discovery finds it, without counters."""
        ports = self.twin.ports
        graph = FabricGraph(source="twin")
        for node in self.nodes:
            graph.add_node(node)
        for i in range(0, ports.n, 2):
            j = i + 1
            a = End(ports.owner[i], int(ports.number[i]))
            b = End(ports.owner[j], int(ports.number[j]))
            if ports.up[i]:
                designed = self.design.link_at(a)
                width, speed = (designed.width, designed.speed) if designed is not None else (None, None)
                graph.add_link(Link(a, b, width, speed, True, self._lid(i), self._lid(j)))
            else:
                for k, end in ((i, a), (j, b)):
                    graph.idle_ports[end] = "Down/Disabled" if k in ports.disabled else "Down/Polling"
        return report_from_graph(graph, subnet="default", time=wall, source="twin", poll_s=self.poll_s)

    def _counters(self) -> dict[End, dict[str, int]]:
        """The ports with errors, each with every counter (ibqueryerrors --data)."""
        ports = self.twin.ports
        errors = np.zeros(ports.n, dtype=bool)
        for name in ERROR_COUNTERS:
            errors |= ports.counters[name] > 0
        counters: dict[End, dict[str, int]] = {}
        for k in map(int, np.flatnonzero(errors)):
            values = {}
            for name, pma in PMA_NAMES.items():
                value = int(ports.counters[name][k])
                values[pma] = value // 4 if name.endswith("_bytes") else value
            counters[End(ports.owner[k], int(ports.number[k]))] = values
        return counters

    def _lid(self, i: int) -> int | None:
        owner = self.twin.ports.owner[i]
        return self.port_lid.get(i) if "/" in owner else self.switch_lid.get(owner)
