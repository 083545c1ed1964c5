"""MIG GPU-instance geometry per GPU model (mig_profiles.csv)."""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from functools import cache

from gpufleet.catalog._files import read_text
from gpufleet.errors import NotFoundError

MEMORY_SLICES = 8
COMPUTE_SLICES = 7

_PLACEMENT = re.compile(r"^\{([\d,]+)\}:(\d+)$")


@dataclass(frozen=True, slots=True)
class MigProfile:
    """One GPU-instance profile: where it may start on the 8-wide memory-slice axis and how much it takes."""

    gpu: str
    name: str
    profile_id: int
    compute_slices: int
    memory_slices: int
    memory_gib: float
    max_count: int
    starts: tuple[int, ...]
    size: int
    sm_count: int
    verified: bool

    @property
    def media_extensions(self) -> bool:
        return self.name.endswith("+me")

    @property
    def resource_name(self) -> str:
        """The mixed-strategy extended resource, with '+' written as '.' as the device plugin does."""
        return "nvidia.com/mig-" + self.name.replace("+", ".")

    def slices(self, start: int) -> range:
        return range(start, start + self.size)


def _parse_placements(text: str) -> tuple[tuple[int, ...], int]:
    match = _PLACEMENT.match(text.strip())
    if not match:
        raise ValueError(f"bad placement {text!r}")
    starts = tuple(int(s) for s in match.group(1).split(","))
    return starts, int(match.group(2))


def _gb_from_name(profile: str) -> float:
    """Where the catalog lacks a measured size, the profile name's nominal GB (1g.12gb -> 12) stands in."""
    match = re.search(r"\.(\d+)gb", profile)
    return float(match.group(1)) if match else 0.0


@cache
def load_mig_profiles() -> tuple[MigProfile, ...]:
    rows = csv.DictReader(io.StringIO(read_text("mig_profiles.csv")))
    profiles = []
    for row in rows:
        starts, size = _parse_placements(row["placements"])
        profiles.append(
            MigProfile(
                gpu=row["gpu"],
                name=row["profile"],
                profile_id=int(row["id"]),
                compute_slices=int(row["compute_slices"]),
                memory_slices=int(row["memory_slices"]),
                memory_gib=float(row["memory_gib"]) if row["memory_gib"] else _gb_from_name(row["profile"]),
                max_count=int(row["max_count"]),
                starts=starts,
                size=size,
                sm_count=int(row["sm_count"]) if row["sm_count"] else 0,
                verified=row["placement_status"] == "verified",
            )
        )
    return tuple(profiles)


def mig_geometries() -> list[str]:
    return sorted({p.gpu for p in load_mig_profiles()})


@cache
def mig_profiles_for(geometry: str) -> dict[str, MigProfile]:
    """Profiles of one GPU geometry (a `gpu` value of the CSV), by profile name."""
    found = {p.name: p for p in load_mig_profiles() if p.gpu == geometry}
    if not found:
        raise NotFoundError(f"no MIG geometry named {geometry!r}", fix=f"use one of: {', '.join(mig_geometries())}")
    return found
