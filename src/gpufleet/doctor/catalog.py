"""The rule catalog: every rule's id, title, default severity, explanation and sources (data/rules/*.yaml), and
the version and compatibility facts the rules apply (data/stack.yaml), each with where it was read."""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, PlainSerializer

from gpufleet.doctor.findings import from_label, label
from gpufleet.model import Severity


class RuleInfo(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    title: str
    severity: Annotated[Severity, BeforeValidator(from_label), PlainSerializer(label)]  # error, warning, info
    description: str
    sources: tuple[str, ...]


def _data(name: str) -> Any:
    return yaml.safe_load(resources.files("gpufleet.doctor").joinpath("data", name).read_text("utf-8"))


@cache
def rule_catalog() -> dict[str, RuleInfo]:
    out: dict[str, RuleInfo] = {}
    folder = resources.files("gpufleet.doctor").joinpath("data", "rules")
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        if not entry.name.endswith(".yaml"):
            continue
        for raw in yaml.safe_load(entry.read_text("utf-8"))["rules"]:
            info = RuleInfo.model_validate(raw)
            if info.id in out:
                raise ValueError(f"rule {info.id} described twice")
            out[info.id] = info
    return dict(sorted(out.items()))


@cache
def stack_facts() -> dict[str, Any]:
    """data/stack.yaml: GPU Operator life cycle and platform matrix, driver and CUDA compatibility, known issues."""
    data = _data("stack.yaml")
    return data if isinstance(data, dict) else {}
