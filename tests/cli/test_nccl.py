from __future__ import annotations

import json
from pathlib import Path

from gpufleet.nccl import allreduce_time_s
from tests.clirun import gpufleet


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


def test_twin_api() -> None:
    t = allreduce_time_s("h100-sxm", 4, 8, 8, 400.0, "ib", 1 << 30)
    assert 0.001 < t < 0.02
    assert allreduce_time_s("h100-sxm", 4, 8, 8, 400.0, "ib", 1 << 30) == t


def test_compare_infers_gpu_and_layout_from_device_lines(tmp_path: Path) -> None:
    # A synthetic run header in nccl-tests' format: 4 ranks on 2 hosts, H100s, NCCL version line.
    header = [
        "# nThread 1 nGpus 1 minBytes 1073741824 maxBytes 1073741824 step: 2(factor) warmup iters: 5",
        "#  Rank  0 Group  0 Pid  11 on     hosta device  0 [0x18] NVIDIA H100 80GB HBM3",
        "#  Rank  1 Group  0 Pid  12 on     hosta device  1 [0x2a] NVIDIA H100 80GB HBM3",
        "#  Rank  2 Group  0 Pid  21 on     hostb device  0 [0x18] NVIDIA H100 80GB HBM3",
        "#  Rank  3 Group  0 Pid  22 on     hostb device  1 [0x2a] NVIDIA H100 80GB HBM3",
        "hosta:11:11 [0] NCCL INFO NCCL version 2.21.5+cuda12.4",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong",
        "  1073741824     268435456     float     sum      -1    20000   53.69   80.53      0"
        "    20000   53.69   80.53      0",
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
    assert data["verdict"] == "underperforming"  # 80 GB/s where 2 x 400 Gb/s NICs per node allow far more
