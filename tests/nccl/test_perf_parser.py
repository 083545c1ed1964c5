from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.errors import ParseError
from gpufleet.nccl.perf_parser import parse_perf, parse_perf_runs

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


ROW = (
    "     1048576        262144     float     sum      -1    50.00   20.97   31.46      0"
    "    49.00   21.40   32.10      0"
)
FOOTER = "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 31.78 \n#\n"


@pytest.mark.parametrize(
    "device",
    [
        "#   Rank  0 on     node-a device  0 [0x1a] Tesla V100-SXM2-32GB",  # 1.x: no Pid
        "#   Rank  0 Pid   4242 on     node-a device  0 [0x1a] Tesla V100-SXM2-32GB",  # 2.0-2.13
        "#  Rank  0 Group  0 Pid   4242 on     node-a device  0 [0x1a] Tesla V100-SXM2-32GB",  # 2.14
        "#  Rank  0 Group  0 Pid   4242 on     node-a device  0 [0000:1a:00] Tesla V100-SXM2-32GB",  # 2.15+
        "  Rank  0 Group  0 Pid   4242 on     node-a device  0 [0000:1a:00] Tesla V100-SXM2-32GB",  # '#' lost
    ],
)
def test_device_lines_of_every_version(device: str) -> None:
    t = parse_perf(f"{device}\n{ROW}\n{FOOTER}")
    assert (t.gpu_name, t.hosts, t.nranks, t.nodes) == ("Tesla V100-SXM2-32GB", ["node-a"], 1, 1)


def test_version_lines_and_run_names() -> None:
    text = (
        "# nccl-tests version 2.19.6 nccl-headers=22807 nccl-library=22807\n"
        "# Collective test starting: ./build/reduce_scatter_perf\n" + ROW + "\n" + FOOTER
    )
    t = parse_perf(text)
    assert (t.tests_version, t.nccl_version, t.op, t.truncated) == ("2.19.6", "2.28.7", "reducescatter", False)
    assert parse_perf("# nccl-tests version 2.0.0 nccl-headers=2804 nccl-library=2804\n" + ROW).nccl_version == "2.8.4"


def test_zero_byte_rows_are_read_and_left_out() -> None:
    zero = "           0             0     float    none      -1" + "     0.00    0.00    0.00      0" * 2
    t = parse_perf(f"{zero}\n{zero}\n{ROW}\n{FOOTER}")
    assert t.zero_rows == 2 and [r.bytes for r in t.rows] == [1048576] and not t.truncated


def test_the_closing_line_and_rows_cut_short() -> None:
    assert not parse_perf(f"{HEADER}{ROW}\n{FOOTER}").truncated
    assert parse_perf(f"{HEADER}{ROW}\n").truncated  # no `# Avg bus bandwidth`: cut, or the run never finished
    cut = parse_perf(f"{HEADER}{ROW}\n{ROW[:95]}\n")  # through the in-place time
    assert cut.truncated and cut.rows[-1].partial and cut.rows[-1].ip_busbw is None
    assert cut.rows[-1].oop_busbw == pytest.approx(31.46)
    for short in (ROW[:70], "     2097152        524288     float     sum      -1"):  # no bandwidth yet
        only_size = parse_perf(f"{HEADER}{ROW}\n{short}\n")
        assert only_size.truncated and len(only_size.rows) == 1


def test_not_applicable_and_old_error_columns() -> None:
    na = ROW.replace("      0    49.00", "    N/A    49.00").removesuffix("      0") + "    N/A"
    t = parse_perf(f"{na}\n{FOOTER}")
    assert t.rows[0].oop_wrong is None and t.rows[0].busbw == pytest.approx(32.10) and t.wrong_column == "off"
    old = (
        "#       size         count      type   redop     time   algbw   busbw  error     time   algbw   busbw  error\n"
        "        4096          1024     float     sum    93.73    0.04    0.09  1e-06    93.15    0.04    0.09  2e+00\n"
        "# Out of bounds values : 3 FAILED\n# Avg bus bandwidth    : 0.09 \n"
    )
    t = parse_perf(old)  # 2.0-2.12: the largest difference, not a count; no root column
    assert t.rows[0].wrong == 0 and t.wrong_column == "delta" and t.out_of_bounds == 3
    assert t.rows[0].oop_time_us == pytest.approx(93.73) and t.rows[0].busbw == pytest.approx(0.09)


def test_per_iteration_columns_timestamps_and_fp8() -> None:
    header = (
        "#       size         count      type   redop    root     time   algbw   busbw  #wrong    i_min    i_max"
        "    i_p99    i_cv%     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%           timestamp"
    )
    row = (
        "     1048576       1048576    f8e4m3     sum      -1    50.00   20.97   31.46       0    48.00    55.00"
        "    54.00     3.10    49.00   21.40   32.10       0    47.00    52.00    51.00     2.20  2025-03-14 10:22:01"
    )
    t = parse_perf(f"{header}\n{row}\n{FOOTER}")
    (r,) = t.rows
    assert (r.dtype, r.oop_busbw, r.ip_time_us, r.ip_busbw, r.ip_wrong) == ("f8e4m3", 31.46, 49.0, 32.10, 0)


def test_hypercube_prints_no_redop() -> None:
    row = ROW.replace("     sum", "        ")
    assert parse_perf(f"{row}\n{FOOTER}").rows[0].busbw == pytest.approx(32.10)


def test_runs_one_after_another_are_kept_apart() -> None:
    first = f"# Collective test starting: all_reduce_perf\n{HEADER}{ROW}\n{FOOTER}"
    second = "# Collective test starting: all_gather_perf\n# nThread 1 nGpus 8 minBytes 8\n"
    second += ROW.replace("sum", "none")
    runs = parse_perf_runs(f"{first}{second}\n".splitlines())
    assert [(r.op, len(r.rows), r.truncated) for r in runs] == [("allreduce", 1, False), ("allgather", 1, True)]
    assert runs[0].nranks == 4 and runs[1].nranks is None


def test_absurd_numbers_are_not_rows() -> None:
    huge = "9" * 40 + ROW.lstrip().removeprefix("1048576")
    inf = ROW.replace("31.46", "1e400")
    t = parse_perf(f"{huge}\n{inf}\n{ROW}\n{FOOTER}")
    assert [r.busbw for r in t.rows] == [pytest.approx(32.10)]  # 1e400 is no bandwidth: not a row


def test_a_failure_is_kept_and_what_the_output_ends_with() -> None:
    text = f"{HEADER}h:1:2 [0] NCCL WARN an early warning\n{ROW}\nh: Test NCCL failure common.cu:1 'internal error'\n"
    t = parse_perf(text)
    assert len(t.errors) == 2 and t.last_errors == ["h: Test NCCL failure common.cu:1 'internal error'"]


def test_not_applicable_in_place_of_any_number() -> None:
    na_times = ROW.replace("50.00", "  N/A").replace("49.00", "  N/A")
    no_bandwidth = "     2097152        524288     float     sum      -1" + "      N/A     N/A     N/A      0" * 2
    t = parse_perf(f"{na_times}\n{no_bandwidth}\n{FOOTER}")
    assert [r.busbw for r in t.rows] == [pytest.approx(32.10)] and t.rows[0].time_us is None
    assert not t.truncated  # a row of N/A is no row cut short


def test_nccls_own_init_lines_give_world_size_hosts_and_network() -> None:
    """A run whose output keeps NCCL's INFO lines (mpirun --tag-output) but prints no '#  Rank' lines."""
    lines = [
        "[1,1]<stdout>:w-1:21:26 [0] NCCL INFO comm 0x7f9c0c000f60 rank 1 nranks 2 cudaDev 0 busId f5000 - Init "
        "COMPLETE",
        "[1,0]<stdout>:w-0:21:27 [0] NCCL INFO comm 0x7fde98000f60 rank 0 nranks 2 cudaDev 0 busId 35000 - Init "
        "COMPLETE",
        "[1,0]<stdout>:w-0:21:21 [0] NCCL INFO NET/OFI Selected Provider is efa (found 1 nics)",
        "[1,0]<stdout>:   1073741824  268435456  float  sum  -1  344981  3.11  3.11  0  344454  3.12  3.12  0",
        "[1,0]<stdout>:# Avg bus bandwidth    : 1.15327",
    ]
    (table,) = parse_perf_runs(lines)
    assert (table.nranks, table.nodes, sorted(table.hosts)) == (2, 2, ["w-0", "w-1"])
    assert (table.net, table.nics) == ("efa", 1)


def test_ib_devices_and_a_command_with_environment_before_the_binary() -> None:
    lines = [
        "NCCL_P2P_DISABLE=1 CUDA_VISIBLE_DEVICES=0,1,6,7 ./build/all_reduce_perf -b 1G -e 10G -f 2 -g 4",
        "h1:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE ; OOB eth0:10.0.0.1<0>",
        "  1073741824  268435456  float  sum  -1  1121937  0.96  1.44  0  1120530  0.96  1.44  0",
        "# Avg bus bandwidth    : 1.44",
    ]
    (table,) = parse_perf_runs(lines)
    assert table.op == "allreduce" and table.env["NCCL_P2P_DISABLE"] == "1" and table.gpus_per_thread == 4
    assert (table.net, table.nics) == ("roce", 2)


def test_a_launcher_banner_gives_the_world_size() -> None:
    lines = ["WORLD_SIZE=16", "  1073741824  268435456  float  sum  -1  5000  214.7  402.6  0  5000  214.7  402.6  0",
             "# Avg bus bandwidth    : 402.6"]  # fmt: skip
    (table,) = parse_perf_runs(lines)
    assert table.info_nranks == 16 and table.nranks is None


def test_nccl_net_ib_device_lines_give_each_ports_speed() -> None:
    """net_ib.cc's `NET/IB: [d] name:dev:port/LL provider=... speed=Mb/s` lines (INFO since NCCL 2.20, TRACE
    before, without provider=)."""
    lines = [
        "h1:1:1 [0] NCCL INFO NET/IB: [0] mlx5_0:uverbs0:1/IB provider=Mlx5 speed=400000 context=0x1 pciPath=/x ar=1",
        "h1:1:1 [0] NCCL INFO NET/IB: [1] mlx5_3:uverbs3:1/RoCE speed=200000 context=0x2 pciPath=/y ar=0",
        "h1:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_3:1/RoCE ; OOB eth0:10.0.0.1<0>",
        "  1073741824  268435456  float  sum  -1  1121937  0.96  1.44  0  1120530  0.96  1.44  0",
    ]
    (table,) = parse_perf_runs(lines)
    assert table.nic_mbps == {"mlx5_0:1": 400000, "mlx5_3:1": 200000} and table.nics == 2
