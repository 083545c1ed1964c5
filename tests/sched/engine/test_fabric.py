"""Where nodes sit in the fabric's topology model and where a set of them (a gang) landed: the 16-node three-tier fat
tree of tests/sched/data/gangs (four scalable units of four nodes, two rails; su1+su2 and su3+su4 under their own
spines, the cores above)."""

from __future__ import annotations

from pathlib import Path

from gpufleet.fabric.topology import topology_from_fabric
from gpufleet.sched.engine.fabric import fabric_places, landing
from gpufleet.spec.builder import build_cluster
from gpufleet.spec.loader import load_cluster

CLUSTER = Path(__file__).resolve().parents[1] / "data" / "gangs" / "three-tier-16.yaml"


def test_places_and_landings_in_a_three_tier_fabric() -> None:
    manifest = load_cluster(CLUSTER)
    fabric = build_cluster(manifest.metadata.name, manifest.spec).fabric
    assert fabric is not None
    topology = topology_from_fabric(fabric)
    # scheduler nodes named by their FQDN still find their fabric host by short name; unknown nodes are left out
    names = [f"n-{i:03d}.cluster.local" for i in range(16)] + ["cpu-1"]
    places = fabric_places(topology, names)
    assert len(places) == 16 and "cpu-1" not in places
    first = places["n-000.cluster.local"]
    assert first.leaves == frozenset({"leaf-su1-r0", "leaf-su1-r1"}) and first.rails == 2
    assert first.spines == frozenset({"spine-1", "spine-2", "spine-3", "spine-4"}) and first.cores
    leaves = {n: p.leaves for n, p in places.items()}

    def hops(*nodes: int) -> int | None:
        return landing(places, leaves, {}, [f"n-{i:03d}.cluster.local" for i in nodes]).switch_hops

    assert hops(0) == 0 and hops(0, 3) == 1 and hops(0, 4) == 3 and hops(0, 8) == 5
    across = landing(places, leaves, {}, ["n-000.cluster.local", "n-005.cluster.local"])
    assert across.leaves == ("leaf-su1-r0", "leaf-su1-r1", "leaf-su2-r0", "leaf-su2-r1")
    assert across.spines == ("spine-1", "spine-2", "spine-3", "spine-4")
    # a node outside the fabric: where the gang sits between its leaves is not known
    assert landing(places, leaves, {}, ["n-000.cluster.local", "cpu-1"]).switch_hops is None
