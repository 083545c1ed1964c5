"""Measured against expected, and the one judgement of a run that `nccl compare` and `triage` share."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from gpufleet.nccl.compare import compare_table, compare_to_findings, judge_run, run_findings
from gpufleet.nccl.perf_parser import PerfRow, PerfTable, parse_perf, parse_perf_runs
from gpufleet.nccl.topology import Topology

DATA = Path(__file__).resolve().parents[1] / "triage" / "readers" / "data"

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


def _whole(path: Path) -> PerfTable:
    """A corpus excerpt as if it had nccl-tests' closing lines: for checks of the model, not of truncation."""
    return replace(parse_perf(path.read_text()), truncated=False)


def test_healthy_corpus_runs(corpus: Path) -> None:
    perf = corpus / "nccl" / "perf"
    for name, topo in (
        ("h100_oci_bm_gpu_h100_8_2node_roce.txt", OCI),
        ("h200_azure_ndv5_1node_8gpu_nvls.txt", Topology(gpu="h200")),
    ):
        result = compare_table(parse_perf((perf / name).read_text()), topo, "allreduce")
        assert result.verdict == "healthy", (name, result.causes)


@pytest.mark.parametrize(
    ("name", "topo"),
    [
        ("a100_azure_ndv4_1node_8gpu.txt", Topology(gpu="a100", cpu_vendor="amd", nccl_version="2.18.5")),
        ("h200_azure_ndv5_1node_8gpu_nvls.txt", Topology(gpu="h200", nccl_version="2.20.5")),
        # NCCL 2.26.6 believes 933 GB/s of NVLS busbw on sm100 (and picks NVLS by it); the run's 738 GB/s at 1 GiB is
        # healthy against what the hardware delivers (data/delivery.yaml: 2.28+'s nvlsEfficiency)
        ("gb200_oci_mnnvl_2tray_8gpu.txt", Topology(gpu="b200", cpu_vendor="arm", nccl_version="2.26.6")),
        ("h100_oci_bm_gpu_h100_8_2node_roce.txt", OCI.model_copy(update={"nccl_version": "2.21.5"})),
        ("h100_aws_p5_2node_efa.txt", P5),
    ],
)
def test_healthy_corpus_runs_on_their_own_nccl_release(corpus: Path, name: str, topo: Topology) -> None:
    """Each corpus run with the NCCL release its source names (p5 names none: the newest), taken whole."""
    result = compare_table(_whole(corpus / "nccl" / "perf" / name), topo, "allreduce")
    assert result.verdict == "healthy", (name, result.causes, [(r.bytes, r.ratio) for r in result.rows if r.flagged])


def test_healthy_gb200_at_half_bandwidth_is_flagged(corpus: Path) -> None:
    topo = Topology(gpu="b200", cpu_vendor="arm", nccl_version="2.26.6")
    table = parse_perf((corpus / "nccl" / "perf" / "gb200_oci_mnnvl_2tray_8gpu.txt").read_text())
    result = compare_table(_scaled(table, 0.5), topo, "allreduce")
    assert result.verdict == "underperforming"
    assert all(r.flagged for r in result.rows if r.bytes >= 256 << 20)


def test_an_excerpt_without_the_closing_line_is_unknown_never_healthy(corpus: Path) -> None:
    """The p5 excerpt stops mid-row before `# Avg bus bandwidth`: its bandwidth is fine, its verdict is not sure."""
    table = parse_perf((corpus / "nccl" / "perf" / "h100_aws_p5_2node_efa.txt").read_text())
    assert table.truncated and table.rows[-1].partial
    result = compare_table(table, P5, "allreduce")
    assert result.verdict == "unknown" and not result.flagged_sizes and not result.causes
    assert compare_table(replace(table, truncated=False), P5, "allreduce").verdict == "healthy"


def test_half_bandwidth_multinode_is_a_missing_rail(corpus: Path) -> None:
    table = parse_perf((corpus / "nccl" / "perf" / "h100_oci_bm_gpu_h100_8_2node_roce.txt").read_text())
    result = compare_table(_scaled(table, 0.5), OCI)
    assert result.verdict == "underperforming"
    assert [c.code for c in result.causes] == ["rail_missing"]
    findings = compare_to_findings(result)
    assert findings[0].kind == "nccl_rail_missing" and findings[0].severity == "critical"


def test_mid_size_dip(corpus: Path) -> None:
    table = _whole(corpus / "nccl" / "perf" / "h100_aws_p5_2node_efa.txt")
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
    warn = "node-b:1:2 [0] NCCL WARN something"
    table = PerfTable(op="allreduce", rows=[row], errors=[warn], last_errors=[warn], truncated=True)
    result = compare_table(table, Topology(gpu="h100-sxm"))
    codes = [c.code for c in result.causes]
    assert result.verdict == "failed" and "data_corruption" in codes and "run_failed" in codes


def test_a_warning_the_run_went_on_from_is_not_a_stop() -> None:
    """An NCCL WARN before rows that kept coming, in output cut short: incomplete, not a failed run."""
    row = PerfRow(1 << 30, 1, "float", 5.0e3, 210.0, 400.0, 0, 5.0e3, 210.0, 400.0, 0)
    table = PerfTable(op="allreduce", rows=[row], errors=["h:1:2 [0] NCCL WARN Cuda failure 'out of memory'"])
    table.truncated = True
    result = compare_table(table, Topology(gpu="h100-sxm"))
    assert result.verdict == "unknown" and "run_failed" not in [c.code for c in result.causes]


def test_zero_byte_rows_with_a_time_do_not_stop_the_comparison() -> None:
    """all_gather with fewer elements than ranks prints 0-byte rows; the model has no 0-byte prediction."""
    zero = PerfRow(0, 0, "float", 5.1, 0.0, 0.0, 0, 5.0, 0.0, 0.0, 0)
    big = PerfRow(1 << 30, 1 << 25, "float", 3.2e3, 335.0, 293.0, 0, 3.2e3, 335.0, 293.0, 0)
    result = compare_table(PerfTable(op="allgather", rows=[zero, big]), Topology(gpu="h100-sxm"))
    assert [r.bytes for r in result.rows] == [1 << 30]


def test_one_rank_is_not_compared() -> None:
    rows = [PerfRow(1 << 30, 1 << 28, "float", 100.0, 1715.0, 0.0, 0, 0.8, 4.3e4, 0.0, None)]
    assert compare_table(PerfTable(op="allreduce", rows=rows), Topology(gpu="h100-sxm", gpus_per_node=1)).rows == []
    table = parse_perf((DATA / "nccl_tests_a100_allreduce_8gpu.txt").read_text())
    table.rank_hosts, table.rank_gpus, table.rank_groups = {0: "h"}, {0: "NVIDIA A100-SXM4-80GB"}, {0: 0}
    table.nranks, table.nodes = 1, 1
    judgement = judge_run(table)
    assert judgement.result is None and "one GPU" in judgement.not_judged


@pytest.mark.parametrize(
    ("name", "verdict", "codes", "gpu", "ranks"),
    [
        ("nccl_tests_a100_allreduce_8gpu.txt", "healthy", [], "a100-80gb", 8),
        ("nccl_tests_h100_allgather_slow.txt", "underperforming", ["low_peak"], "h100-sxm", 8),
        ("nccl_tests_a40_wrong.txt", "failed", ["data_corruption"], "a40", 4),
    ],
)
def test_judge_runs_from_their_own_header(name: str, verdict: str, codes: list[str], gpu: str, ranks: int) -> None:
    (table,) = parse_perf_runs((DATA / name).read_text().splitlines())
    judgement = judge_run(table)
    assert judgement.verdict == verdict and [c.code for c in judgement.causes] == codes
    assert judgement.topology is not None
    assert (judgement.topology.gpu, judgement.topology.nranks, judgement.topology.nodes) == (gpu, ranks, 1)


def test_the_version_line_gives_the_nccl_model_and_flags_override() -> None:
    (table,) = parse_perf_runs((DATA / "nccl_tests_h100_allgather_slow.txt").read_text().splitlines())
    judgement = judge_run(table)
    assert judgement.topology is not None and judgement.topology.nccl_version == "2.28.7"
    assert not judgement.assumed  # everything came from the output
    faster = judge_run(table, {"gpu": "a100-80gb", "nccl_version": "2.21"})
    assert faster.topology is not None and (faster.topology.gpu, faster.topology.nccl_version) == ("a100-80gb", "2.21")


def test_an_nccl_older_than_the_model_is_compared_with_the_oldest_and_says_so() -> None:
    (table,) = parse_perf_runs((DATA / "nccl_tests_a100_allreduce_8gpu.txt").read_text().splitlines())
    judgement = judge_run(replace(table, nccl_version="2.10.3"))
    assert judgement.result is not None
    assert any("2.10.3 is not modelled" in a for a in judgement.assumed)


def test_a_multi_node_run_without_nics_is_judged_only_by_itself() -> None:
    text = (DATA / "nccl_tests_2node_network_error.txt").read_text()
    (table,) = parse_perf_runs(text.splitlines())
    judgement = judge_run(table)
    assert judgement.result is None and "NIC count per node" in judgement.not_judged
    assert judgement.verdict == "failed" and [c.code for c in judgement.causes] == ["run_failed"]
    assert "network error" in judgement.causes[0].message
    (finding,) = run_findings(judgement)
    assert finding.kind == "nccl_run_failed" and finding.host is None  # two hosts: not one host's fault
    with_nics = judge_run(table, {"nics_per_node": 8, "nic_gbps": 400})
    assert with_nics.result is not None and with_nics.verdict == "failed"


def test_unknown_gpu_judges_corruption_but_not_bandwidth() -> None:
    text = (DATA / "nccl_tests_a40_wrong.txt").read_text().replace("NVIDIA A40", "NVIDIA Quadro Z9000")
    judgement = judge_run(parse_perf(text))
    assert judgement.result is None and "'NVIDIA Quadro Z9000' is not in the catalog" in judgement.not_judged
    assert judgement.verdict == "failed" and [c.code for c in judgement.causes] == ["data_corruption"]
    # nothing wrong seen: held to its own peak and, on its one node, to the PCIe floor; the model is not claimed
    healthy = judge_run(parse_perf((DATA / "nccl_tests_a100_allreduce_8gpu.txt").read_text().replace("A100", "Z9")))
    assert healthy.result is None and healthy.judged_by_itself and healthy.verdict == "healthy"
    assert healthy.own is not None and "not against a model of its hardware" in healthy.own.notes[0]


def test_collective_and_ranks_from_the_rows(corpus: Path) -> None:
    """No test name and no '#  Rank' lines (the GB200 excerpt): busbw/algbw = 2(n-1)/n says allreduce on 8."""
    table = parse_perf((corpus / "nccl" / "perf" / "gb200_oci_mnnvl_2tray_8gpu.txt").read_text())
    judgement = judge_run(table, {"gpu": "gb200", "nodes": 1})
    assert judgement.op == "allreduce" and judgement.topology is not None and judgement.topology.nranks == 8
    assert any("from the rows" in a for a in judgement.assumed)
    gather = parse_perf((DATA / "nccl_tests_h100_allgather_slow.txt").read_text())
    gather.op, gather.rank_hosts, gather.rank_gpus, gather.rank_groups = None, {}, {}, {}
    gather.nranks = gather.nodes = None
    guessed = judge_run(gather, {"gpu": "h100-sxm"})
    assert guessed.op == "allgather" and guessed.topology is not None and guessed.topology.nranks == 8


def test_a_model_the_collective_lacks_is_said(corpus: Path) -> None:
    table = parse_perf((corpus / "nccl" / "perf" / "a100_1node_sendrecv_p2p.txt").read_text())
    judgement = judge_run(table, {"gpu": "a100-80gb"})
    assert judgement.result is None and judgement.not_judged == "the model does not cover sendrecv"
    assert judgement.verdict == "unknown"


def test_high_small_message_latency(corpus: Path) -> None:
    table = _whole(corpus / "nccl" / "perf" / "h100_aws_p5_2node_efa.txt")
    ok = compare_table(table, P5)
    assert ok.latency_factor is not None and ok.latency_factor < 2.5
    slow = [
        replace(r, oop_time_us=(r.oop_time_us or 0) * 4, ip_time_us=(r.ip_time_us or 0) * 4) if r.bytes <= 65536 else r
        for r in table.rows
    ]
    result = compare_table(replace(table, rows=slow), P5)
    assert "high_latency" in [c.code for c in result.causes]
    assert result.verdict == "underperforming"
