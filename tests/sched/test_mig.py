"""MIG layouts against the real geometry: placements per profile, overlap, max counts, +me, enumeration, allocation."""

from __future__ import annotations

import csv
import random
import re

import pytest

from gpufleet.catalog.mig import MEMORY_SLICES, mig_geometries, mig_profiles_for
from gpufleet.errors import NotFoundError, UserError
from gpufleet.sched.partition.mig import (
    MigLayout,
    MigPlacement,
    count_vectors,
    enumerate_layouts,
    geometry_of,
    layout_for_counts,
    maximal_count_vectors,
)
from tests.conftest import CATALOG_DATA

H100 = "H100-SXM5-80GB"


def _catalog_placements() -> dict[tuple[str, str], tuple[set[int], int]]:
    out = {}
    with (CATALOG_DATA / "mig_profiles.csv").open() as fh:
        for row in csv.DictReader(fh):
            match = re.match(r"^\{([\d,]+)\}:(\d+)$", row["placements"])
            assert match, row
            out[(row["gpu"], row["profile"])] = ({int(s) for s in match.group(1).split(",")}, int(match.group(2)))
    return out


def test_every_profile_on_every_geometry_is_valid_exactly_at_its_listed_starts() -> None:
    reference = _catalog_placements()
    checked = 0
    for geometry in mig_geometries():
        for name, prof in mig_profiles_for(geometry).items():
            starts, size = reference[(geometry, name)]
            assert prof.size == size
            for start in range(MEMORY_SLICES):
                if start in starts:
                    layout = MigLayout.of(geometry, [(name, start)])
                    assert layout.used_mask == ((1 << size) - 1) << start
                else:
                    with pytest.raises(UserError, match=r"may start only at"):
                        MigLayout.of(geometry, [(name, start)])
                checked += 1
    assert checked == 70 * MEMORY_SLICES  # 70 profile rows in the catalog


@pytest.mark.parametrize("geometry", mig_geometries())
def test_the_7_slice_parts_have_2319_valid_layouts_including_empty(geometry: str) -> None:
    layouts = enumerate_layouts(geometry)
    assert len(layouts) == 2319
    assert len({lay.placements for lay in layouts}) == 2319
    assert MigLayout(geometry) in layouts
    assert max(lay.compute_slices for lay in layouts) == 7
    assert all(lay.compute_slices <= 7 for lay in layouts)


def test_overlap_max_count_and_media_extension_rules() -> None:
    with pytest.raises(UserError, match=r"overlaps"):
        MigLayout.of(H100, [("3g.40gb", 0), ("1g.10gb", 2)])
    with pytest.raises(UserError, match=r"exceeds its max count 1"):
        MigLayout.of(H100, [("1g.10gb+me", 0), ("1g.10gb+me", 1)])
    with pytest.raises(UserError, match=r"media-extension"):
        MigLayout.of(H100, [("1g.10gb+me", 0), ("1g.10gb+me", 1)])
    with pytest.raises(UserError, match=r"no MIG profile '2g.10gb'"):
        MigLayout.of(H100, [("2g.10gb", 0)])
    with pytest.raises(NotFoundError):
        MigLayout.of("H999", [])
    # 3g at 0 and 4 take all eight memory slices
    full = MigLayout.of(H100, [("3g.40gb", 0), ("3g.40gb", 4)])
    assert full.free_slices == [] and full.fits() == {}


def test_slice_7_is_reachable_only_by_7g_3g_at_4_and_the_2_slice_1g_at_6() -> None:
    users = {(p.name, s) for p in mig_profiles_for(H100).values() for s in p.starts if s + p.size > 7}
    assert users == {("7g.80gb", 0), ("3g.40gb", 4), ("1g.20gb", 6)}
    seven = MigLayout.of(H100, [("1g.10gb", s) for s in range(7)])
    assert seven.free_slices == [7]


def test_free_capacity_on_an_empty_gpu_is_the_lgip_free_column() -> None:
    assert MigLayout.of(H100).fits() == {
        "7g.80gb": 1, "4g.40gb": 1, "3g.40gb": 2, "2g.20gb": 3, "1g.20gb": 4, "1g.10gb": 7, "1g.10gb+me": 1,
    }  # fmt: skip


def test_positional_fragmentation_and_the_packing_allocator() -> None:
    # instances at 0, 1 and 5 leave five slices free but block every 3g (the dra-driver issue's example)
    scattered = MigLayout.of(H100, [("1g.10gb", 0), ("1g.10gb", 1), ("1g.10gb", 5)])
    assert "3g.40gb" not in scattered.fits() and "4g.40gb" not in scattered.fits()
    layout = MigLayout.of(H100)
    for _ in range(4):
        layout, _placed = layout.allocate("1g.10gb")
    # four 1g in slices 0-3 leave 3g at 4, so the GPU can still be filled completely (4 x 1g + 3g = 8 slices)
    assert [p.start for p in layout.placements] == [0, 1, 2, 3]
    full, _placed = layout.allocate("3g.40gb")
    assert full.free_slices == [] and full.compute_slices == 7


def test_the_packing_allocator_places_more_than_lowest_or_highest_start_first() -> None:
    rng = random.Random(1)
    mix = ["1g.10gb"] * 6 + ["1g.20gb"] * 2 + ["2g.20gb"] * 2 + ["3g.40gb"] * 2 + ["4g.40gb"]
    sequences = [[rng.choice(mix) for _ in range(10)] for _ in range(150)]

    def placed(choose: str) -> int:
        total = 0
        for seq in sequences:
            layout = MigLayout.of(H100)
            for profile in seq:
                starts = layout.free_starts(profile)
                if not starts:
                    continue
                start = None if choose == "packing" else (min(starts) if choose == "lowest" else max(starts))
                layout, _placed = layout.allocate(profile, start)
                total += 1
        return total

    packing, lowest, highest = placed("packing"), placed("lowest"), placed("highest")
    assert packing > lowest and packing > highest


def test_allocation_fills_a_gpu_then_says_what_still_fits() -> None:
    layout = MigLayout.of(H100)
    for _ in range(7):
        layout, _placed = layout.allocate("1g.10gb")
    assert sorted(p.start for p in layout.placements) == list(range(7))
    with pytest.raises(UserError, match=r"no room for 1g.10gb"):
        layout.allocate("1g.10gb")
    layout, placed = MigLayout.of(H100).allocate("3g.40gb", start=4)
    assert placed == MigPlacement(4, "3g.40gb")
    with pytest.raises(UserError, match=r"overlaps"):
        layout.allocate("2g.20gb", start=4)
    assert layout.free_starts("2g.20gb") == [0, 2]
    assert layout.release(placed) == MigLayout.of(H100)


def test_profile_mixes_and_their_placement() -> None:
    mixes = count_vectors(H100)
    assert len(mixes) == 128
    assert str(layout_for_counts(H100, {"1g.10gb": 4, "3g.40gb": 1})) == (
        "1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@3 3g.40gb@4"
    )
    with pytest.raises(UserError, match=r"cannot be placed on one"):
        layout_for_counts(H100, {"3g.40gb": 2, "1g.10gb": 1})
    maximal = maximal_count_vectors(H100)
    assert (("1g.10gb", 7),) in maximal and (("1g.10gb", 6),) not in maximal
    assert (("3g.40gb", 2),) in maximal


def test_gpu_models_map_to_geometries() -> None:
    assert geometry_of("h100") == H100
    assert geometry_of("a100-40gb") == "A100-SXM4/PCIE-40GB"
    with pytest.raises(UserError, match=r"does not support MIG"):
        geometry_of("t4")
