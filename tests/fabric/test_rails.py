"""A job's rails from the captured fabric: per host, the slowest and the fewest, the switches between hosts, and
the control plane's view read back into a graph."""

from __future__ import annotations

import pytest

from gpufleet.errors import UserError
from gpufleet.fabric.discover import from_ibnetdiscover
from gpufleet.fabric.graph import End, FabricGraph
from gpufleet.fabric.rails import FabricIndex, graph_from_rows, job_fabric
from gpufleet.parsers.infiniband.diags import parse_ibnetdiscover
from tests.conftest import CAPTURES

CAPTURE = CAPTURES / "ibsim" / "ibnetdiscover.txt"


def _graph() -> FabricGraph:
    return from_ibnetdiscover(parse_ibnetdiscover(CAPTURE.read_text()))


def test_leaves_uplinks_and_the_switches_between_hosts() -> None:
    index = FabricIndex(_graph())
    assert index.leaves == {"leaf1", "leaf2", "leaf3", "leaf4"}
    assert sorted(str(link) for link in index.uplinks("leaf3")) == ["leaf3/35 <-> spine1/3", "spine2/3 <-> leaf3/36"]
    job = job_fabric(_graph(), ["node01", "node03"])
    assert (job.nics_per_node, job.nic_gbps, job.hops, job.path) == (1, 200.0, 3, ["leaf1", "spine2", "leaf2"])
    assert job.notes == [] and job.flags() == {"nics_per_node": 1, "transport": "ib", "nic_gbps": 200.0}


def test_a_host_with_every_rail_down_cannot_run_the_job() -> None:
    graph = _graph()
    graph.link_at(End("node01/mlx5_0", 1)).up = False  # type: ignore[union-attr]
    with pytest.raises(UserError, match="node01 has no HCA port with a link up") as err:
        job_fabric(graph, ["node01", "node02"])
    assert "leave it out" in (err.value.fix or "")
    half = _graph()
    half.link_at(End("node05/mlx5_0", 2)).up = False  # type: ignore[union-attr]
    job = job_fabric(half, ["node05", "node06"])
    assert job.nics_per_node == 1
    assert job.notes[0] == "rail node05/mlx5_0/2 <-> leaf4 is down: NCCL leaves it out on node05"


def test_the_control_planes_rows_read_back_into_the_same_rails() -> None:
    graph = _graph()
    systems = [{"name": n.name, "type": n.kind.value, "ports": n.ports, "tier": n.tier, "host": n.host}
               for n in graph.nodes.values()]  # fmt: skip
    links = [{"a": str(link.a), "b": str(link.b), "width": f"{link.width}x", "speed": link.speed, "up": link.up}
             for link in graph.links]  # fmt: skip
    links.append({"a": "leaf1/35", "b": "spine1/1", "width": "4x", "speed": "HDR", "up": False})  # expected, down
    back = graph_from_rows(systems, links)
    assert job_fabric(back).to_dict()["rails"] == job_fabric(graph).to_dict()["rails"]
    assert back.link_at(End("leaf1", 35)) is not None and not back.link_at(End("leaf1", 35)).up  # type: ignore[union-attr]
