from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.errors import ParseError
from gpufleet.nccl.perf_parser import parse_perf

HEADER = """# nThread 1 nGpus 1 minBytes 8 maxBytes 1073741824 step: 2(factor) warmup iters: 5 iters: 20
#  Rank  0 Group  0 Pid  11111 on   node-a device  0 [0x18] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid  11112 on   node-a device  1 [0x2a] NVIDIA H100 80GB HBM3
#  Rank  2 Group  0 Pid  22221 on   node-b device  0 [0x18] NVIDIA H100 80GB HBM3
#  Rank  3 Group  0 Pid  22222 on   node-b device  1 [0x2a] NVIDIA H100 80GB HBM3
#  size  count  type  redop  root  time  algbw  busbw #wrong  time  algbw  busbw #wrong
"""


def test_corpus_tables(corpus: Path) -> None:
    perf = corpus / "nccl" / "perf"
    efa = parse_perf((perf / "h100_aws_p5_2node_efa.txt").read_text())
    assert len(efa.rows) == 32 and efa.rows[-1].bytes == 17179869184
    assert efa.rows[-1].ip_busbw == pytest.approx(487.26)  # last row lacks #wrong: still read
    oci = parse_perf((perf / "h100_oci_bm_gpu_h100_8_2node_roce.txt").read_text())
    assert oci.op == "allreduce" and oci.nranks == 16 and oci.nodes == 2
    assert oci.avg_busbw == pytest.approx(458.452)
    assert len(oci.env["NCCL_IB_HCA"].split(",")) == 16
    md = parse_perf((perf / "a100_azure_ndv4_1node_8gpu.txt").read_text())
    assert md.fmt == "busbw-table"
    assert [r.bytes for r in md.rows][:8] == [1 << k for k in range(10, 18)]  # 65K/132K snap to 2^16/2^17
    sr = parse_perf((perf / "a100_1node_sendrecv_p2p.txt").read_text())
    assert sr.op == "sendrecv" and sr.rows[0].ip_wrong is None  # N/A


def test_header_devices_and_launcher_prefixes() -> None:
    body = "\n".join(
        f"[1,0]<stdout>:{line}"
        for line in (
            HEADER + "     1048576        262144     float     sum      -1    50.0   20.97   "
            "31.46      0    49.0   21.40   32.10      0\n"
        ).splitlines()
    )
    t = parse_perf(body)
    assert t.gpu_name == "NVIDIA H100 80GB HBM3"
    assert t.nranks == 4 and t.nodes == 2 and t.hosts == ["node-a", "node-b"]
    assert t.rows[0].busbw == pytest.approx(32.10)


def test_wrong_column_and_error_part_way() -> None:
    text = HEADER + (
        "     1048576        262144     float     sum      -1    50.0   20.97   31.46      3    "
        "49.0   21.40   32.10      0\n"
        "     2097152        524288     float     sum      -1    60.0   34.95   52.43      0    "
        "61.0   34.38   51.57      0\n"
        "node-b:22221:22290 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from "
        "peer with status=12\n"
        "node-b: Test NCCL failure common.cu:1005 'remote process exited or there was a network error'\n"
    )
    t = parse_perf(text)
    assert len(t.rows) == 2 and t.wrong_rows[0].bytes == 1048576
    assert t.truncated and t.errors


def test_ansi_and_torchrun_prefix() -> None:
    text = (
        "\x1b[32m[rank0]:\x1b[0m        8388608       2097152     float     sum      -1   "
        "100.0   83.89  157.29      0   99.0   84.74  158.88      0"
    )
    t = parse_perf(text)
    assert t.rows[0].bytes == 8388608


def test_garbage_is_a_parse_error() -> None:
    with pytest.raises(ParseError):
        parse_perf("\x00\x01binary\xff garbage\nnot a table")


def test_nccl_version_line() -> None:
    text = (
        "# nccl-tests\nnode-a:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n"
        + HEADER.splitlines()[-1]
        + (
            "\n     1048576        262144     float     sum      -1    50.0   20.97   31.46      0"
            "    49.0   21.40   32.10      0"
        )
    )
    t = parse_perf(text)
    assert t.nccl_version == "2.21.5" and len(t.rows) == 1
