from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.nccl import allreduce_time_s

runner = CliRunner()


def test_predict_json() -> None:
    res = runner.invoke(
        app,
        [
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
        ],
    )
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)
    assert rows[0]["bytes"] == 8 and rows[-1]["bytes"] == 1 << 30
    assert {"bytes", "algo", "proto", "time_us", "algbw_gbps", "busbw_gbps"} <= set(rows[0])


def test_predict_plot(tmp_path: Path) -> None:
    out = tmp_path / "p.png"
    res = runner.invoke(app, ["nccl", "predict", "--gpu", "a100", "--plot", str(out), "-e", "64M"])
    assert res.exit_code == 0, res.output
    assert out.stat().st_size > 1000


def test_compare_infers_topology_from_file(corpus: Path) -> None:
    f = corpus / "nccl" / "perf" / "h100_oci_bm_gpu_h100_8_2node_roce.txt"
    res = runner.invoke(
        app, ["nccl", "compare", str(f), "--gpu", "h100-sxm", "--nic-gbps", "200", "-o", "json"]
    )
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert (
        data["verdict"] == "healthy"
        and data["topology"]["nodes"] == 2
        and data["topology"]["transport"] == "roce"
    )


def test_diagnose_and_lint(corpus: Path, tmp_path: Path) -> None:
    res = runner.invoke(
        app,
        [
            "nccl",
            "diagnose",
            str(corpus / "nccl" / "logs" / "04_socket_ifname_no_interface.log"),
            "-o",
            "json",
        ],
    )
    assert res.exit_code == 0
    assert json.loads(res.output)["class"] == "socket_ifname"
    env = tmp_path / "e"
    env.write_text("NCCL_IB_DISABLE=1\n")
    res = runner.invoke(app, ["nccl", "lint", "--env-file", str(env), "-o", "json"])
    assert json.loads(res.output)[0]["rule"] == "ib-disabled"
    res = runner.invoke(app, ["nccl", "advise", "--gpu", "h100-sxm", "--transport", "roce", "-o", "json"])
    assert any(a["var"] == "NCCL_IB_GID_INDEX" for a in json.loads(res.output))


def test_twin_api() -> None:
    t = allreduce_time_s("h100-sxm", 4, 8, 8, 400.0, "ib", 1 << 30)
    assert 0.001 < t < 0.02
    assert allreduce_time_s("h100-sxm", 4, 8, 8, 400.0, "ib", 1 << 30) == t
