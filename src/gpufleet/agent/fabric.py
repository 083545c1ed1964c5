"""The fabric on the agent that watches it (`gpufleet agent --fabric`, on a host with an HCA on each subnet): every
poll runs discovery and the counter sweep of each subnet in a thread of its own, so a slow or hung tool never holds
up a collection, and hands the reports to the pusher, which sends each once (a lost push is sent again).

The analysis (validation against the intended cabling, counter rates, both ends of a cable, incidents) is the
control plane's: one place sees every subnet, switch side and host side together.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from gpufleet.background import Background
from gpufleet.errors import ParseError
from gpufleet.fabric.counters import readings_from_ibqueryerrors
from gpufleet.fabric.graph import End, FabricGraph, NodeKind
from gpufleet.fabric.report import report_from_graph
from gpufleet.model.fabric_settings import HcaPortSetting, HostFabricSettings, SubnetManagerSeen
from gpufleet.model.observe import FabricReport
from gpufleet.parsers.infiniband.diags import parse_sminfo
from gpufleet.parsers.infiniband.saquery import parse_smir
from gpufleet.parsers.infiniband.smpquery import parse_portinfo
from gpufleet.sources.infiniband.diag_tools import FabricToolError, FabricTools
from gpufleet.sources.infiniband.settings import read_host_settings

log = logging.getLogger("gpufleet.agent")

DEFAULT_POLL_S = 30.0
PORT_MTU_EVERY = 10  # polls between two reads of every HCA port's MTU through SMPs (one smpquery per port)
MAX_PORT_MTU_QUERIES = 4096


class FabricWatch(Background):
    thread_name = "fabric"

    def __init__(
        self,
        subnets: list[FabricTools],
        deliver: Callable[[list[FabricReport]], None],
        poll_s: float = DEFAULT_POLL_S,
        read_settings: Callable[[], HostFabricSettings] | None = read_host_settings,
    ) -> None:
        super().__init__()
        self.subnets = subnets
        self.read_settings = read_settings
        self.deliver = deliver
        self.poll_s = poll_s
        self.polls = 0
        self.failing: dict[str, str] = {}

    def poll(self) -> list[FabricReport]:
        reports = [poll_subnet(tools, poll_s=self.poll_s, read_settings=self.read_settings) for tools in self.subnets]
        for report in reports:
            why = "; ".join(report.errors)
            if why and self.failing.get(report.subnet) != why:
                log.warning("fabric poll of subnet %s: %s", report.subnet, why)
            elif not why and report.subnet in self.failing:
                log.info("fabric poll of subnet %s works again", report.subnet)
            if why:
                self.failing[report.subnet] = why
            else:
                self.failing.pop(report.subnet, None)
        self.polls += 1
        self.deliver(reports)
        return reports

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                self.poll()
            except Exception:  # a bug in one poll must not end the watch
                log.exception("fabric poll failed")
            self.stopping.wait(self.poll_s)


def poll_subnet(
    tools: FabricTools,
    *,
    poll_s: float = 0.0,
    now: Callable[[], float] = time.time,
    read_settings: Callable[[], HostFabricSettings] | None = None,
    port_mtus: bool = False,
) -> FabricReport:
    """One poll: discovery, then every port's error counters, then this host's fabric settings (HCA MTU, RoCE QoS,
    OpenSM's configuration, SHARP's aggregation manager). A tool that fails or times out is reported in the
    poll's `errors`, and what the others found still goes out."""
    started = time.monotonic()
    errors: list[str] = []
    graph = FabricGraph(source="live")
    counters: dict[End, dict[str, int]] = {}
    try:
        graph = tools.discover()
    except (FabricToolError, ParseError) as exc:
        errors.append(exc.message)
    sm = None
    if graph.nodes:
        try:
            counters = readings_from_ibqueryerrors(tools.query_errors(), graph).as_mapping()
        except (FabricToolError, ParseError) as exc:
            errors.append(exc.message)
        try:
            sm = parse_sminfo(tools.run("sminfo").stdout)
        except FabricToolError as exc:
            errors.append(exc.message)
    report = report_from_graph(
        graph,
        subnet=tools.subnet,
        time=now(),
        source="live",
        counters=counters,
        counters_complete=False,
        errors=errors,
        poll_s=poll_s,
        took_s=time.monotonic() - started,
    )
    report.sm = sm
    if read_settings is not None:
        try:
            settings = read_settings()
        except OSError as exc:  # an unreadable sysfs or config file: the rest of the poll still goes out
            report.errors.append(f"fabric settings: {exc}")
        else:
            if graph.nodes:
                settings.subnet_managers, problem = _subnet_managers(tools)
                settings.errors.extend(problem)
            report.settings = [settings]
    if port_mtus and graph.nodes:
        report.settings.extend(_port_mtus(tools, graph))
    return report


def _port_mtus(tools: FabricTools, graph: FabricGraph) -> list[HostFabricSettings]:
    """Every cabled HCA port's MTU as the SM set it (NeighborMTU) and its capability (MtuCap), per host."""
    hosts: dict[str, HostFabricSettings] = {}
    asked = 0
    for link in graph.links:
        for end, lid in ((link.a, link.a_lid), (link.b, link.b_lid)):
            node = graph.nodes.get(end.node)
            if node is None or node.kind is NodeKind.switch or not lid or asked >= MAX_PORT_MTU_QUERIES:
                continue
            asked += 1
            host = node.host or end.node.split("/", 1)[0]
            entry = hosts.setdefault(host, HostFabricSettings(host=host, source="sm"))
            try:
                info = parse_portinfo(tools.run("smpquery", "portinfo", str(lid), str(end.port)).stdout)
            except FabricToolError as exc:
                entry.errors.append(f"port MTU of {end}: {exc.message}"[:256])
                continue
            if info is not None:
                device = end.node.split("/", 1)[1] if "/" in end.node else end.node
                entry.ports.append(
                    HcaPortSetting(device, end.port, "InfiniBand", info.link_state, info.neighbor_mtu, info.mtu_cap)
                )
    return list(hosts.values())


def _subnet_managers(tools: FabricTools) -> tuple[list[SubnetManagerSeen], list[str]]:
    """Every subnet manager the subnet administrator knows (`saquery SMIR`): the master and its standbys."""
    try:
        text = tools.run("saquery", "SMIR").stdout
    except FabricToolError as exc:
        return [], [f"subnet managers not listed: {exc.message}"]
    return [SubnetManagerSeen(r.guid, r.priority, r.state, r.lid, r.activity) for r in parse_smir(text)], []
