from __future__ import annotations

import pytest

from gpufleet.errors import ParseError
from gpufleet.nccl.constants import PROTOS
from gpufleet.nccl.predict import predict_one
from gpufleet.nccl.topology import Topology
from gpufleet.nccl.tuning import cost_table
from gpufleet.nccl.tuning_log import parse_tuning_log

FUNCS = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")


def _table_text(cells: dict[tuple[str, str, str], tuple[float, float]], algos: tuple[str, ...]) -> str:
    """Format cells with tuning.cc's printf layout (synthetic values, real format)."""
    prefix = "node-a:10:10 [0] NCCL INFO "
    lines = [prefix + "  Algorithm   |" + "".join(f" {'':>14}   {a:>14}   {'':>14} |" for a in algos)]
    lines.append(prefix + "  Protocol    |" + "".join(f" {p:>14} |" for _ in algos for p in PROTOS))
    lines.append(prefix + " Max NThreads |" + "".join(f" {512:>14} |" for _ in algos for _p in PROTOS))
    for f in FUNCS:
        row = "".join(
            "{:8.1f}/{:6.1f} |".format(*cells.get((f.lower(), a, p), (0.0, 0.0))) for a in algos for p in PROTOS
        )
        lines.append(prefix + f"{f:>13} |" + row)
    return "\n".join(lines) + "\n"


def test_parse_and_use_printed_table() -> None:
    cells = {
        ("allreduce", "Ring", "LL"): (16.6, 2.4),
        ("allreduce", "Ring", "Simple"): (36.4, 4.8),
        ("allreduce", "Tree", "Simple"): (30.0, 1.9),
        ("broadcast", "Ring", "LL"): (9.3, 2.4),
    }
    text = _table_text(cells, ("Tree", "Ring", "CollNetDirect"))
    parsed = {(c, a, p): (lat, bw) for c, a, p, lat, bw in parse_tuning_log(text)}
    assert parsed[("allreduce", "Ring", "LL")] == (16.6, 2.4)
    assert parsed[("broadcast", "Ring", "LL")] == (9.3, 2.4)
    assert parsed[("allreduce", "CollNetDirect", "Simple")] == (0.0, 0.0)
    topo = Topology(
        gpu="a10",
        nodes=2,
        gpus_per_node=1,
        nics_per_node=1,
        nic_gbps=100,
        transport="socket",
        tuning_override=parse_tuning_log(text),
    )
    ar = cost_table(topo, "allreduce")
    assert ar.latency[("Ring", "Simple")] == 36.4 and ar.bandwidth[("Ring", "Simple")] == 4.8
    assert ar.bandwidth[("Ring", "LL128")] == 0.0  # printed as disabled
    big = predict_one(topo, "allreduce", 1 << 30)
    assert big.algo == "Ring" and big.proto == "Simple"
    assert big.nccl_time_us == pytest.approx(36.4 * 1.4 + (1 << 30) / (1000 * 4.8))  # with the ring plateau


def test_no_table() -> None:
    with pytest.raises(ParseError):
        parse_tuning_log("NCCL INFO Channel 00/02")
