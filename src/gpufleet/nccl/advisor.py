"""Environment advice for a topology, and a lint of an environment (rules in data/lint_rules.yaml)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from gpufleet.errors import ParseError, UserError
from gpufleet.nccl._files import load_yaml
from gpufleet.nccl.constants import ALGOS, PROTOS
from gpufleet.nccl.enable import parse_list
from gpufleet.nccl.topology import Topology

Severity = Literal["info", "warning", "critical"]


@dataclass(frozen=True)
class Advice:
    var: str
    value: str
    reason: str


@dataclass(frozen=True)
class LintFinding:
    rule: str
    var: str
    value: str
    severity: Severity
    message: str
    fix: str


class LintRule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    var: str
    severity: Severity
    message: str
    fix: str
    when: Literal["set"] | None = None
    equals: str | None = None
    matches: str | None = None
    transport_in: tuple[str, ...] | None = None

    def hit(self, env: dict[str, str], transport: str | None) -> bool:
        if self.var not in env:
            return False
        if self.transport_in is not None and (transport is None or transport not in self.transport_in):
            return False
        value = env[self.var].strip()
        if self.equals is not None:
            return value == self.equals
        if self.matches is not None:
            return re.search(self.matches, value) is not None
        return self.when == "set"


@cache
def lint_rules() -> tuple[LintRule, ...]:
    return tuple(LintRule(**r) for r in load_yaml("lint_rules.yaml")["rules"])


def advise(
    topo: Topology, nic_names: list[str] | None = None, socket_ifname: str | None = None
) -> list[Advice]:
    """Recommended NCCL settings for ``topo``, each with its reason."""
    out: list[Advice] = []
    multi = topo.nodes > 1
    if multi and topo.transport in ("ib", "roce"):
        names = nic_names or [f"mlx5_{i}" for i in range(topo.nics_per_node)]
        listed = ",".join(f"={n}:1" if i == 0 else f"{n}:1" for i, n in enumerate(names))
        out.append(
            Advice(
                "NCCL_IB_HCA",
                listed,
                (
                    f"list every one of the {topo.nics_per_node} rail NICs (exact names, port 1) "
                    f"and nothing else: a NIC "
                    "left out halves bandwidth on its rail, a storage/management NIC let in takes "
                    "traffic it cannot carry"
                    + ("" if nic_names else "; names here are the usual mlx5_N, check `ibv_devices`")
                ),
            )
        )
    if multi and topo.transport == "roce":
        out.append(
            Advice(
                "NCCL_IB_GID_INDEX",
                "3",
                (
                    "RoCEv2 needs the GID of a routable IPv4 address; index 3 is the usual "
                    "RoCEv2/IPv4 entry (check "
                    "`show_gids`). On NCCL >= 2.21 leaving it unset auto-selects via "
                    "NCCL_IB_ADDR_FAMILY=AF_INET and "
                    "NCCL_IB_ROCE_VERSION_NUM=2 when every node's GID table agrees"
                ),
            )
        )
        out.append(
            Advice(
                "NCCL_IB_TC",
                "106",
                (
                    "put NCCL traffic in the lossless (PFC/ECN) traffic class your switches "
                    "configure; 106 (DSCP 26) is "
                    "a common choice, some clouds use 41"
                ),
            )
        )
        out.append(
            Advice(
                "NCCL_IB_QPS_PER_CONNECTION",
                "4",
                ("more queue pairs spread a connection over more ECMP paths on routed RoCE fabrics"),
            )
        )
    if multi:
        out.append(
            Advice(
                "NCCL_SOCKET_IFNAME",
                socket_ifname or "=eth0",
                (
                    "bootstrap and out-of-band traffic must use an interface every node can "
                    "reach; name it exactly so a "
                    "docker/virtual bridge or a node-local interface is never picked"
                ),
            )
        )
    if multi and topo.transport == "efa":
        out.append(
            Advice("FI_PROVIDER", "efa", "make libfabric use EFA rather than TCP through aws-ofi-nccl")
        )
        out.append(Advice("FI_EFA_USE_DEVICE_RDMA", "1", "use GPUDirect RDMA over EFA (p4d/p5 and newer)"))
    if topo.nvls_enabled:
        out.append(
            Advice(
                "NCCL_NVLS_ENABLE",
                "1",
                (
                    f"{topo.spec.product_name} behind NVSwitch supports NVLink SHARP: AllReduce "
                    f"reaches ~480 GB/s busbw "
                    "on 8 H100 instead of ~370 with rings; keep it on (it costs some GPU memory)"
                ),
            )
        )
    elif topo.sm >= 90 and not topo.has_nvswitch:
        out.append(
            Advice("NCCL_NVLS_ENABLE", "0", "no NVSwitch: NVLS cannot be used, skip its probing and buffers")
        )
    if topo.sharp and multi:
        out.append(
            Advice(
                "NCCL_COLLNET_ENABLE",
                "1",
                (
                    "the fabric has SHARP switches: CollNet (nccl-rdma-sharp-plugins/HPC-X) "
                    "offloads reductions and enables "
                    "multi-node NVLS"
                ),
            )
        )
    if multi and topo.nics_per_node >= topo.gpus_per_node > 1:
        out.append(
            Advice(
                "NCCL_CROSS_NIC",
                "0",
                (
                    "one NIC per GPU on a rail-optimized fabric: keep every ring and tree on the "
                    "same rail index on every "
                    "node so traffic stays within its rail switch (check NCCL's graph output, cf. nccl#2345)"
                ),
            )
        )
    if multi and 0 < topo.nics_per_node < topo.gpus_per_node:
        out.append(
            Advice(
                "NCCL_PXN_DISABLE",
                "0",
                (
                    "fewer NICs than GPUs: PXN lets a GPU send through an NVLink peer's NIC "
                    "instead of crossing PCIe/CPU"
                ),
            )
        )
    out.append(
        Advice(
            "NCCL_DEBUG",
            "WARN",
            (
                "WARN in production; for diagnosis INFO with NCCL_DEBUG_SUBSYS=INIT,NET,GRAPH,ENV,TUNING and "
                "NCCL_DEBUG_FILE=nccl.%h.%p"
            ),
        )
    )
    out.append(
        Advice(
            "TORCH_NCCL_DUMP_ON_TIMEOUT",
            "1",
            (
                "with TORCH_NCCL_TRACE_BUFFER_SIZE=2000 the flight recorder dumps each rank's "
                "last collectives on a "
                "watchdog timeout, which names the rank that never arrived"
            ),
        )
    )
    return out


def lint_env(env: dict[str, str], transport: str | None = None) -> list[LintFinding]:
    """Flag risky NCCL settings. Only NCCL_/TORCH_NCCL_ variables are considered."""
    relevant = {k: v for k, v in env.items() if k.startswith(("NCCL_", "TORCH_NCCL_"))}
    out = []
    for var, elems in (("NCCL_ALGO", ALGOS), ("NCCL_PROTO", PROTOS)):
        if var in relevant:
            try:
                parse_list(relevant[var], elems, var)
            except UserError as exc:
                out.append(
                    LintFinding("invalid-list", var, relevant[var], "critical", exc.message, exc.fix or "")
                )
    for rule in lint_rules():
        if rule.hit(relevant, transport):
            out.append(
                LintFinding(rule.id, rule.var, relevant[rule.var], rule.severity, rule.message, rule.fix)
            )
    return out


ENV_LINE = re.compile(r"^\s*(?:export\s+|-x\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*$")


def parse_env_text(text: str) -> dict[str, str]:
    """KEY=VALUE lines (optionally `export`), `-x KEY=VALUE` launcher flags, comments ignored."""
    env: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        pairs = re.findall(r"(?:^|\s)(?:-x\s+|export\s+)?([A-Z_][A-Z0-9_]*)=(\"[^\"]*\"|'[^']*'|\S*)", line)
        for key, value in pairs:
            env[key] = value.strip("\"'")
    return env


def read_env_file(path: Path) -> dict[str, str]:
    try:
        return parse_env_text(path.read_text(encoding="utf-8", errors="replace"))
    except OSError as exc:
        raise ParseError(f"cannot read {path}: {exc.strerror}", fix="check the path") from exc
