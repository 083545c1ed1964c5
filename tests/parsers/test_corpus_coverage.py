"""Every corpus capture of a kind these parsers read goes through its parser, new captures included."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from gpufleet.parsers.infiniband.diags import parse_link_events
from gpufleet.parsers.infiniband.sysfs import parse_sysfs_snapshot
from gpufleet.parsers.kernel.kmsg import scan_kmsg
from gpufleet.parsers.nhc import parse_health_log
from gpufleet.parsers.nvidia.dcgmi_diag import parse_diag
from gpufleet.parsers.nvidia.smi import parse_query_text
from gpufleet.parsers.nvidia.smi_table import parse_table
from gpufleet.parsers.nvidia.topo import parse_nvlink_status, parse_topo_matrix

PARSERS: dict[str, Callable[[str], object]] = {
    "nvsmi_q_": parse_query_text,
    "nvsmi_table_": parse_table,
    "topo_m_": parse_topo_matrix,
    "nvlink_status_": parse_nvlink_status,
    "dcgmi_diag_": parse_diag,
    "ib_sysfs_counters_": lambda text: parse_sysfs_snapshot(text, hca="mlx5_0"),
    "ib_linkflap_": parse_link_events,
    "aznhc_health_log_": parse_health_log,
}


def test_every_capture_of_our_kinds_parses(corpus: Path) -> None:
    seen: dict[str, int] = dict.fromkeys(PARSERS, 0)
    kernel_logs = 0
    for path in sorted(corpus.iterdir()):
        if not path.is_file() or path.name.endswith(".source.txt") or path.suffix not in (".txt", ".log"):
            continue
        assert path.with_name(path.stem + ".source.txt").exists(), f"{path.name} has no provenance file"
        text = path.read_text()
        prefix = next((p for p in PARSERS if path.name.startswith(p)), None)
        if prefix is not None:
            assert PARSERS[prefix](text), path.name
            seen[prefix] += 1
        elif path.suffix == ".log":
            scan = scan_kmsg(text)
            assert scan.events or scan.rejected, path.name
            kernel_logs += 1
    assert all(seen.values()), seen
    assert kernel_logs >= 16
