"""The control plane keeps Volcano's HyperNodes to the settled topology: the three-tier, eight-rail fat tree of
tests/control/test_fabric_topology.py polled through the one door, a Kubernetes backend whose nodes are the
recording CoreV1Api and whose HyperNodes live in a real HTTP server answering the official client's CustomObjectsApi
(tests/integrations/kubernetes/k8s_api.CustomObjectsServer).

The HyperNodes are written once the labels settled and were applied, and are then `fabric export --format volcano`'s;
a failed leaf changes them once, after its hosts' moves held; a flapping cable writes none; HyperNodes gpufleet did not
create are left alone; a dry run writes nothing and says what it would do; a refused write is audited once and
tried again later."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpufleet.control.fabric import FabricService
from gpufleet.control.fabric_topology import LabelSettler, TopologyTracker
from gpufleet.control.relabel import RETRY_S
from gpufleet.control.scheduler_topology import RESYNC_S, TopologyOutputs, settled_topology
from gpufleet.control.service import ControlPlane
from gpufleet.errors import UserError
from gpufleet.fabric.graph import FabricGraph
from gpufleet.fabric.topology import topology_from_graph
from gpufleet.health.thresholds import load_thresholds
from gpufleet.integrations.kubernetes.topology import node_labels
from gpufleet.integrations.kubernetes.topology_objects import MANAGED_BY, volcano_hypernodes
from gpufleet.integrations.slurm.remediation import SlurmBackend
from gpufleet.integrations.slurm.topology_conf import render_topology_conf
from gpufleet.state import Database
from tests.control.test_fabric_topology import FAILED_LEAF, SETTLE, Cluster, _fabric, _without

kube = pytest.importorskip("kubernetes.client")
from gpufleet.integrations.kubernetes.remediation import KubernetesBackend  # noqa: E402
from tests.integrations.kubernetes.k8s_api import CustomObjectsServer  # noqa: E402

VOLCANO = TopologyOutputs(hypernodes=True)


class VolcanoCluster(Cluster):
    """Cluster's control plane, with its backend's HyperNodes in `hypernodes` and --volcano-hypernodes on."""

    def __init__(self, fabric: FabricGraph, hypernodes: CustomObjectsServer, remediation: str = "on") -> None:
        super().__init__(fabric, remediation)
        self.hypernodes = hypernodes
        self.custom, self.stop = hypernodes.serve()
        backend = KubernetesBackend(self.api, custom=self.custom, clock=lambda: self.now)
        service = FabricService(load_thresholds(), fabric, TopologyTracker(settler=LabelSettler(SETTLE)))
        self.plane = ControlPlane(Database(":memory:"), backend, clock=lambda: self.now, remediation=remediation,
                                  fabric=service, topology_outputs=VOLCANO)  # fmt: skip

    def objects(self) -> dict[str, dict[str, Any]]:
        """The HyperNodes as the server holds them: name -> (labels, spec)."""
        return {
            n: {"labels": o["metadata"].get("labels"), "spec": o["spec"]} for n, o in self.hypernodes.objects.items()
        }

    def audited(self) -> list[Any]:
        return [e for e in self.plane.store.audit_log.entries() if e.action == "hypernodes"]


def _wanted(graph: FabricGraph) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: {"labels": o["metadata"]["labels"], "spec": o["spec"]}
            for o in volcano_hypernodes(topology_from_graph(graph))}  # fmt: skip


@pytest.fixture(scope="module")
def fabric() -> FabricGraph:
    return _fabric()


@pytest.fixture
def cluster(fabric: FabricGraph) -> Iterator[VolcanoCluster]:
    made = VolcanoCluster(fabric, CustomObjectsServer())
    try:
        yield made
    finally:
        made.stop()


def _settle(cluster: VolcanoCluster, graph: FabricGraph) -> None:
    for _ in range(SETTLE):
        cluster.poll(graph)
    cluster.plane.tick()  # the hosts past the first turn's PER_TURN relabels


def test_the_hypernodes_follow_the_settled_labels_once_and_are_the_exports(
    cluster: VolcanoCluster, fabric: FabricGraph
) -> None:
    for _ in range(SETTLE - 1):
        cluster.poll(fabric)
    assert cluster.hypernodes.requests == []  # nothing settled yet: not even a list
    cluster.poll(fabric)
    assert cluster.hypernodes.requests == []  # labels half written (PER_TURN): the HyperNodes wait for the rest
    cluster.plane.tick()
    wanted = _wanted(fabric)
    assert cluster.objects() == wanted
    assert sorted(cluster.hypernodes.writes()) == sorted(("POST", name) for name in wanted)  # one create each
    tiers = {spec["spec"]["tier"] for spec in wanted.values()}
    assert tiers == {1, 2, 3}
    for _ in range(2 * SETTLE):
        cluster.poll(fabric)
    assert len(cluster.hypernodes.writes()) == len(wanted)  # an unchanged fabric writes nothing more
    assert [m for m, *_ in cluster.hypernodes.requests].count("GET") == 1  # and reads nothing more
    audited = cluster.audited()
    assert len(audited) == len(wanted) and all(e.actor == "fabric" and not e.dry_run for e in audited)
    assert audited[0].decision.startswith("create hypernode ")
    stored = cluster.plane.store.events(kind="fabric", limit=10_000)
    assert sum(r["entity"] == "volcano/hypernodes" for r in stored) == len(wanted)


def test_a_failed_leaf_changes_the_hypernodes_once_its_moves_have_held(
    cluster: VolcanoCluster, fabric: FabricGraph
) -> None:
    _settle(cluster, fabric)
    first = len(cluster.hypernodes.writes())
    failed = _without(fabric, switch=FAILED_LEAF)
    for _ in range(SETTLE - 1):
        cluster.poll(failed)
    assert cluster.hypernodes.writes()[first:] == []  # the moves have not held yet
    cluster.poll(failed)
    writes = cluster.hypernodes.writes()[first:]
    homed = set(topology_from_graph(fabric).homed(FAILED_LEAF))
    after = topology_from_graph(failed)
    new_homes = {after.hosts[h].home for h in homed}
    assert ("DELETE", FAILED_LEAF) in writes  # the failed leaf's HyperNode goes
    assert new_homes <= {name for method, name in writes if method in ("POST", "PUT")}  # where its hosts went
    assert len(writes) == len(set(writes))  # each object written once
    assert cluster.objects() == _wanted(failed)  # what an export of the failed fabric says
    for _ in range(2 * SETTLE):
        cluster.poll(failed)
    assert cluster.hypernodes.writes()[first:] == writes  # and once only
    moved = [e.decision for e in cluster.audited() if "moved" in e.decision]
    assert len(moved) == 1 and f"{len(homed)} hosts moved" in moved[0]


def test_a_flapping_cable_writes_no_hypernode(cluster: VolcanoCluster, fabric: FabricGraph) -> None:
    _settle(cluster, fabric)
    requests = len(cluster.hypernodes.requests)
    flapped = _without(fabric, cable="dgx-000/mlx5_0/1")  # its home leaf flips with the cable
    assert topology_from_graph(flapped).hosts["dgx-000"].home != topology_from_graph(fabric).hosts["dgx-000"].home
    for i in range(4 * SETTLE):
        cluster.poll(flapped if i % 2 == 0 else fabric)
    assert len(cluster.hypernodes.requests) == requests  # no write, not even a read


def test_hypernodes_gpufleet_did_not_create_are_left_alone(fabric: FabricGraph) -> None:
    leaf = topology_from_graph(fabric).hosts["dgx-000"].home
    member = {"type": "Node", "selector": {"exactMatch": {"name": "dgx-000"}}}
    theirs = {"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode",
              "spec": {"tier": 1, "members": [member]}}  # fmt: skip
    same_name = {**theirs, "metadata": {"name": leaf, "labels": {"team": "network"}}}
    other = {**theirs, "metadata": {"name": "hand-made"}}
    mine_stale = {**theirs, "metadata": {"name": "gone-leaf", "labels": dict(MANAGED_BY)}}
    server = CustomObjectsServer([same_name, other, mine_stale])
    cluster = VolcanoCluster(fabric, server)
    try:
        _settle(cluster, fabric)
    finally:
        cluster.stop()
    assert server.objects[leaf]["metadata"]["labels"] == {"team": "network"}  # theirs, as it was
    assert "hand-made" in server.objects and "gone-leaf" not in server.objects  # gpufleet's stale one is deleted
    assert ("PUT", leaf) not in server.writes() and ("DELETE", "hand-made") not in server.writes()
    assert any(e.decision == f"left hypernode {leaf} alone: it exists and gpufleet did not create it"
               for e in cluster.audited())  # fmt: skip


def test_a_dry_run_says_what_it_would_write_and_writes_nothing(fabric: FabricGraph) -> None:
    server = CustomObjectsServer()
    cluster = VolcanoCluster(fabric, server, remediation="dry-run")
    try:
        _settle(cluster, fabric)
        cluster.poll(fabric)
    finally:
        cluster.stop()
    assert server.writes() == [] and server.objects == {}
    audited = cluster.audited()
    assert len(audited) == len(_wanted(fabric))  # said once
    assert all(e.dry_run and e.decision.startswith("would create hypernode ") for e in audited)


def test_a_refused_write_is_audited_once_and_tried_again_later(fabric: FabricGraph) -> None:
    server = CustomObjectsServer(plural="other")  # Volcano's CRD is not installed: the list is 404
    cluster = VolcanoCluster(fabric, server)
    try:
        _settle(cluster, fabric)
        for _ in range(3):
            cluster.poll(fabric)  # 90 s: past the first retry, not the second
        failed = cluster.audited()
        assert len(failed) == 1 and failed[0].decision.startswith("failed:") and "404" in failed[0].decision
        assert len(server.requests) == 2  # the first try and one retry, not one a turn
        server.plural = "hypernodes"  # Volcano is installed
        cluster.now += 2 * RETRY_S
        cluster.plane.tick()
    finally:
        cluster.stop()
    assert {name: o["spec"] for name, o in server.objects.items()} == {n: o["spec"] for n, o in _wanted(fabric).items()}


def test_the_settled_topology_is_what_the_labels_tell(fabric: FabricGraph) -> None:
    topology = topology_from_graph(fabric)
    settled = settled_topology(node_labels(topology))
    assert {h: x.home for h, x in settled.hosts.items()} == {h: x.home for h, x in topology.hosts.items()}
    assert volcano_hypernodes(settled) == volcano_hypernodes(topology)
    text = render_topology_conf(settled)
    for leaf in topology.tier("leaf"):
        if topology.homed(leaf.name):
            assert f"SwitchName={leaf.name} Nodes=" in text


def test_an_output_the_backend_cannot_keep_is_refused_with_the_fix(fabric: FabricGraph, tmp_path: Path) -> None:
    service = FabricService(load_thresholds(), fabric, TopologyTracker())
    with pytest.raises(UserError, match="--volcano-hypernodes needs the kubernetes backend"):
        ControlPlane(Database(":memory:"), SlurmBackend(), fabric=service, topology_outputs=VOLCANO)
    with pytest.raises(UserError, match="--slurm-topology-conf needs the slurm backend"):
        ControlPlane(Database(":memory:"), KubernetesBackend(object()), fabric=service,
                     topology_outputs=TopologyOutputs(slurm_conf=tmp_path / "topology.conf"))  # fmt: skip
    with pytest.raises(UserError, match="no folder"):
        ControlPlane(Database(":memory:"), SlurmBackend(), fabric=service,
                     topology_outputs=TopologyOutputs(slurm_conf=tmp_path / "nowhere" / "topology.conf"))  # fmt: skip
    with pytest.raises(UserError, match="use tree or block"):
        TopologyOutputs(slurm_conf=tmp_path / "topology.conf", slurm_format="graph")
    with pytest.raises(UserError, match="add --slurm-topology-conf"):
        TopologyOutputs(slurm_format="block")


def test_a_hypernode_deleted_by_hand_is_made_again_at_the_next_check(
    cluster: VolcanoCluster, fabric: FabricGraph
) -> None:
    _settle(cluster, fabric)
    name = topology_from_graph(fabric).hosts["dgx-000"].home
    wanted = cluster.hypernodes.objects.pop(name)  # someone deletes it
    requests = len(cluster.hypernodes.requests)
    for _ in range(SETTLE):
        cluster.poll(fabric)
    assert len(cluster.hypernodes.requests) == requests  # an unchanged view costs no call between checks
    cluster.now += RESYNC_S
    cluster.poll(fabric)
    assert cluster.hypernodes.writes()[-1:] == [("POST", name)]
    assert cluster.hypernodes.objects[name]["spec"] == wanted["spec"]
    assert cluster.audited()[-1].decision.startswith(f"create hypernode {name} ")
    requests = len(cluster.hypernodes.requests)
    cluster.poll(fabric)
    assert len(cluster.hypernodes.requests) == requests  # checked: the next check is RESYNC_S away
