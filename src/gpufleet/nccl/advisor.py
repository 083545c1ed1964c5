"""Environment advice for a topology, and a lint of an environment (rules in data/lint_rules.yaml)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from gpufleet.errors import ParseError, UserError
from gpufleet.model import Severity
from gpufleet.nccl._files import load_yaml
from gpufleet.nccl.constants import ALGOS, PROTOS
from gpufleet.nccl.enable import parse_list
from gpufleet.nccl.predict import predict_one
from gpufleet.nccl.topology import Topology


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


class AdviceWhen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    multi_node: bool | None = None
    transport: tuple[str, ...] | None = None
    nvls: bool | None = None
    hopper_without_nvswitch: bool | None = None
    sharp: bool | None = None
    nic_per_gpu: Literal["at_least_one", "fewer"] | None = None

    def holds(self, topo: Topology) -> bool:
        multi = topo.nodes > 1
        facts: dict[str, object] = {
            "multi_node": multi,
            "nvls": topo.nvls_enabled,
            "hopper_without_nvswitch": topo.sm >= 90 and not topo.has_nvswitch,
            "sharp": topo.sharp,
        }
        for key, fact in facts.items():
            wanted = getattr(self, key)
            if wanted is not None and wanted != fact:
                return False
        if self.transport is not None and topo.transport not in self.transport:
            return False
        if self.nic_per_gpu == "at_least_one" and not topo.nics_per_node >= topo.gpus_per_node > 1:
            return False
        return not (self.nic_per_gpu == "fewer" and not 0 < topo.nics_per_node < topo.gpus_per_node)


class AdviceRule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    var: str
    value: str
    when: AdviceWhen
    reason: str


@cache
def advice_rules() -> tuple[AdviceRule, ...]:
    return tuple(AdviceRule(**r) for r in load_yaml("advice_rules.yaml")["rules"])


def _template_values(topo: Topology, nic_names: list[str] | None, socket_ifname: str | None) -> dict[str, str]:
    names = nic_names or [f"mlx5_{i}" for i in range(topo.nics_per_node)]
    values = {
        "nics": str(topo.nics_per_node),
        "hca_list": ",".join(f"={n}:1" if i == 0 else f"{n}:1" for i, n in enumerate(names)),
        "hca_note": "" if nic_names else "; names here are the usual mlx5_N, check `ibv_devices`",
        "socket_ifname": socket_ifname or "=eth0",
        "gpu_product": topo.spec.product_name,
        "nvls_busbw": "?",
        "ring_busbw": "?",
    }
    if topo.nvls_enabled:
        with_nvls = predict_one(topo, "allreduce", 8 << 30).busbw_gbps
        without = predict_one(topo.model_copy(update={"nvls": False}), "allreduce", 8 << 30).busbw_gbps
        values["nvls_busbw"], values["ring_busbw"] = f"{with_nvls:.0f}", f"{without:.0f}"
    return values


def advise(topo: Topology, nic_names: list[str] | None = None, socket_ifname: str | None = None) -> list[Advice]:
    """Recommended NCCL settings for ``topo``, each with its reason (rules in data/advice_rules.yaml)."""
    values = _template_values(topo, nic_names, socket_ifname)
    return [
        Advice(rule.var, rule.value.format(**values), rule.reason.format(**values))
        for rule in advice_rules()
        if rule.when.holds(topo)
    ]


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
                    LintFinding("invalid-list", var, relevant[var], Severity.critical, exc.message, exc.fix or "")
                )
    for rule in lint_rules():
        if rule.hit(relevant, transport):
            out.append(LintFinding(rule.id, rule.var, relevant[rule.var], rule.severity, rule.message, rule.fix))
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
