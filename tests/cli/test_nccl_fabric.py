"""`nccl predict` and `nccl compare` take rails and link speed from a discovered fabric (`--fabric`): ibsim's fat
tree as infiniband-diags printed it (4x HDR = 200 Gb/s links; node05..node08 have a dual-port HCA, a rail per
port), whole and with a degraded or a missing rail."""

from __future__ import annotations

import json
from pathlib import Path

from tests.clirun import Ran, gpufleet
from tests.conftest import CAPTURES

CAPTURE = CAPTURES / "ibsim" / "ibnetdiscover.txt"


def _predict(*args: str) -> Ran:
    return gpufleet("nccl", "predict", "--gpu", "h100-sxm", "-e", "1G", "-o", "json", *args)


def _rows(res: Ran) -> list[dict[str, object]]:
    assert res.returncode == 0, res.stderr
    rows: list[dict[str, object]] = json.loads(res.stdout)
    return rows


def _edited(tmp_path: Path, edit: str) -> Path:
    """The capture with node06's second rail trained at 2x (`slow`), or node07's second rail gone (`gone`)."""
    lines = []
    for line in CAPTURE.read_text().splitlines():
        if edit == "slow" and "10000d" in line:  # node06 port 2's GUID: its cable, listed from both ends
            line = line.replace("4xHDR", "2xHDR")
        if edit == "gone" and "100010" in line:  # node07 port 2
            continue
        lines.append(line)
    out = tmp_path / f"{edit}.txt"
    out.write_text("\n".join(lines) + "\n")
    return out


def test_predict_takes_rails_and_speed_from_the_fabric() -> None:
    res = _predict("--fabric", str(CAPTURE), "--hosts", "node05,node06")
    assert _rows(res) == _rows(_predict("--nodes", "2", "--nics-per-node", "2", "--nic-gbps", "200"))
    assert "2 host(s), 2 rail(s) per node at 200 Gb/s, one leaf per rail (leaf3)" in res.stderr


def test_predict_over_the_whole_fabric_runs_at_the_host_with_fewest_rails() -> None:
    res = _predict("--fabric", str(CAPTURE))
    assert _rows(res) == _rows(_predict("--nodes", "8", "--nics-per-node", "1", "--nic-gbps", "200"))
    assert "node01, node02, node03, node04 have 1; node05, node06, node07, node08 have 2" in res.stderr
    assert "so the model uses 1 per node" in res.stderr
    assert "up to 3 switches apart (leaf1 -> spine2 -> leaf2)" in res.stderr
    assert "the job's hosts are not named (--hosts)" in res.stderr
    table = gpufleet("nccl", "predict", "--gpu", "h100-sxm", "-e", "1M", "--fabric", str(CAPTURE))
    assert table.returncode == 0 and "fabric (" in table.stdout and "8 host(s)" in table.stdout


def test_a_degraded_rail_slows_the_ring_to_its_slowest_link(tmp_path: Path) -> None:
    res = _predict("--fabric", str(_edited(tmp_path, "slow")), "--hosts", "node05,node06")
    assert _rows(res) == _rows(_predict("--nodes", "2", "--nics-per-node", "2", "--nic-gbps", "100"))
    assert "rail speeds differ: node06/mlx5_0/2 <-> leaf4/2 at 100 Gb/s (2xHDR)" in res.stderr
    assert "the model uses 100 Gb/s" in res.stderr


def test_a_rail_down_leaves_its_host_a_rail_short(tmp_path: Path) -> None:
    res = _predict("--fabric", str(_edited(tmp_path, "gone")), "--hosts", "node06,node07")
    assert _rows(res) == _rows(_predict("--nodes", "2", "--nics-per-node", "1", "--nic-gbps", "200"))
    assert "node07/mlx5_0/2 has no link (down, or not cabled)" in res.stderr


def test_a_flag_wins_over_the_fabric_and_says_so() -> None:
    res = _predict("--fabric", str(CAPTURE), "--hosts", "node05,node06", "--nic-gbps", "400")
    assert _rows(res) == _rows(_predict("--nodes", "2", "--nics-per-node", "2", "--nic-gbps", "400"))
    assert "--nic-gbps 400 wins over the fabric's 200 Gb/s" in res.stderr


def test_fabric_mistakes_are_one_clear_line() -> None:
    unknown = _predict("--fabric", str(CAPTURE), "--hosts", "node05,dgx-999")
    assert unknown.returncode != 0 and "dgx-999 not in" in unknown.stderr and "it has node01" in unknown.stderr
    alone = _predict("--hosts", "node05")
    assert alone.returncode != 0 and "add --fabric FILE" in alone.stderr
    count = _predict("--fabric", str(CAPTURE), "--hosts", "node05,node06", "--nodes", "3")
    assert count.returncode != 0 and "drop --nodes" in count.stderr
    not_ib = _predict("--fabric", __file__)
    assert not_ib.returncode != 0 and "not an ibnetdiscover line" in not_ib.stderr
    assert all("Traceback" not in r.stderr for r in (unknown, alone, count, not_ib))


def _run_on(tmp_path: Path, hosts: tuple[str, str], busbw: float) -> Path:
    """A 4-rank H100 all_reduce run, two ranks on each of `hosts`, in nccl-tests' format."""
    a, b = hosts
    header = [
        "# nThread 1 nGpus 1 minBytes 1073741824 maxBytes 1073741824 step: 2(factor) warmup iters: 5",
        f"#  Rank  0 Group  0 Pid  11 on {a} device  0 [0x18] NVIDIA H100 80GB HBM3",
        f"#  Rank  1 Group  0 Pid  12 on {a} device  1 [0x2a] NVIDIA H100 80GB HBM3",
        f"#  Rank  2 Group  0 Pid  21 on {b} device  0 [0x18] NVIDIA H100 80GB HBM3",
        f"#  Rank  3 Group  0 Pid  22 on {b} device  1 [0x2a] NVIDIA H100 80GB HBM3",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong",
        f"  1073741824     268435456     float     sum      -1    20000   53.69   {busbw}      0"
        f"    20000   53.69   {busbw}      0",
        "# Out of bounds values : 0 OK",
        f"# Avg bus bandwidth    : {busbw} ",
    ]
    run = tmp_path / f"{a}-{b}.txt"
    run.write_text("\n".join(header) + "\n")
    return run


def test_compare_takes_the_run_hosts_rails_from_the_fabric(tmp_path: Path) -> None:
    run = _run_on(tmp_path, ("node05", "node06"), 40.0)
    res = gpufleet("nccl", "compare", str(run), "--fabric", str(CAPTURE), "-o", "json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    topo = data["topology"]
    assert (topo["nodes"], topo["nics_per_node"], topo["nic_gbps"], topo["transport"]) == (2, 2, 200.0, "ib")
    assert data["fabric"]["hosts"] == ["node05", "node06"] and data["fabric"]["notes"] == []
    # one host a rail short: the model expects what one rail per node gives
    short = gpufleet("nccl", "compare", str(_run_on(tmp_path, ("node01", "node05"), 40.0)), "--fabric", str(CAPTURE),
                     "-o", "json")  # fmt: skip
    body = json.loads(short.stdout)
    assert body["topology"]["nics_per_node"] == 1 and "rails up per host differ" in body["fabric"]["notes"][0]
    flagged = gpufleet("nccl", "compare", str(run), "--fabric", str(CAPTURE), "--nic-gbps", "400", "-o", "json")
    body = json.loads(flagged.stdout)
    assert body["topology"]["nic_gbps"] == 400.0
    assert body["fabric"]["notes"] == ["--nic-gbps 400 wins over the fabric's 200 Gb/s"]
    table = gpufleet("nccl", "compare", str(run), "--fabric", str(CAPTURE))
    assert table.returncode == 0 and "2 rail(s) per node at 200 Gb/s" in table.stdout


def test_compare_with_a_host_the_fabric_does_not_know(tmp_path: Path) -> None:
    run = _run_on(tmp_path, ("node05", "gpu-77"), 40.0)
    res = gpufleet("nccl", "compare", str(run), "--fabric", str(CAPTURE))
    assert res.returncode != 0 and "gpu-77 not in" in res.stderr and "Traceback" not in res.stderr
