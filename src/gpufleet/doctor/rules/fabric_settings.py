"""Fabric settings that break collectives (GF050-GF054): what hosts report of their InfiniBand and RoCE settings
and their subnet manager (`gpufleet fabric settings -o json`, one document per host or several, read as a
`fabricSettings` list), judged by `gpufleet.fabric.settings`, and the jobs' NCCL environment against them: the
traffic class NCCL_IB_TC puts RoCE packets on, and SHARP (NCCL_COLLNET_ENABLE, SHARP_COLL_ENABLE_SAT) against
the aggregation manager the hosts show."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import msgspec

from gpufleet.doctor.load import Document
from gpufleet.doctor.objects import PodTemplate
from gpufleet.doctor.rules.base import Context, Hit, rule
from gpufleet.fabric.findings import FabricFinding
from gpufleet.fabric.settings import judge, lossless_priority, tc_for_priority
from gpufleet.model import Severity
from gpufleet.model.fabric_settings import HostFabricSettings

KIND = "fabric-settings"
MTU_KINDS = ("ib-mtu-mismatch", "ib-mtu-below-capability", "roce-mtu", "partition-mtu")
ROCE_KINDS = ("roce-no-pfc", "roce-trust-pcp", "roce-tc-lossy", "roce-no-ecn", "roce-pfc-mismatch")
SM_KINDS = ("opensm-routing-engine", "opensm-max-op-vls", "opensm-sweep-disabled", "opensm-sweep-slow",
            "opensm-equal-priority", "sharp-routing-engine", "sm-equal-priority")  # fmt: skip


def is_fabric_settings(data: dict[str, object]) -> bool:
    return isinstance(data.get("fabricSettings"), list)


@dataclass(frozen=True, slots=True)
class Reported:
    hosts: list[HostFabricSettings]
    where: dict[str, Document]  # host -> the document that reported it
    problems: list[Hit]  # documents that are not what `gpufleet fabric settings -o json` writes


def reported(ctx: Context) -> Reported:
    hosts: list[HostFabricSettings] = []
    where: dict[str, Document] = {}
    problems: list[Hit] = []
    for doc in ctx.configs:
        if not is_fabric_settings(doc.data):
            continue
        for item in doc.data["fabricSettings"]:
            try:
                host = msgspec.convert(item, HostFabricSettings)
            except msgspec.ValidationError as exc:
                problems.append(
                    Hit(
                        f"fabricSettings entry not as `gpufleet fabric settings -o json` writes it: {exc}",
                        "capture it again with `gpufleet fabric settings -o json` on the host",
                        file=doc.file,
                        line=doc.line,
                        severity=Severity.info,
                        object_ref="fabricSettings",
                    )
                )
                continue
            hosts.append(host)
            where.setdefault(host.host, doc)
    return Reported(hosts, where, problems)


def _hits(ctx: Context, kinds: tuple[str, ...]) -> Iterator[Hit]:
    found = reported(ctx)
    if kinds is MTU_KINDS:
        yield from found.problems  # reported once, under the first rule
    for finding in judge(found.hosts):
        if finding.kind in kinds:
            yield _hit(finding, found)


def _hit(finding: FabricFinding, found: Reported) -> Hit:
    where = finding.port or (finding.ends[0] if finding.ends else None)
    host = where.node.split("/", 1)[0] if where is not None else ""
    doc = found.where.get(host) or next(iter(found.where.values()), None)
    source = f" ({finding.source})" if finding.source else ""
    return Hit(
        finding.message + source,
        finding.fix,
        file=doc.file if doc else "",
        line=doc.line if doc else 0,
        severity=finding.severity,
        object_ref=str(where) if where is not None else host,
    )


@rule("GF050", reads=(KIND,))
def mtu(ctx: Context) -> Iterator[Hit]:
    yield from _hits(ctx, MTU_KINDS)


@rule("GF051", reads=(KIND,))
def roce_lossless(ctx: Context) -> Iterator[Hit]:
    yield from _hits(ctx, ROCE_KINDS)


@rule("GF052", reads=(KIND,))
def subnet_manager(ctx: Context) -> Iterator[Hit]:
    yield from _hits(ctx, SM_KINDS)


def _nccl_templates(ctx: Context) -> Iterator[tuple[PodTemplate, dict[str, str]]]:
    for template in ctx.templates:
        env = template.env()
        if any(name.startswith(("NCCL_", "SHARP_")) for name in env):
            yield template, env


@rule("GF053", reads=(KIND,))
def nccl_traffic_class(ctx: Context) -> Iterator[Hit]:
    """NCCL_IB_TC (default 0) against the lossless priority of the RoCE ports the hosts report."""
    ports = [q for h in reported(ctx).hosts for q in h.roce if q.pfc and q.trust]
    if not ports:
        return
    for template, env in _nccl_templates(ctx):
        text = env.get("NCCL_IB_TC", "0").strip() or "0"
        if not text.isdigit() or int(text) > 255:
            yield Hit(
                f"NCCL_IB_TC={text!r} is not a traffic class (0-255)",
                "set NCCL_IB_TC to DSCP << 2 of the lossless priority's DSCP",
                obj=template.obj,
            )
            continue
        tc = int(text)
        for qos in ports:
            prio = lossless_priority(qos, tc)
            if prio is None or prio in (qos.pfc or []):
                continue
            wanted = tc_for_priority(qos, (qos.pfc or [0])[0])
            given = "NCCL_IB_TC" in env
            yield Hit(
                f"{'NCCL_IB_TC=' + text if given else 'NCCL_IB_TC unset (0)'}: NCCL's RoCE packets carry DSCP "
                f"{tc >> 2}, which {qos.netdev} (trust {qos.trust}) puts on priority {prio}, but PFC is on "
                f"{','.join(str(p) for p in qos.pfc or [])}: the job's collectives run lossy",
                f"set NCCL_IB_TC={wanted}" if wanted is not None else "set trust dscp on the RoCE ports",
                obj=template.obj,
            )
            break  # one hit per template: the ports of one fabric share their setup


@rule("GF054", reads=(KIND,))
def sharp(ctx: Context) -> Iterator[Hit]:
    """SHARP through NCCL's CollNet: the aggregation manager running, and the library's streaming aggregation."""
    found = reported(ctx)
    managers = [h.host for h in found.hosts if h.sharp_am_running]
    looked = [h.host for h in found.hosts if h.sharp_am_running is not None]
    for template, env in _nccl_templates(ctx):
        collnet = env.get("NCCL_COLLNET_ENABLE", "").strip() == "1"
        sat = env.get("SHARP_COLL_ENABLE_SAT", "").strip() == "1"
        if sat and not collnet:
            yield Hit(
                "SHARP_COLL_ENABLE_SAT=1 without NCCL_COLLNET_ENABLE=1: NCCL does not use SHARP, so the setting "
                "has no effect on its collectives",
                "set NCCL_COLLNET_ENABLE=1 (with the NCCL-SHARP plugin) or drop SHARP_COLL_ENABLE_SAT",
                obj=template.obj,
                severity=Severity.info,
            )
        if not collnet:
            continue
        if not sat:
            yield Hit(
                "NCCL_COLLNET_ENABLE=1 without SHARP_COLL_ENABLE_SAT=1: SHARP's collective library keeps streaming "
                "aggregation (SAT, the large-message trees) off by default",
                "set SHARP_COLL_ENABLE_SAT=1 where the switches support SAT (Quantum and later)",
                obj=template.obj,
                severity=Severity.info,
            )
        if looked and not managers:
            yield Hit(
                f"NCCL_COLLNET_ENABLE=1, but no SHARP aggregation manager (sharp_am) runs on the hosts reported "
                f"({', '.join(sorted(looked))}): without it no SHARP trees exist and CollNet cannot be used",
                "start sharp_am beside the master subnet manager (or enable SHARP in UFM), with OpenSM routing "
                "ftree or updn",
                obj=template.obj,
            )
        elif not looked:
            yield Hit(
                "NCCL_COLLNET_ENABLE=1: whether SHARP's aggregation manager runs is not known from this input",
                "add the subnet manager host's `gpufleet fabric settings -o json` to the input",
                obj=template.obj,
                severity=Severity.info,
            )
