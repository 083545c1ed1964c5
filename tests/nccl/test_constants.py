from __future__ import annotations

import pytest

from gpufleet.errors import UserError
from gpufleet.nccl.constants import ALGOS, PROTOS, available_versions, load_constants


def test_versions_available() -> None:
    assert {"2.18", "2.21", "2.30"} <= set(available_versions())


@pytest.mark.parametrize("version", ["2.18", "2.21", "2.30"])
def test_tables_complete(version: str) -> None:
    c = load_constants(version)
    for algo in ALGOS:
        assert len(c.base_latency[algo]) == 3
        for hw in ("NVLINK", "PCI", "NET"):
            assert len(c.hw_latency[hw][algo]) == 3
    for proto in PROTOS:
        assert len(c.tree_correction[proto]) == 24


def test_v230_values_match_reference() -> None:
    c = load_constants("2.30.7")
    assert c.version == "2.30"
    assert c.base("Ring", "LL") == 6.6
    assert c.hw("NET", "NVLSTree", "Simple") == 20.9
    assert c.ll_max_bw[2] == (141.0, 45.0, 35.0)
    assert c.per_ch_max_nvls_tree_bw is not None and c.per_ch_max_nvls_tree_bw[2] == (0.0, 57.7, 45.5)
    assert c.nvls_efficiency == (0.0, 0.0, 0.85, 0.74)


def test_version_drift() -> None:
    old = load_constants("2.18.5")
    mid = load_constants("2.21.5")
    assert old.version == "2.18" and mid.version == "2.21"
    assert old.ll_max_bw[2] == old.ll_max_bw[1]  # Hopper LL caps equal Ampere's up to 2.18
    assert old.variant.ring_ll == "quarter" and mid.variant.ring_ll == "half"
    assert mid.hw("NET", "NVLSTree", "Simple") == 14
    assert load_constants("2.28.9").version == "2.30"
    assert load_constants("2.27.7").version == "2.21"


def test_bad_versions() -> None:
    with pytest.raises(UserError):
        load_constants("2.12")
    with pytest.raises(UserError):
        load_constants("banana")
