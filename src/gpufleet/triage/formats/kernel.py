"""Kernel and system logs: the kernel log itself, the link events read from any syslog, and the NHC health log
that quotes kernel lines."""

from __future__ import annotations

from typing import Any

from gpufleet.model.kernel import KernelEvent
from gpufleet.parsers.infiniband.diags import count_flaps, parse_link_events
from gpufleet.parsers.kernel.kmsg import parse_kmsg
from gpufleet.parsers.nhc import NodeHealth, parse_health_log
from gpufleet.triage.formats.registry import Format, Option, Table, View, cell
from gpufleet.triage.readers.kernel import read_kernel_log, read_numbered_kernel_log
from gpufleet.triage.readers.nhc import read_nhc


def _parse_kernel_log(text: str, source: str) -> list[KernelEvent]:
    return parse_kmsg(text)


KERNEL_LOG = Format(
    name="kernel-log",
    summary="A kernel log (`dmesg`, `journalctl -k`, kern.log, a syslog): Xid, SXid, lost GPUs, link events, OOM kills",
    signs=(
        (r"NVRM: (?:Xid|GPU at PCI|A GPU crash dump|Last reset|os_)", 10),
        (r"nvidia-nvswitch\d*: SXid", 10),
        (r"NVRM: (?:GPU [0-9a-fA-F:.]+: )?(?:RmInitAdapter|rm_init_adapter) failed", 10),
        # amdgpu's and habanalabs' device messages (dev_err/dev_info), which the agent's kernel-log parser reads
        (r"\bamdgpu [0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]: ", 8),
        (r"\bhabanalabs (?:hl\d+|[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]): ", 8),
        # amdgpu's DRM_ERROR lines, which name no device: `[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx ...`
        # (drivers/gpu/drm/drm_print.c __drm_err: "[" DRM_NAME ":%ps] *ERROR* %pV", where %ps of a module's function
        # prints `name [module]`; Linux 4.x-6.x); `dmesg -T | grep drm` leaves only these
        (r"\[drm:[\w.]+ \[amdgpu\]\] ", 8),
        (r"\bNVRM:", 4),
        (r"^\s*\[\s*\d+\.\d{3,}\]", 6),
        (r"^\[\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}\]", 4),
        (r"^\w{3} [ \d]\d \d\d:\d\d:\d\d \S+ kernel:", 6),
        (r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\S* \S+ kernel:", 6),
        # a syslog or journal line of any program, and the link events its reader counts
        (r"^(?:\w{3} [ \d]\d \d\d:\d\d:\d\d|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\S*) [\w.-]+ [\w.@-]+(?:\[\d+\])?: ", 3),
        (r": (?:lost carrier|Gained carrier)$|mlx5_core \S+ \S+: Link (?:up|down)\b", 6),
        # the OOM killer's report (mm/oom_kill.c, mm/memcontrol.c): a kill, its constraint line, who invoked it
        (r"(?:Memory cgroup out of memory|Out of memory): Kill(?:ed)? process \d+|oom-kill:constraint=", 8),
        (r"\binvoked oom-killer: |oom_reaper: reaped process \d+", 6),
    ),
    parse=_parse_kernel_log,
    judge=read_kernel_log,
    judge_numbered=read_numbered_kernel_log,
    read_help="A kernel log: every GPU report (Xid, SXid, fallen off the bus, reset required, amdgpu and habanalabs "
    "faults) the agent's parser reads, with its code, PCI id and message.",
)


def _parse_link_events(text: str, source: str, year: int | None = None) -> dict[str, Any]:
    events = parse_link_events(text, year=year)
    return {"flaps": count_flaps(events), "events": events}


def _link_events_view(data: dict[str, Any], source: str) -> View:
    rows = [[e.line, cell(e.wall_time), cell(e.host), e.interface, e.state] for e in data["events"]]
    flaps = tuple(f"{interface}: {downs} flap(s)" for interface, downs in sorted(data["flaps"].items()))
    return View((Table(("LINE", "TIME", "HOST", "INTERFACE", "STATE"), rows),), flaps)


LINK_EVENTS = Format(
    name="link-events",
    summary="A syslog or kernel log's IB/RoCE link down and up events, and the flaps (downs) per interface",
    parse=_parse_link_events,
    render=_link_events_view,
    options=(Option("year", int, "Year of syslog stamps that carry none (default: this year)."),),
    judged_as="kernel-log",  # triage tells these lines as the log they are; its reader judges flaps and downs
)


def _nhc_view(nodes: list[NodeHealth], source: str) -> View:
    rows = [
        [n.node, "Healthy" if n.healthy else "ERROR", cell(n.check), n.message,
         ", ".join(str(e.xid) for e in n.kernel_events if e.xid is not None)]
        for n in nodes
    ]  # fmt: skip
    return View((Table(("NODE", "STATUS", "CHECK", "MESSAGE", "XIDS"), rows, source),))


NHC = Format(
    name="nhc",
    summary="An NHC / Azure HPC node health check `.health.log`: each node's verdict, and the Xids failed checks quote",
    signs=(
        (r"^[\w.-]+ ?\| ?(?:Healthy\s*$|ERROR: )", 10),
        (r"^[\w.-]+ ?\| ?ERROR: (?:nhc: )?Health check failed: ", 6),
    ),
    parse=parse_health_log,
    judge=read_nhc,
    render=_nhc_view,
)
