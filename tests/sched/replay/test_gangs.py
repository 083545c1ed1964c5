"""Gangs in the trace replay: a pod list's gang column, all-or-nothing placement under the fewest switches of a
cluster manifest's fabric (one leaf group, then one set of spines, then the cores), where each gang landed, and the
engine deciding as the reference does (tests/sched/data/gangs: a 16-node three-tier fat tree and a small trace)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gpufleet.errors import ParseError
from gpufleet.fabric.topology import Topology, topology_from_fabric
from gpufleet.sched.replay.gangs import ReplayFabric, tier_of
from gpufleet.sched.replay.openb import NodeList, PodList, load_pods
from gpufleet.sched.replay.openb_cluster import node_list_of
from gpufleet.sched.replay.runner import gang_units, replay
from gpufleet.sched.replay.state import PodRequest, ReplayCluster, ReplayPlacement
from gpufleet.spec.builder import build_cluster
from gpufleet.spec.loader import load_cluster
from tests.clirun import gpufleet

DATA = Path(__file__).resolve().parents[1] / "data" / "gangs"
CLUSTER = DATA / "three-tier-16.yaml"
PODS = DATA / "pods.csv"


def cluster() -> tuple[NodeList, Topology]:
    manifest = load_cluster(CLUSTER)
    built = build_cluster(manifest.metadata.name, manifest.spec)
    assert built.fabric is not None
    return node_list_of(built), topology_from_fabric(built.fabric)


def gang_pods(sizes: dict[str, int], gpus: int = 8) -> PodList:
    names = [f"{g}-{i}" for g, n in sizes.items() for i in range(n)]
    n = len(names)
    return PodList(
        names=tuple(names),
        cpu_milli=np.full(n, 64000),
        memory_mib=np.full(n, 262144),
        num_gpu=np.full(n, gpus),
        gpu_milli=np.full(n, 1000),
        gpu_spec=("",) * n,
        qos=("",) * n,
        gang=tuple(g for g, k in sizes.items() for _ in range(k)),
    )


def test_the_gang_column_and_its_units() -> None:
    pods = load_pods(PODS)
    assert pods.has_gangs and pods.gang[:4] == ("g1",) * 4 and pods.gang[-1] == ""
    rows, members, gangs = gang_units(pods)
    assert gangs[:5] == ["g1", "g2", "g3", "g4", "g5"] and [len(m) for m in members[:5]] == [4, 6, 4, 3, 2]
    assert rows.names[1] == "g2" and int(rows.num_gpu[1]) == 48 and int(rows.cpu_milli[1]) == 6 * 64000
    assert rows.names[-1] == "p-3" and int(rows.gpu_milli[-2]) == 1000 and int(rows.gpu_milli[-3]) == 500


def test_a_gang_pod_that_shares_a_gpu_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "pods.csv"
    bad.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gang\na,1000,10,1,500,g\n")
    with pytest.raises(ParseError, match="gang 'g' shares a GPU"):
        load_pods(bad)


def test_the_fabric_groups_of_the_replay_cluster() -> None:
    nodes, topology = cluster()
    fabric = ReplayFabric.from_topology(topology, nodes.names)
    assert fabric.leaf_groups == 4 and fabric.spine_groups == 2
    assert fabric.leaf_group.tolist() == [0] * 4 + [1] * 4 + [2] * 4 + [3] * 4
    assert fabric.spine_group.tolist() == [0] * 8 + [1] * 8


def test_gangs_land_under_the_fewest_switches_all_or_nothing() -> None:
    nodes, topology = cluster()
    result = replay(nodes, load_pods(PODS), "first-fit", tune=0, shuffle=False, topology=topology)
    assert result.gangs is not None
    by_name = {g.name: g for g in result.gangs.gangs}
    assert {name: tier_of(g) for name, g in by_name.items()} == {
        "g1": "one leaf",
        "g2": "one spine",
        "g3": "one leaf",
        "g4": "failed",
        "g5": "one leaf",
    }
    g1, g2, g3, g5 = (by_name[n].landing for n in ("g1", "g2", "g3", "g5"))
    assert g1 is not None and g1.nodes == ("n-000", "n-001", "n-002", "n-003") and g1.switch_hops == 1
    # six nodes fit no leaf group: the set of spines with room for them, su3+su4 (su1 is g1's)
    assert g2 is not None and len(g2.nodes) == 6 and g2.spines == ("spine-5", "spine-6", "spine-7", "spine-8")
    assert g3 is not None and g3.nodes == ("n-004", "n-005", "n-006", "n-007")
    # g4 (three nodes) found two free and took neither: g5 got both
    assert g5 is not None and g5.nodes == ("n-014", "n-015")
    pods = result.placements
    assert by_name["g4"].first == 14 and pods[14:17] == [None, None, None]  # g4's three pods, in arrival order
    # the cluster is full: the lone GPU pods fail, the CPU-only one runs
    assert [p is not None for p in pods[19:]] == [False, False, False, True]
    assert result.failed == 6 and result.failed_by_shape == {"1-gpu": 1, "2-gpu": 1, "8-gpu": 3, "sharing": 1}
    summary = result.summary()
    assert summary["gang_summary"] == (
        "gangs: 4 placed, 3 under one leaf, 1 across leaves under one spine, 0 through the cores, 1 failed"
    )
    assert summary["gangs"][1] == {"gang": "g2", "pods": 6, "gpus": 48, "placed": True, **g2.to_dict()}  # type: ignore[index]


def test_a_gang_bigger_than_a_set_of_spines_goes_through_the_cores() -> None:
    nodes, topology = cluster()
    result = replay(nodes, gang_pods({"big": 12, "rest": 5}), "best-fit", tune=0, shuffle=False, topology=topology)
    assert result.gangs is not None
    big, rest = result.gangs.gangs
    assert tier_of(big) == "cores" and big.landing is not None and big.landing.switch_hops == 5
    assert tier_of(rest) == "failed" and result.failed == 5  # four nodes left for five
    assert result.gangs.counts()["cores"] == 1


def test_without_a_fabric_gangs_are_still_all_or_nothing() -> None:
    nodes, _ = cluster()
    result = replay(nodes, gang_pods({"a": 10, "b": 7}), "first-fit", tune=0, shuffle=False)
    assert result.gangs is not None
    a, b = result.gangs.gangs
    assert a.landing is not None and a.landing.switch_hops is None and tier_of(a) == "unknown"
    assert not b.placed and all(p is None for p in result.placements[10:])


def test_unplace_restores_the_node_and_moves_its_version_on() -> None:
    nodes, _ = cluster()
    c = ReplayCluster.from_nodes(nodes)
    before = (c.cpu_free.copy(), c.mem_free.copy(), c.gpu_free.copy(), c.affinity.copy())
    pod = PodRequest(4000, 100, 2, 1000, name="x")
    c.place(pod, ReplayPlacement(3, (0, 1)))
    assert c.used_at(3) and c.version[3] == 1
    c.unplace(pod, ReplayPlacement(3, (0, 1)))
    after = (c.cpu_free, c.mem_free, c.gpu_free, c.affinity)
    assert all(np.array_equal(x, y) for x, y in zip(before, after, strict=True))
    assert not c.used_at(3) and not c.used()[3] and c.version[3] == 2


@pytest.mark.parametrize("policy", ["first-fit", "best-fit", "gpu-packing", "fgd", "fgd-plus", "random"])
def test_the_engine_places_gangs_as_the_reference(policy: str) -> None:
    nodes, topology = cluster()
    sizes = {"a": 3, "b": 5, "c": 2, "d": 4, "e": 6, "f": 1}
    mixed = gang_pods(sizes, gpus=4)
    lone = load_pods(PODS)
    both = PodList(
        names=mixed.names + lone.names,
        cpu_milli=np.concatenate([mixed.cpu_milli, lone.cpu_milli]),
        memory_mib=np.concatenate([mixed.memory_mib, lone.memory_mib]),
        num_gpu=np.concatenate([mixed.num_gpu, lone.num_gpu]),
        gpu_milli=np.concatenate([mixed.gpu_milli, lone.gpu_milli]),
        gpu_spec=mixed.gpu_spec + lone.gpu_spec,
        qos=mixed.qos + lone.qos,
        gang=mixed.gang + lone.gang,
    )
    for seed in (1, 2):
        fast = replay(nodes, both, policy, seed=seed, tune=1.3, topology=topology)
        ref = replay(nodes, both, policy, seed=seed, tune=1.3, topology=topology, reference=True)
        assert [(p.node, p.gpus) if p else None for p in fast.placements] == [
            (p.node, p.gpus) if p else None for p in ref.placements
        ]
        assert fast.summary()["gangs"] == ref.summary()["gangs"]
        assert np.allclose(fast.frag_curve, ref.frag_curve)
        assert fast.gangs is not None and fast.gangs.counts()["placed"] > 0
        # all or nothing: a gang's pods are all placed or all not
        for gang in fast.gangs.gangs:
            mine = fast.placements[gang.first : gang.first + gang.pods]
            assert all(p is not None for p in mine) if gang.placed else all(p is None for p in mine)
            if gang.landing is not None:
                assert gang.landing.nodes == tuple(sorted({nodes.names[p.node] for p in mine if p}))


def test_cli_replays_gangs_on_a_cluster_manifest(tmp_path: Path) -> None:
    run = gpufleet("sched", "replay", "--cluster", str(CLUSTER), "--pods", str(PODS), "--tune", "0", "-o", "json")
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)
    counts = data["gang_counts"]
    assert counts["placed"] + counts["failed"] == 5
    assert data["gang_summary"].startswith(f"gangs: {counts['placed']} placed")
    assert {g["gang"] for g in data["gangs"]} == {"g1", "g2", "g3", "g4", "g5"}
    table = gpufleet("sched", "replay", "--cluster", str(CLUSTER), "--pods", str(PODS), "--tune", "0", "-o", "wide")
    assert table.returncode == 0 and "gangs:" in table.stdout and "LEAVES" in table.stdout
    missing = gpufleet("sched", "replay", "--pods", str(PODS))
    assert missing.returncode != 0 and "--cluster" in missing.stderr and "Traceback" not in missing.stderr
