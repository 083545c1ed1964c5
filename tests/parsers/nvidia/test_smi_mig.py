"""`nvidia-smi mig -lgi` into the contract's MigInfo, on tables written in the layout NVIDIA documents."""

from __future__ import annotations

import pytest

from gpufleet.errors import ParseError
from gpufleet.model.observe import MigInfo
from gpufleet.parsers.nvidia.smi_mig import parse_mig_lgi
from gpufleet.sched.partition.mig import MigLayout

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
