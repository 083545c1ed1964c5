from __future__ import annotations

import json
from pathlib import Path

from gpufleet.nccl import allreduce_time_s
from tests.clirun import gpufleet

DATA = Path(__file__).resolve().parents[1] / "triage" / "readers" / "data"


def test_predict_json() -> None:
    res = gpufleet(
        "nccl",
        "predict",
        "--gpu",
        "h100-sxm",
        "--nodes",
        "2",
        "--nics-per-node",
        "8",
        "--nic-gbps",
        "400",
        "--transport",
        "ib",
        "--max-bytes",
        "1G",
        "-o",
        "json",
    )
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    assert rows[0]["bytes"] == 8 and rows[-1]["bytes"] == 1 << 30
    assert {"bytes", "algo", "proto", "time_us", "algbw_gbps", "busbw_gbps"} <= set(rows[0])


def test_predict_plot(tmp_path: Path) -> None:
    out = tmp_path / "p.png"
    res = gpufleet("nccl", "predict", "--gpu", "a100", "--plot", str(out), "-e", "64M")
    assert res.returncode == 0, res.stderr
    assert out.stat().st_size > 1000


def test_compare_infers_topology_from_file(corpus: Path) -> None:
    f = corpus / "nccl" / "perf" / "h100_oci_bm_gpu_h100_8_2node_roce.txt"
    res = gpufleet("nccl", "compare", str(f), "--gpu", "h100-sxm", "--nic-gbps", "200", "-o", "json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["verdict"] == "healthy" and data["topology"]["nodes"] == 2 and data["topology"]["transport"] == "roce"


def test_diagnose_and_lint(corpus: Path, tmp_path: Path) -> None:
    res = gpufleet(
        "nccl", "diagnose", str(corpus / "nccl" / "logs" / "04_socket_ifname_no_interface.log"), "-o", "json"
    )
    assert res.returncode == 0
    assert json.loads(res.stdout)["class"] == "socket_ifname"
    env = tmp_path / "e"
    env.write_text("NCCL_IB_DISABLE=1\n")
    res = gpufleet("nccl", "lint", "--env-file", str(env), "-o", "json")
    assert json.loads(res.stdout)[0]["rule"] == "ib-disabled"
    res = gpufleet("nccl", "advise", "--gpu", "h100-sxm", "--transport", "roce", "-o", "json")
    assert any(a["var"] == "NCCL_IB_GID_INDEX" for a in json.loads(res.stdout))


def test_diagnose_a_log_with_a_megabyte_line(corpus: Path, tmp_path: Path) -> None:
    """A line of a megabyte of near misses (every word of a connect failure but "failed") is cut at the pasted-text
    bound and read in one pass; the log's own diagnosis stands."""
    log = corpus / "nccl" / "logs" / "04_socket_ifname_no_interface.log"
    path = tmp_path / "long-line.log"
    path.write_bytes(b"h:1:1 [0] NCCL WARN " + b"x: connect to y " * 65_536 + b"\n" + log.read_bytes())
    res = gpufleet("nccl", "diagnose", str(path), "-o", "json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["class"] == "socket_ifname"


def test_twin_api() -> None:
    t = allreduce_time_s("h100-sxm", 4, 8, 8, 400.0, "ib", 1 << 30)
    assert 0.001 < t < 0.02
    assert allreduce_time_s("h100-sxm", 4, 8, 8, 400.0, "ib", 1 << 30) == t


# A synthetic run header in nccl-tests' format: 4 ranks on 2 hosts, H100s, NCCL version line.
RUN_HEADER = [
    "# nThread 1 nGpus 1 minBytes 1073741824 maxBytes 1073741824 step: 2(factor) warmup iters: 5",
    "#  Rank  0 Group  0 Pid  11 on     hosta device  0 [0x18] NVIDIA H100 80GB HBM3",
    "#  Rank  1 Group  0 Pid  12 on     hosta device  1 [0x2a] NVIDIA H100 80GB HBM3",
    "#  Rank  2 Group  0 Pid  21 on     hostb device  0 [0x18] NVIDIA H100 80GB HBM3",
    "#  Rank  3 Group  0 Pid  22 on     hostb device  1 [0x2a] NVIDIA H100 80GB HBM3",
    "hosta:11:11 [0] NCCL INFO NCCL version 2.21.5+cuda12.4",
]


def test_compare_infers_gpu_and_layout_from_device_lines(tmp_path: Path) -> None:
    header = [
        *RUN_HEADER,
        "#       size         count      type   redop    root     time   algbw   busbw #wrong",
        "  1073741824     268435456     float     sum      -1    40000   26.84   40.27      0"
        "    40000   26.84   40.27      0",
        "# Out of bounds values : 0 OK",
        "# Avg bus bandwidth    : 40.27 ",
    ]
    f = tmp_path / "run.txt"
    f.write_text("\n".join(f"[1,0]<stdout>:{line}" for line in header) + "\n")
    res = gpufleet("nccl", "compare", str(f), "--nics-per-node", "2", "--nic-gbps", "400", "-o", "json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    topo = data["topology"]
    assert (topo["gpu"], topo["nodes"], topo["gpus_per_node"], topo["nccl_version"]) == (
        "h100-sxm",
        2,
        2,
        "2.21.5",
    )
    # 40 GB/s where NVLSTree over 2 x 400 Gb/s NICs per node delivers about 80 (2 heads: NVLS keeps 1/2 of bwIntra
    # per channel, nvlsEfficiency x (nCh-1)/nCh in v2.30.7-1 tuning.cc)
    assert data["verdict"] == "underperforming"


def test_compare_reads_everything_from_a_whole_run() -> None:
    res = gpufleet("nccl", "compare", str(DATA / "nccl_tests_a100_allreduce_8gpu.txt"), "-o", "json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert (data["verdict"], data["complete"], data["op"]) == ("healthy", True, "allreduce")
    assert (data["topology"]["gpu"], data["topology"]["gpus_per_node"]) == ("a100-80gb", 8)
    assert data["assumed"] == ["NCCL 2.30 model (not in the output)"]
    assert not any(r["flagged"] for r in data["rows"]) and data["rows"][-1]["bytes"] == 8 << 30


def test_compare_output_cut_before_the_closing_line_is_unknown(tmp_path: Path) -> None:
    text = (DATA / "nccl_tests_a100_allreduce_8gpu.txt").read_text()
    cut = tmp_path / "cut.txt"
    cut.write_text(text[: text.index("# Out of bounds")])
    res = gpufleet("nccl", "compare", str(cut), "-o", "json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["verdict"] == "unknown" and data["complete"] is False and data["causes"] == []
    table = gpufleet("nccl", "compare", str(cut))
    assert "unknown" in table.stdout and "closing '# Avg bus bandwidth' line" in table.stdout


def test_compare_without_a_gpu_still_reports_corruption(tmp_path: Path) -> None:
    text = (DATA / "nccl_tests_a40_wrong.txt").read_text().replace("NVIDIA A40", "NVIDIA Quadro Z9000")
    run = tmp_path / "run.txt"
    run.write_text(text)
    res = gpufleet("nccl", "compare", str(run), "-o", "json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["verdict"] == "failed" and data["topology"] is None and "not in the catalog" in data["not_judged"]
    assert [c["code"] for c in data["causes"]] == ["data_corruption"]
    healthy = tmp_path / "healthy.txt"
    healthy.write_text((DATA / "nccl_tests_a100_allreduce_8gpu.txt").read_text().replace("A100", "Z9"))
    res = gpufleet("nccl", "compare", str(healthy), "-o", "json")  # held to its own peak, and says the model was not
    data = json.loads(res.stdout)
    assert data["verdict"] == "healthy" and data["judged_by_itself"] and data["topology"] is None
    assert "not in the catalog" in data["not_judged"]
    one = tmp_path / "one.txt"  # one size under 64 MiB: nothing to judge it by, so say what is missing
    one.write_text("\n".join(ln for ln in healthy.read_text().splitlines() if not ln.strip()[:1].isdigit()
                             or ln.split()[0] == "1048576"))  # fmt: skip
    res = gpufleet("nccl", "compare", str(one))
    assert res.returncode != 0 and "not in the catalog" in res.stderr and "--gpu" in res.stderr
    res = gpufleet("nccl", "compare", str(healthy), "--gpu", "a100-80gb", "-o", "json")
    assert json.loads(res.stdout)["verdict"] == "healthy"


def test_compare_several_runs_in_one_file(tmp_path: Path) -> None:
    both = tmp_path / "both.txt"
    both.write_text(
        (DATA / "nccl_tests_a100_allreduce_8gpu.txt").read_text()
        + (DATA / "nccl_tests_h100_allgather_slow.txt").read_text()
    )
    res = gpufleet("nccl", "compare", str(both), "-o", "json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert [(d["op"], d["verdict"]) for d in data] == [("allreduce", "healthy"), ("allgather", "underperforming")]


RUN_ACROSS_TWO_NODES = [
    *RUN_HEADER,
    # NCCL's net_ib.cc device lines (INFO since 2.20) and its `Using` line
    "hosta:11:11 [0] NCCL INFO NET/IB: [0] mlx5_0:uverbs0:1/IB provider=Mlx5 speed=400000 context=0x55d1c0a0e2f0 "
    "pciPath=/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0 ar=1",
    "hosta:11:11 [0] NCCL INFO NET/IB: [1] mlx5_1:uverbs1:1/IB provider=Mlx5 speed=200000 context=0x55d1c0a0f2f0 "
    "pciPath=/sys/devices/pci0000:2a/0000:2a:01.0/0000:2b:00.0 ar=1",
    "hosta:11:11 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.0.0.1<0>",
    "#       size         count      type   redop    root     time   algbw   busbw #wrong",
    "  1073741824     268435456     float     sum      -1    20000   53.69   80.53      0"
    "    20000   53.69   80.53      0",
    "# Out of bounds values : 0 OK",
    "# Avg bus bandwidth    : 80.53 ",
]


def test_compare_reads_nic_count_and_speed_from_the_runs_nccl_lines(tmp_path: Path) -> None:
    f = tmp_path / "run.txt"
    f.write_text("\n".join(RUN_ACROSS_TWO_NODES) + "\n")
    res = gpufleet("nccl", "compare", str(f), "-o", "json")
    assert res.returncode == 0, res.stderr
    topo = json.loads(res.stdout)["topology"]
    assert (topo["nodes"], topo["nics_per_node"], topo["nic_gbps"]) == (2, 2, 200.0)  # the slowest port
    table = gpufleet("nccl", "compare", str(f))
    assert "2 x 200 Gb/s NICs a node" in " ".join(table.stdout.split())
    flags = gpufleet("nccl", "compare", str(f), "--nic-gbps", "100", "--nics-per-node", "1", "-o", "json")
    topo = json.loads(flags.stdout)["topology"]
    assert (topo["nics_per_node"], topo["nic_gbps"]) == (1, 100.0)  # the flags win


def test_compare_says_which_nic_facts_neither_the_run_nor_the_flags_give(tmp_path: Path) -> None:
    f = tmp_path / "run.txt"
    f.write_text("\n".join(line for line in RUN_ACROSS_TWO_NODES if "NET/IB: [" not in line) + "\n")
    res = gpufleet("nccl", "compare", str(f))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "neither its lines nor the flags give its NIC speed" in res.stderr
    assert "--nic-gbps" in res.stderr and "--nics-per-node" not in res.stderr  # the run names its HCAs
    assert gpufleet("nccl", "compare", str(f), "--nic-gbps", "400").returncode == 0
    bare = tmp_path / "bare.txt"
    bare.write_text("\n".join(line for line in RUN_ACROSS_TWO_NODES if "NET/IB" not in line) + "\n")
    res = gpufleet("nccl", "compare", str(bare))
    assert "NIC count per node or its NIC speed" in res.stderr and "NCCL_DEBUG=INFO" in res.stderr
