"""Where the catalog's data files live inside the installed package."""

from __future__ import annotations

from importlib import resources
from importlib.abc import Traversable


def data_file(name: str) -> Traversable:
    return resources.files("gpufleet.catalog").joinpath("data", name)


def read_text(name: str) -> str:
    return data_file(name).read_text(encoding="utf-8")
