"""`nvidia-smi mig -lgi` into the contract's MigInfo, on tables written in the layout NVIDIA documents."""

from __future__ import annotations

import pytest

from gpufleet.errors import ParseError
from gpufleet.model.observe import MigInfo
from gpufleet.parsers.nvidia.smi_mig import ComputeInstance, parse_mig_lgi, parse_mig_listing
from gpufleet.sched.partition.mig import MigLayout
from tests.conftest import CAPTURES

# An A100 40GB split into two 3g.20gb instances (`nvidia-smi mig -cgi 9,3g.20gb -C`)
TWO_HALVES = """\
+----------------------------------------------------+
| GPU instances:                                     |
| GPU   Name          Profile  Instance   Placement  |
|                       ID       ID       Start:Size |
|====================================================|
|   0  MIG 3g.20gb       9        1          4:4     |
+----------------------------------------------------+
|   0  MIG 3g.20gb       9        2          0:4     |
+----------------------------------------------------+
"""

# Two H100s: a balanced layout on GPU 0, a media-extension slice and a 1g.20gb on GPU 1
TWO_GPUS = """\
+-------------------------------------------------------+
| GPU instances:                                        |
| GPU   Name             Profile  Instance   Placement  |
|                          ID       ID       Start:Size |
|=======================================================|
|   0  MIG 1g.10gb          19        9          2:1    |
+-------------------------------------------------------+
|   0  MIG 1g.10gb          19       10          3:1    |
+-------------------------------------------------------+
|   0  MIG 2g.20gb          14        3          0:2    |
+-------------------------------------------------------+
|   0  MIG 3g.40gb           9        2          4:4    |
+-------------------------------------------------------+
|   1  MIG 1g.10gb+me       20        7          0:1    |
+-------------------------------------------------------+
|   1  MIG 1g.20gb          15        5          6:2    |
+-------------------------------------------------------+
"""


def test_two_halves_in_placement_order() -> None:
    assert parse_mig_lgi(TWO_HALVES) == {
        0: [MigInfo("3g.20gb", gi_id=2, start=0, size=4), MigInfo("3g.20gb", gi_id=1, start=4, size=4)]
    }


def test_several_gpus_and_the_media_extension_profile() -> None:
    found = parse_mig_lgi(TWO_GPUS)
    assert [(m.profile, m.gi_id, m.start, m.size) for m in found[0]] == [
        ("2g.20gb", 3, 0, 2),
        ("1g.10gb", 9, 2, 1),
        ("1g.10gb", 10, 3, 1),
        ("3g.40gb", 2, 4, 4),
    ]
    assert [(m.profile, m.start, m.size) for m in found[1]] == [("1g.10gb+me", 0, 1), ("1g.20gb", 6, 2)]
    assert all(m.uuid == "" and m.ci_id is None for ms in found.values() for m in ms)  # the table does not say
    for instances in found.values():  # what the driver placed is a layout the geometry allows
        MigLayout.of("H100-SXM5-80GB", [(m.profile, m.start) for m in instances])


@pytest.mark.parametrize("text", ["No MIG-enabled devices found.\n", "No GPU instances found.\n", ""])
def test_nothing_carved_is_no_instances(text: str) -> None:
    assert parse_mig_lgi(text) == {}


def test_a_row_that_does_not_read_is_named() -> None:
    broken = TWO_HALVES.replace("4:4     |\n+", "4-4     |\n+", 1)
    with pytest.raises(ParseError, match="line 6 is not a GPU instance"):
        parse_mig_lgi(broken)


def test_other_output_is_refused() -> None:
    with pytest.raises(ParseError, match="not a GPU instance"):
        parse_mig_lgi("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-2f0a7c61)\n")


# -- -lgi and -lci together (parse_mig_listing) -------------------------------------------------------------------

MIG_CAPTURES = CAPTURES / "nvsmi_mig"


def test_both_listings_of_a_real_capture() -> None:
    listing = parse_mig_listing((MIG_CAPTURES / "lgi_lci_a100_mixed.txt").read_text())
    assert listing.gpu_instances is not None and listing.compute_instances is not None
    assert [(m.profile, m.gi_id, m.start, m.size) for m in listing.gpu_instances[0]] == [
        ("1g.5gb", 9, 6, 1), ("2g.10gb", 3, 4, 2), ("4g.20gb", 2, 0, 4),
    ]  # fmt: skip
    assert [(c.gi_id, c.profile, c.profile_id, c.ci_id, c.start, c.size) for c in listing.compute_instances] == [
        (9, "1g.5gb", 0, 0, 0, 1), (3, "1c.2g.10gb", 0, 0, 0, 1), (3, "1c.2g.10gb", 0, 1, 1, 1),
        (2, "4g.20gb", 3, 0, 0, 4),
    ]  # fmt: skip


def test_the_lines_printed_instead_of_a_listing() -> None:
    none = parse_mig_listing((MIG_CAPTURES / "lgi_none_a30.txt").read_text())
    assert (none.gpu_instances, none.compute_instances, none.mig_off) == ({}, None, False)
    off = parse_mig_listing("No MIG-enabled devices found.\n")
    assert off.mig_off and off.gpu_instances is None
    # -lci of a driver before R470: no Placement column
    old = parse_mig_listing("| Compute instances:   |\n|   0      1       MIG 1c.3g.20gb       0         2     |\n")
    assert old.compute_instances == [ComputeInstance(0, 1, "1c.3g.20gb", 0, 2)]


def test_a_row_that_is_neither_is_refused_or_noted() -> None:
    with pytest.raises(ParseError, match="not a GPU or compute instance"):
        parse_mig_listing("| GPU instances: |\n|   0  MIG what |\n")
    assert parse_mig_listing("| GPU instances: |\n|   0  MIG what |\n", strict=False).problems
    with pytest.raises(ParseError, match="no MIG listing"):
        parse_mig_listing("hello\n", strict=False)
