from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufleet.errors import ParseError
from gpufleet.nccl.graph_log import parse_graph_log
from gpufleet.nccl.predict import predict_one
from gpufleet.nccl.topology import Topology, derive_graphs
from tests.clirun import gpufleet

# Lines in ncclTopoPrintGraph's format (values chosen for the test, not captured from a run).
LOG = """\
NCCL INFO Pattern 4, crossNic 0, nChannels 8, bw 40.000000/40.000000, type NVL/PIX, sameChannels 1
node-a:100:100 [0] NCCL INFO  0 : NET/0-0 GPU/0 GPU/1 NET/0-0
NCCL INFO Pattern 3, crossNic 0, nChannels 8, bw 40.000000/40.000000, type NVL/PIX, sameChannels 1
NCCL INFO Pattern 3, crossNic 0, nChannels 4, bw 20.000000/20.000000, type NVL/PIX, sameChannels 1
"""


def test_parse_and_override() -> None:
    graphs = parse_graph_log(LOG)
    assert [g[0] for g in graphs] == ["Ring", "Tree"]
    topo = Topology(gpu="h100-sxm", nodes=4, nics_per_node=8, nic_gbps=400, graph_override=graphs)
    derived = derive_graphs(topo, 32)
    assert (derived["Ring"].n_channels, derived["Ring"].bw_inter) == (8, 40.0)
    assert derived["Tree"].pattern_tree
    ring = predict_one(topo.model_copy(update={"algo_env": "ring"}), "allreduce", 8 << 30)
    assert ring.busbw_gbps == pytest.approx(8 * 40.0, rel=0.05)


def test_no_graph_lines() -> None:
    with pytest.raises(ParseError):
        parse_graph_log("NCCL INFO nothing here")


def test_cli_graph_log(tmp_path: Path) -> None:
    f = tmp_path / "graph.log"
    f.write_text(LOG)
    res = gpufleet(
        "nccl",
        "predict",
        "--gpu",
        "h100-sxm",
        "--nodes",
        "4",
        "--nics-per-node",
        "8",
        "--nic-gbps",
        "400",
        "--graph-log",
        str(f),
        "--algo",
        "ring",
        "-b",
        "8G",
        "-e",
        "8G",
        "-o",
        "json",
    )
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)[0]["busbw_gbps"] == pytest.approx(8 * 40.0, rel=0.05)
