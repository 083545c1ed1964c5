"""A run the model cannot size, held to its own peak and, on one node, to the PCIe floor (nccl.own_peak)."""

from __future__ import annotations

from gpufleet.catalog.gpus import get_gpu_model
from gpufleet.nccl.own_peak import judge_own_peak
from gpufleet.nccl.perf_parser import PerfRow, PerfTable

GIB = 1 << 30


def _table(busbw: dict[int, float], env: dict[str, str] | None = None) -> PerfTable:
    rows = [PerfRow(size, size // 4, "float", 100.0, bw, bw, 0, 100.0, bw, bw, 0) for size, bw in busbw.items()]
    return PerfTable(op=None, rows=rows, env=env or {})


def test_a_size_that_falls_below_what_smaller_ones_reached_is_flagged() -> None:
    own = judge_own_peak(_table({GIB: 230.0, 2 * GIB: 232.0, 4 * GIB: 150.0, 8 * GIB: 233.0}), 1, 4, None, "why")
    assert [c.code for c in own.causes] == ["low_peak"] and own.sizes == [4 * GIB]
    assert "65% of what smaller messages" in own.causes[0].message


def test_bandwidth_still_rising_at_large_sizes_is_not_a_fall() -> None:
    """Large NVLink domains peak at GiBs: 256 MiB well below the peak is the ramp, not a fault."""
    own = judge_own_peak(_table({256 << 20: 670.0, GIB: 780.0, 8 * GIB: 847.0}), 1, 8, None, "why")
    assert own.causes == [] and own.conclusive and own.peak == 847.0


def test_one_node_below_half_a_pcie_link_is_host_memory() -> None:
    own = judge_own_peak(_table({GIB: 5.2, 2 * GIB: 5.2}, {"NCCL_P2P_DISABLE": "1"}), 1, 4, None, "no GPU named")
    assert [c.code for c in own.causes] == ["wrong_transport"]
    assert "NCCL_P2P_DISABLE=1 is set" in own.causes[0].message and "12 GB/s" in own.causes[0].message
    assert judge_own_peak(_table({GIB: 7.0}), 1, 4, None, "x").causes == []  # above the Gen3 floor of 6


def test_a_known_gpu_is_held_to_its_own_pcie_generation() -> None:
    spec = get_gpu_model("mi300x")  # PCIe Gen5 x16: 48 GB/s per direction, floor 24
    own = judge_own_peak(_table({GIB: 20.0}), 1, 8, spec, "the model does not cover AMD")
    assert [c.code for c in own.causes] == ["wrong_transport"] and "Gen5 x16" in own.causes[0].message
    ok = judge_own_peak(_table({GIB: 330.0}), 1, 8, spec, "the model does not cover AMD")
    assert ok.causes == [] and any("scale-up links" in n for n in ok.notes)


def test_across_nodes_a_steady_run_is_not_a_verdict() -> None:
    """A socket fallback holds its own peak too: without the NICs' speed, nothing says the network is right."""
    own = judge_own_peak(_table({GIB: 3.1, 2 * GIB: 3.1}), 2, 2, None, "no NIC speed")
    assert own.causes == [] and not own.conclusive
    many = judge_own_peak(_table({GIB: 400.0}), 1, 16, None, "x", nodes_assumed=True)  # no hosts, 16 ranks
    assert not many.conclusive and "more than one node's worth" in many.notes[-1]


def test_a_run_that_stops_below_64_mib_is_not_judged() -> None:
    own = judge_own_peak(_table({1 << 20: 10.0, 16 << 20: 80.0}), 1, 8, None, "no GPU named")
    assert own.peak is None and not own.conclusive and "no size of 64 MiB or more" in own.notes[0]
