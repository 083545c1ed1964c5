"""AMD Instinct partition modes: what each exposes, which pairs the kernel and DCM take, what the plugin advertises."""

from __future__ import annotations

import pytest

from gpufleet.errors import UserError
from gpufleet.sched.partition.amd_partition import (
    advertised,
    dcm_profile_problems,
    default_mode,
    mode,
    parse_mode,
    parse_partition_resource,
    valid_modes,
)

GIB = 1024


@pytest.mark.parametrize(
    ("pair", "gpus", "xcds", "cus", "pool_gib", "each_gib", "shared_by"),
    [
        (("SPX", "NPS1"), 1, 8, 304, 192, 192, 1),
        (("DPX", "NPS1"), 2, 4, 152, 192, 96, 2),
        (("QPX", "NPS1"), 4, 2, 76, 192, 48, 4),
        (("QPX", "NPS4"), 4, 2, 76, 48, 48, 1),
        (("CPX", "NPS1"), 8, 1, 38, 192, 24, 8),
        (("CPX", "NPS4"), 8, 1, 38, 48, 24, 2),  # its quadrant's 48 GB, shared by 2 partitions
    ],
)
def test_mi300x_mode_geometry(
    pair: tuple[str, str], gpus: int, xcds: int, cus: int, pool_gib: int, each_gib: int, shared_by: int
) -> None:
    m = mode("mi300x", *pair)
    assert (m.partitions, m.xcds_each, m.cus_each, m.simds_each) == (gpus, xcds, cus, cus * 4)
    assert (m.pool_mib, m.memory_mib, m.shared_by) == (pool_gib * GIB, each_gib * GIB, shared_by)
    assert m.name == f"{pair[0]}_{pair[1]}".lower()


def test_valid_pairs_per_model_kernel_and_dcm() -> None:
    assert [m.name for m in valid_modes("mi300x")] == [
        "spx_nps1", "dpx_nps1", "qpx_nps1", "qpx_nps4", "cpx_nps1", "cpx_nps4",
    ]  # fmt: skip
    assert [m.name for m in valid_modes("mi325x")] == [m.name for m in valid_modes("mi300x")]
    # GC 9.5.0 takes NPS2 for DPX, QPX and CPX; the MI355X lists NPS1 and NPS2 only
    assert [m.name for m in valid_modes("mi355x")] == [
        "spx_nps1", "dpx_nps1", "dpx_nps2", "qpx_nps1", "qpx_nps2", "cpx_nps1", "cpx_nps2",
    ]  # fmt: skip
    assert [m.name for m in valid_modes("mi300x", dcm_only=True)] == ["spx_nps1", "cpx_nps1", "cpx_nps4"]
    assert [m.name for m in valid_modes("mi355x", dcm_only=True)] == ["spx_nps1", "cpx_nps1"]
    m355 = mode("mi355x", "CPX", "NPS2")
    assert (m355.cus_each, m355.pool_mib, m355.memory_mib) == (32, 144 * GIB, 36 * GIB)
    assert default_mode("mi300x").name == "spx_nps1"
    assert parse_mode("mi300x", "CPX+NPS4") == parse_mode("mi300x", "cpx_nps4") == parse_mode("mi300x", "cpx-nps4")


@pytest.mark.parametrize(
    ("model", "pair", "says"),
    [
        ("mi300x", ("SPX", "NPS4"), "the amdgpu driver pairs SPX with NPS1 on gfx942, not NPS4"),
        ("mi300x", ("DPX", "NPS4"), "pairs DPX with NPS1, NPS2 on gfx942, not NPS4"),
        ("mi300x", ("CPX", "NPS2"), "mi300x has no NPS2 memory mode (it has NPS1, NPS4)"),
        ("mi300x", ("TPX", "NPS1"), "mi300x has no TPX compute mode"),
        ("mi355x", ("CPX", "NPS4"), "mi355x has no NPS4 memory mode"),
        ("mi300x", ("XPX", "NPS1"), "unknown compute partition mode 'XPX'"),
        ("mi300x", ("CPX", "NPS3"), "unknown memory partition mode 'NPS3'"),
        ("mi210", ("SPX", "NPS1"), "AMD Instinct MI210 (mi210) cannot be partitioned"),
        ("h100-sxm", ("SPX", "NPS1"), "h100-sxm is not an AMD Instinct part (NVIDIA)"),
    ],
)
def test_invalid_pairs_say_why_and_what_is_valid(model: str, pair: tuple[str, str], says: str) -> None:
    with pytest.raises(UserError) as err:
        mode(model, *pair)
    assert says in err.value.message
    assert err.value.fix


def test_a_bad_mode_text_is_refused() -> None:
    with pytest.raises(UserError, match="is not a partition mode"):
        parse_mode("mi300x", "cpx")


def test_device_plugin_resources_single_and_mixed() -> None:
    cpx4, spx = mode("mi300x", "CPX", "NPS4"), mode("mi300x", "SPX", "NPS1")
    assert advertised("mi300x", [cpx4] * 8, "single") == {"amd.com/gpu": 64}
    assert advertised("mi300x", [cpx4] * 8, "mixed") == {"amd.com/cpx_nps4": 64}
    assert advertised("mi300x", [spx] * 8, "mixed") == {"amd.com/spx_nps1": 8}
    cpx1 = mode("mi300x", "CPX", "NPS1")
    assert advertised("mi300x", [spx] * 4 + [cpx1] * 4, "mixed") == {"amd.com/cpx_nps1": 32, "amd.com/spx_nps1": 4}
    with pytest.raises(UserError) as err:
        advertised("mi300x", [spx] * 4 + [cpx1] * 4, "single")
    assert "single naming strategy refuses a node whose GPUs are in different modes" in err.value.message
    assert "-resource_naming_strategy=mixed" in (err.value.fix or "")
    # GPUs that cannot be partitioned are amd.com/gpu under either strategy
    assert advertised("mi210", [None] * 4, "mixed") == {"amd.com/gpu": 4}
    assert parse_partition_resource("amd.com/cpx_nps4") == ("CPX", "NPS4")
    assert parse_partition_resource("amd.com/gpu") is None and parse_partition_resource("amd.com/xpx_nps1") is None


def test_dcm_profile_checks() -> None:
    assert dcm_profile_problems([("CPX", "NPS4", 8)], 8) == []
    assert dcm_profile_problems([("SPX", "NPS1", 4), ("CPX", "NPS1", 4)], 8) == []  # allowed, not recommended
    assert dcm_profile_problems([("QPX", "NPS1", 8)], 8) == ["DCM supports the SPX and CPX compute types, not QPX"]
    assert dcm_profile_problems([("SPX", "NPS4", 8)], 8) == ["DCM supports NPS4 only with CPX, not with SPX"]
    mixed = dcm_profile_problems([("CPX", "NPS4", 4), ("CPX", "NPS1", 4)], 8)
    assert "NPS1 and NPS4 cannot be combined in one profile" in mixed
    assert dcm_profile_problems([("CPX", "NPS1", 5)], 8, skipped=[0, 1]) == [
        "numGPUsAssigned adds up to 5 and skippedGPUs holds 2: together they must be the node's 8 GPUs"
    ]
    assert dcm_profile_problems([("CPX", "NPS1", 7)], 8, skipped=[8]) == ["skippedGPUs ids [8] are outside 0..7"]
