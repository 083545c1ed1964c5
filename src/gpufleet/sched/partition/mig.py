"""MIG layouts on one GPU: validity, allocation at a chosen placement, enumeration and free capacity.

A layout is a set of GPU instances, each a profile placed at one of its listed starts on the 8-wide memory-slice
axis (`nvidia-smi mig -lgipp`). A layout is valid when every start is listed for its profile, no two instances
share a memory slice, no profile exceeds its max count, at most one media-extension (+me) profile is present and
compute slices add up to at most 7. The geometry comes from the catalog (mig_profiles.csv), never from code.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache

from gpufleet.catalog.gpus import GpuModelSpec, get_gpu_model
from gpufleet.catalog.mig import COMPUTE_SLICES, MEMORY_SLICES, MigProfile, mig_geometries, mig_profiles_for
from gpufleet.errors import UserError
from gpufleet.model.gpu import Gpu, MigInstance


@dataclass(frozen=True, slots=True, order=True)
class MigPlacement:
    """One GPU instance: a profile at a start on the memory-slice axis (what `nvidia-smi mig -lgi` prints)."""

    start: int
    profile: str

    def __str__(self) -> str:
        return f"{self.profile}@{self.start}"


def _mask(start: int, size: int) -> int:
    return ((1 << size) - 1) << start


def geometry_of(gpu_model: str | GpuModelSpec) -> str:
    """The catalog geometry name of a GPU model (short name, alias or product name)."""
    spec = gpu_model if isinstance(gpu_model, GpuModelSpec) else get_gpu_model(gpu_model)
    if spec.mig_geometry is None:
        capable = sorted(m for m in mig_geometries())
        raise UserError(
            f"{spec.product_name} ({spec.name}) does not support MIG",
            fix=f"choose a MIG-capable model (geometries: {', '.join(capable)})",
        )
    return spec.mig_geometry


def _profile(geometry: str, name: str) -> MigProfile:
    profiles = mig_profiles_for(geometry)
    if name not in profiles:
        raise UserError(
            f"{geometry} has no MIG profile {name!r}",
            fix=f"use one of: {', '.join(profile_names(geometry))}",
        )
    return profiles[name]


def profile_names(geometry: str) -> list[str]:
    """Profiles of a geometry, largest first (the order mig-parted and `-lgip` list them in reverse)."""
    profiles = mig_profiles_for(geometry).values()
    return [p.name for p in sorted(profiles, key=lambda p: (-p.memory_slices, -p.compute_slices, p.name))]


def _problems(geometry: str, placements: Iterable[MigPlacement]) -> list[str]:
    profiles = mig_profiles_for(geometry)
    used = 0
    counts: Counter[str] = Counter()
    compute = 0
    media = 0
    problems = []
    for pl in sorted(placements):
        prof = profiles.get(pl.profile)
        if prof is None:
            problems.append(f"unknown profile {pl.profile!r}")
            continue
        if pl.start not in prof.starts:
            starts = ",".join(str(s) for s in prof.starts)
            problems.append(f"{pl} starts at {pl.start}, but {prof.name} may start only at {{{starts}}}")
            continue
        mask = _mask(pl.start, prof.size)
        if used & mask:
            problems.append(f"{pl} overlaps another instance on memory slices {pl.start}..{pl.start + prof.size - 1}")
        used |= mask
        counts[prof.name] += 1
        compute += prof.compute_slices
        media += prof.media_extensions
    for name, n in counts.items():
        if n > profiles[name].max_count:
            problems.append(f"{n} x {name} exceeds its max count {profiles[name].max_count}")
    if media > 1:
        problems.append(f"{media} media-extension (+me) instances; at most one is allowed")
    if compute > COMPUTE_SLICES:
        problems.append(f"{compute} compute slices used; a GPU has {COMPUTE_SLICES}")
    return problems


@dataclass(frozen=True, slots=True)
class MigLayout:
    """An immutable, valid set of GPU instances on one GPU of a geometry."""

    geometry: str
    placements: tuple[MigPlacement, ...] = ()

    @classmethod
    def of(cls, geometry: str, placements: Iterable[MigPlacement | tuple[str, int]] = ()) -> MigLayout:
        """Build and validate; raises UserError naming every rule the layout breaks."""
        pls = tuple(sorted(p if isinstance(p, MigPlacement) else MigPlacement(p[1], p[0]) for p in placements))
        for pl in pls:
            _profile(geometry, pl.profile)  # unknown geometry or profile: an error listing what exists
        problems = _problems(geometry, pls)
        if problems:
            shown = " ".join(str(p) for p in pls) or "(empty)"
            raise UserError(f"invalid MIG layout on {geometry} [{shown}]: " + "; ".join(problems))
        return cls(geometry, pls)

    @classmethod
    def from_gpu(cls, gpu: Gpu) -> MigLayout:
        geometry = geometry_of(gpu.model)
        return cls.of(geometry, [MigPlacement(i.start, i.profile) for i in gpu.mig_instances])

    @property
    def used_mask(self) -> int:
        profiles = mig_profiles_for(self.geometry)
        mask = 0
        for pl in self.placements:
            mask |= _mask(pl.start, profiles[pl.profile].size)
        return mask

    @property
    def free_slices(self) -> list[int]:
        used = self.used_mask
        return [i for i in range(MEMORY_SLICES) if not used >> i & 1]

    def counts(self) -> dict[str, int]:
        return dict(Counter(p.profile for p in self.placements))

    @property
    def compute_slices(self) -> int:
        profiles = mig_profiles_for(self.geometry)
        return sum(profiles[p.profile].compute_slices for p in self.placements)

    def free_starts(self, profile: str) -> list[int]:
        """Starts at which one more `profile` instance would keep the layout valid."""
        prof = _profile(self.geometry, profile)
        return [s for s in prof.starts if not _problems(self.geometry, (*self.placements, MigPlacement(s, profile)))]

    def fits(self) -> dict[str, int]:
        """Every profile that still fits, with how many more of it alone could be added (the `-lgip` Free column)."""
        out = {}
        for name in profile_names(self.geometry):
            n, layout = 0, self
            while True:
                starts = layout.free_starts(name)
                if not starts:
                    break
                layout = MigLayout(self.geometry, tuple(sorted((*layout.placements, MigPlacement(starts[0], name)))))
                n += 1
            if n:
                out[name] = n
        return out

    def allocate(self, profile: str, start: int | None = None) -> tuple[MigLayout, MigPlacement]:
        """Add one instance, at `start` if given, else at the placement that keeps the most future layouts open.

        Positional fragmentation is real: instances at 0, 1 and 5 block every 3g although five slices are free.
        So among the free starts we pick the one whose resulting layout can still be completed in the most ways (it
        is part of the largest number of the geometry's valid layouts; ties go to the highest start). On the
        7-slice parts this packs 1g instances into slices 0-3 first, which keeps 3g at 4, the only other user of
        slice 7, open: 4 x 1g + 3g fills all eight slices. On random arrival sequences it places more instances
        than always taking the lowest or the highest free start (tests/sched/test_mig.py measures this).
        """
        if start is not None:
            placement = MigPlacement(start, profile)
            return MigLayout.of(self.geometry, (*self.placements, placement)), placement
        starts = self.free_starts(profile)
        if not starts:
            raise UserError(
                f"no room for {profile} on {self.geometry} with [{self}]",
                fix=f"what still fits: {', '.join(self.fits()) or 'nothing'}",
            )
        mine = frozenset(self.placements)
        best = max(starts, key=lambda s: (completions(self.geometry, mine | {MigPlacement(s, profile)}), s))
        placement = MigPlacement(best, profile)
        return MigLayout(self.geometry, tuple(sorted((*self.placements, placement)))), placement

    def release(self, placement: MigPlacement) -> MigLayout:
        if placement not in self.placements:
            raise UserError(f"{placement} is not in the layout [{self}]")
        return MigLayout(self.geometry, tuple(p for p in self.placements if p != placement))

    def to_instances(self, gpu_uuid: str) -> list[MigInstance]:
        """Model MIG instances; UUIDs are stable per GPU and placement, in the `MIG-<uuid>` form NVML prints."""
        profiles = mig_profiles_for(self.geometry)
        return [
            MigInstance(
                p.profile,
                gi,
                p.start,
                profiles[p.profile].size,
                f"MIG-{uuid.uuid5(uuid.NAMESPACE_URL, f'{gpu_uuid}/{p}')}",
            )
            for gi, p in enumerate(self.placements, start=1)
        ]

    def __str__(self) -> str:
        return " ".join(str(p) for p in self.placements)


@cache
def enumerate_layouts(geometry: str) -> tuple[MigLayout, ...]:
    """Every valid layout of a geometry, the empty one included (2,319 on the 7-slice parts)."""
    profiles = mig_profiles_for(geometry)
    candidates = sorted(
        (MigPlacement(s, p.name) for p in profiles.values() for s in p.starts), key=lambda pl: (pl.start, pl.profile)
    )
    found: list[MigLayout] = []

    def extend(i: int, chosen: list[MigPlacement]) -> None:
        found.append(MigLayout(geometry, tuple(sorted(chosen))))
        for j in range(i, len(candidates)):
            chosen.append(candidates[j])
            if not _problems(geometry, chosen):
                extend(j + 1, chosen)
            chosen.pop()

    extend(0, [])
    return tuple(found)


@cache
def _layout_sets(geometry: str) -> tuple[frozenset[MigPlacement], ...]:
    return tuple(frozenset(layout.placements) for layout in enumerate_layouts(geometry))


@cache
def completions(geometry: str, placements: frozenset[MigPlacement]) -> int:
    """How many valid layouts contain these placements: the ways a partly filled GPU can still be completed."""
    return sum(1 for layout in _layout_sets(geometry) if placements <= layout)


@cache
def count_vectors(geometry: str) -> dict[tuple[tuple[str, int], ...], MigLayout]:
    """Distinct profile multisets that some valid layout realises, each with one layout that realises it.

    mig-parted configs name counts, not positions; this is the set of count maps it can apply.
    """
    out: dict[tuple[tuple[str, int], ...], MigLayout] = {}
    for layout in enumerate_layouts(geometry):
        key = tuple(sorted(layout.counts().items()))
        out.setdefault(key, layout)
    return out


def layout_for_counts(geometry: str, counts: Mapping[str, int]) -> MigLayout:
    """A valid placement of a profile count map, or a UserError saying it cannot be placed."""
    for name in counts:
        _profile(geometry, name)
    key = tuple(sorted((k, v) for k, v in counts.items() if v))
    layout = count_vectors(geometry).get(key)
    if layout is None:
        wanted = ", ".join(f"{v} x {k}" for k, v in key)
        raise UserError(
            f"{wanted} cannot be placed on one {geometry} GPU",
            fix="memory slices overlap or a max count is exceeded; split the instances over more GPUs",
        )
    return layout


def is_maximal(layout: MigLayout) -> bool:
    """True when no profile fits any more."""
    return not layout.fits()


def maximal_count_vectors(geometry: str) -> dict[tuple[tuple[str, int], ...], MigLayout]:
    """Profile mixes to which no instance of any profile can be added (whatever the placement)."""
    mixes = count_vectors(geometry)

    def grown(key: tuple[tuple[str, int], ...], profile: str) -> tuple[tuple[str, int], ...]:
        counts = dict(key)
        counts[profile] = counts.get(profile, 0) + 1
        return tuple(sorted(counts.items()))

    names = profile_names(geometry)
    return {k: v for k, v in mixes.items() if not any(grown(k, p) in mixes for p in names)}
