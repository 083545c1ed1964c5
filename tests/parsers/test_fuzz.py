"""Bad input never escapes as anything but ParseError: random text and damaged corpus captures."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.errors import ParseError
from gpufleet.parsers.infiniband.diags import (
    parse_iblinkinfo,
    parse_ibnetdiscover,
    parse_ibqueryerrors,
    parse_link_events,
    parse_perfquery,
)
from gpufleet.parsers.infiniband.sysfs import parse_sysfs_snapshot
from gpufleet.parsers.nhc import parse_health_log
from gpufleet.parsers.nvidia.dcgmi_diag import parse_diag
from gpufleet.parsers.nvidia.smi import parse_query_text, parse_query_xml
from gpufleet.parsers.nvidia.smi_table import parse_table
from gpufleet.parsers.nvidia.topo import parse_nvlink_status, parse_topo_matrix
from tests.parsers.damage import damaged

PARSERS: dict[str, Callable[[str], object]] = {
    "nvsmi_q_01_a100_ecc_rowremap_stas00.txt": parse_query_text,
    "nvsmi_q_03_retired_pages_bad_aznhc.txt": parse_query_text,
    "nvsmi_table_01_a100_stas00.txt": parse_table,
    "topo_m_02_h100_nv18_stas00.txt": parse_topo_matrix,
    "nvlink_status_a100_ok_gpud.txt": parse_nvlink_status,
    "dcgmi_diag_fail_02_r2_memory_thermal_stas00.txt": parse_diag,
    "ib_sysfs_counters_mlx5_0_h100_gpud.txt": lambda t: parse_sysfs_snapshot(t, hca="mlx5_0"),
    "ib_linkflap_syslog_aznhc.log": parse_link_events,
    "aznhc_health_log_real.txt": parse_health_log,
}
TEXT_ONLY: list[Callable[[str], object]] = [
    parse_query_xml,
    parse_perfquery,
    parse_ibqueryerrors,
    parse_iblinkinfo,
    parse_ibnetdiscover,
]


def _survives(parser: Callable[[str], object], text: str) -> None:
    with contextlib.suppress(ParseError):
        parser(text)


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_damaged_captures(corpus: Path, name: str) -> None:
    text = (corpus / name).read_text()
    parser = PARSERS[name]
    for copy in damaged(text, name, 60):
        _survives(parser, copy)


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=200))
def test_random_text(text: str) -> None:
    for parser in [*PARSERS.values(), *TEXT_ONLY]:
        _survives(parser, text)
