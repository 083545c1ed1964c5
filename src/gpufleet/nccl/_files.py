"""Where the NCCL data files live inside the installed package."""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

import yaml


def read_text(name: str) -> str:
    return resources.files("gpufleet.nccl").joinpath("data", name).read_text(encoding="utf-8")


@cache
def load_yaml(name: str) -> Any:
    return yaml.safe_load(read_text(name))


def data_names() -> list[str]:
    return sorted(p.name for p in resources.files("gpufleet.nccl").joinpath("data").iterdir())
