from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from gpufleet.nccl.compare import compare_table, compare_to_findings
from gpufleet.nccl.perf_parser import PerfRow, PerfTable, parse_perf
from gpufleet.nccl.topology import Topology

P5 = Topology(gpu="h100-sxm", nodes=2, nics_per_node=32, nic_gbps=100, transport="efa", cpu_vendor="amd")
OCI = Topology(gpu="h100-sxm", nodes=2, nics_per_node=16, nic_gbps=200, transport="roce")


def _scaled(table: PerfTable, factor: float, min_bytes: int = 0) -> PerfTable:
    rows = [
        replace(r, oop_busbw=(r.oop_busbw or 0) * factor, ip_busbw=(r.ip_busbw or 0) * factor)
        if r.bytes >= min_bytes
        else r
        for r in table.rows
    ]
    return replace(table, rows=rows)


def test_healthy_corpus_runs(corpus: Path) -> None:
    perf = corpus / "nccl" / "perf"
    for name, topo in (
        ("h100_aws_p5_2node_efa.txt", P5),
        ("h100_oci_bm_gpu_h100_8_2node_roce.txt", OCI),
        ("h200_azure_ndv5_1node_8gpu_nvls.txt", Topology(gpu="h200")),
    ):
        result = compare_table(parse_perf((perf / name).read_text()), topo, "allreduce")
        assert result.verdict == "healthy", (name, result.causes)


def test_half_bandwidth_multinode_is_a_missing_rail(corpus: Path) -> None:
    table = parse_perf((corpus / "nccl" / "perf" / "h100_oci_bm_gpu_h100_8_2node_roce.txt").read_text())
    result = compare_table(_scaled(table, 0.5), OCI)
    assert result.verdict == "underperforming"
    assert [c.code for c in result.causes] == ["rail_missing"]
    findings = compare_to_findings(result)
    assert findings[0].kind == "nccl_rail_missing" and findings[0].severity == "critical"


def test_mid_size_dip(corpus: Path) -> None:
    table = parse_perf((corpus / "nccl" / "perf" / "h100_aws_p5_2node_efa.txt").read_text())
    rows = [
        replace(r, oop_busbw=(r.oop_busbw or 0) * 0.2, ip_busbw=(r.ip_busbw or 0) * 0.2)
        if (4 << 20) <= r.bytes <= (64 << 20)
        else r
        for r in table.rows
    ]
    result = compare_table(replace(table, rows=rows), P5)
    assert result.verdict == "underperforming"
    assert "mid_size_dip" in [c.code for c in result.causes]
    assert min(result.flagged_sizes) == 4 << 20 and max(result.flagged_sizes) == 64 << 20


def test_socket_speed_single_node_is_wrong_transport() -> None:
    rows = [PerfRow(1 << k, None, None, None, None, None, None, None, None, 9.0, None) for k in range(20, 31)]
    result = compare_table(PerfTable(op="allreduce", rows=rows, hosts=["gpu-07"]), Topology(gpu="h100-sxm"))
    assert "wrong_transport" in [c.code for c in result.causes]
    findings = compare_to_findings(result)
    assert findings[0].host == "gpu-07"


def test_failed_run_and_wrong_results() -> None:
    row = PerfRow(1 << 20, 1, "float", 50.0, 21.0, 31.0, 2, 50.0, 21.0, 31.0, 0)
    table = PerfTable(op="allreduce", rows=[row], errors=["NCCL WARN something"], truncated=True)
    result = compare_table(table, Topology(gpu="h100-sxm"))
    codes = [c.code for c in result.causes]
    assert result.verdict == "failed" and "data_corruption" in codes and "run_failed" in codes


def test_high_small_message_latency(corpus: Path) -> None:
    table = parse_perf((corpus / "nccl" / "perf" / "h100_aws_p5_2node_efa.txt").read_text())
    ok = compare_table(table, P5)
    assert ok.latency_factor is not None and ok.latency_factor < 2.5
    slow = [
        replace(r, oop_time_us=(r.oop_time_us or 0) * 4, ip_time_us=(r.ip_time_us or 0) * 4) if r.bytes <= 65536 else r
        for r in table.rows
    ]
    result = compare_table(replace(table, rows=slow), P5)
    assert "high_latency" in [c.code for c in result.causes]
    assert result.verdict == "underperforming"
