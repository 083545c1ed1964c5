"""The control plane keeps the fabric's topology current and the nodes' topology labels with it: a three-tier,
eight-rail fat tree (the intended cabling of a cluster manifest) polled through the one door as fabric reports, a
Kubernetes backend (the official client's models behind the recording API of tests/integrations/kubernetes) that
labels the nodes, and the control loop that writes them.

A failed leaf moves exactly the hosts homed under it, once the move has held for the settle polls, and each move
is an event and an audited relabel; a flapping cable (down and up on alternate polls) writes no label at all; a host
that vanished keeps its labels; a dry run audits what it would write and writes nothing."""

from __future__ import annotations

import time
from typing import Any

import pytest

from gpufleet.control import fabric as views
from gpufleet.control.fabric import FabricService
from gpufleet.control.fabric_topology import (
    LabelSettler,
    TopologyTracker,
    nvlink_domains,
    topology_from_dict,
    topology_to_dict,
)
from gpufleet.control.relabel import PER_TURN, RETRY_S
from gpufleet.control.service import ControlPlane
from gpufleet.fabric.graph import FabricGraph, Node, NodeKind
from gpufleet.fabric.intended import intended_graph
from gpufleet.fabric.report import report_from_graph
from gpufleet.fabric.topology import topology_from_graph
from gpufleet.health.thresholds import load_thresholds
from gpufleet.integrations.kubernetes.topology import LEAF_LABEL, MANAGED_LABELS, NVLINK_DOMAIN_LABEL, node_labels
from gpufleet.model.observe import SCHEMA_VERSION, Batch, GpuInfo, NodeInventory
from gpufleet.spec.builder import build_cluster
from gpufleet.spec.cluster_spec import ClusterBody
from gpufleet.state import Database

kube = pytest.importorskip("kubernetes.client")
from gpufleet.integrations.kubernetes.remediation import KubernetesBackend  # noqa: E402
from tests.integrations.kubernetes.k8s_api import RecordingCoreV1  # noqa: E402

SETTLE = 3
FAILED_LEAF = "leaf-su1-r0"  # every host's first rail: the home of the hosts cabled to it
OTHER_LABELS = {"kubernetes.io/os": "linux", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}


def _fabric() -> FabricGraph:
    body = ClusterBody.model_validate(
        {
            "nodePools": [{"name": "dgx", "count": 64, "gpu": {"model": "h100-sxm", "count": 8}, "nics": {"count": 8}}],
            "fabric": {"topology": "rail-optimized-fat-tree", "leafRadix": 16, "tiers": 3},
        }
    )
    return intended_graph(build_cluster("topology-test", body))


def _without(graph: FabricGraph, *, switch: str | None = None, host: str | None = None, cable: str = "") -> FabricGraph:
    """The fabric with a switch gone (it and its cables no longer discovered), a host gone (all its cables), or
    one cable gone (named by one of its ends)."""
    out = FabricGraph(source=graph.source)
    for node in graph.nodes.values():
        if node.name != switch and not (host and node.name.startswith(f"{host}/")):
            out.add_node(node)
    for link in graph.links:
        names = (link.a.node, link.b.node)
        if switch in names or (host and any(n.startswith(f"{host}/") for n in names)):
            continue
        if cable in (str(link.a), str(link.b)):
            continue
        out.add_link(link)
    return out


class Cluster:
    """A control plane with a Kubernetes backend over the recording API, fed one fabric poll per `poll`."""

    def __init__(self, fabric: FabricGraph, remediation: str = "on", settle: int = SETTLE) -> None:
        hosts = sorted(topology_from_graph(fabric).hosts)
        self.api = RecordingCoreV1(
            [
                kube.V1Node(
                    metadata=kube.V1ObjectMeta(name=h, labels=dict(OTHER_LABELS)),
                    spec=kube.V1NodeSpec(),
                    status=kube.V1NodeStatus(conditions=[kube.V1NodeCondition(type="Ready", status="True")]),
                )
                for h in hosts
            ],
            [],
        )
        self.now = 1000.0
        backend = KubernetesBackend(self.api, clock=lambda: self.now)
        service = FabricService(load_thresholds(), fabric, TopologyTracker(settler=LabelSettler(settle)))
        self.plane = ControlPlane(
            Database(":memory:"), backend, clock=lambda: self.now, remediation=remediation, fabric=service
        )
        self.seq = 0

    def poll(self, graph: FabricGraph, subnet: str = "default") -> None:
        """One fabric poll through the door, then a turn of the control loop."""
        self.now += 30.0
        self.seq += 1
        report = report_from_graph(graph, subnet=subnet, time=self.now)
        batch = Batch(v=SCHEMA_VERSION, agent="watch", incarnation="i", node="sm", sent=time.time(), fabric=[report])
        self.plane.ingest(batch)
        self.plane.tick()

    def label_patches(self) -> list[tuple[str, dict[str, Any]]]:
        out = []
        for name, args in self.api.calls:
            if name == "patch_node" and "labels" in args[1].get("metadata", {}):
                out.append((args[0], args[1]["metadata"]["labels"]))
        return out

    def labels(self, host: str) -> dict[str, str]:
        return dict(self.api.nodes[host].metadata.labels or {})

    def relabels(self) -> list[Any]:
        return [e for e in self.plane.store.audit_log.entries() if e.action == "relabel"]


@pytest.fixture(scope="module")
def fabric() -> FabricGraph:
    return _fabric()


def _settled(fabric: FabricGraph, remediation: str = "on") -> Cluster:
    cluster = Cluster(fabric, remediation)
    for _ in range(SETTLE):
        cluster.poll(fabric)
    cluster.plane.tick()  # the hosts past the first turn's PER_TURN
    return cluster


def test_every_host_is_labelled_once_its_labels_have_held(fabric: FabricGraph) -> None:
    cluster = Cluster(fabric)
    for _ in range(SETTLE - 1):
        cluster.poll(fabric)
    assert cluster.label_patches() == []  # not yet settled
    cluster.poll(fabric)
    wanted = node_labels(topology_from_graph(fabric))
    assert len(cluster.label_patches()) == PER_TURN  # a turn writes so many; the next turn the rest
    cluster.plane.tick()
    assert {host for host, _ in cluster.label_patches()} == set(wanted)
    for host, labels in wanted.items():
        assert cluster.labels(host) == {**OTHER_LABELS, **labels}  # the node's other labels are as they were
    assert len(cluster.relabels()) == len(wanted)
    cluster.poll(fabric)
    assert len(cluster.label_patches()) == len(wanted)  # an unchanged fabric writes nothing more


def test_a_failed_leaf_moves_exactly_its_homed_hosts_once_the_move_has_held(fabric: FabricGraph) -> None:
    cluster = _settled(fabric)
    before = topology_from_graph(fabric)
    homed = set(before.homed(FAILED_LEAF))
    assert homed
    first = len(cluster.label_patches())
    failed = _without(fabric, switch=FAILED_LEAF)
    for _ in range(SETTLE - 1):
        cluster.poll(failed)
    assert len(cluster.label_patches()) == first  # not yet: the move must hold for the settle polls
    moved = [e for e in views.events(cluster.plane.fabric) if e["kind"] == "host-moved"]
    assert {e["ends"][0] for e in moved} == homed  # told once, at the poll that saw it
    assert [e["kind"] for e in views.events(cluster.plane.fabric) if e["kind"] == "switch-gone"] == ["switch-gone"]
    cluster.poll(failed)
    patches = cluster.label_patches()[first:]
    assert {host for host, _ in patches} == homed
    after = topology_from_graph(failed)
    for host, labels in patches:
        assert labels[LEAF_LABEL] == after.hosts[host].home != FAILED_LEAF
        assert set(labels) <= set(MANAGED_LABELS)
        assert cluster.labels(host) == {**OTHER_LABELS, **node_labels(after)[host]}
    audited = cluster.relabels()[-len(homed) :]
    assert {e.target for e in audited} == {f"node/{h}" for h in homed}
    assert all(e.actor == "fabric" and not e.dry_run and e.decision.startswith("labelled") for e in audited)
    stored = cluster.plane.store.events(kind="fabric", limit=10_000)
    assert {r["node"] for r in stored if r["message"].startswith("labelled")} >= homed
    assert {r["entity"] for r in stored if "home leaf is now" in r["message"]} == {f"node/{h}" for h in homed}
    body = views.topology(cluster.plane.fabric)
    assert FAILED_LEAF not in {s["name"] for s in body["switches"]}
    assert body["labels"]["pending"] == 0 and body["labels"]["applied"] == len(before.hosts)


def test_a_spine_lost_for_good_relabels_nobody(fabric: FabricGraph) -> None:
    """A pod's spine group is named after one of its spines; losing that spine keeps the name the hosts carry."""
    cluster = _settled(fabric)
    first = len(cluster.label_patches())
    spine = min(s.name for s in topology_from_graph(fabric).tier("spine"))
    lost = _without(fabric, switch=spine)
    for _ in range(SETTLE + 2):
        cluster.poll(lost)
    assert cluster.label_patches()[first:] == []
    for _ in range(SETTLE + 2):
        cluster.poll(fabric)  # and back
    assert cluster.label_patches()[first:] == []


def test_a_flapping_cable_writes_no_label(fabric: FabricGraph) -> None:
    cluster = _settled(fabric)
    first = len(cluster.label_patches())
    flapped = _without(fabric, cable="dgx-000/mlx5_0/1")  # its first rail: without it, its home is rail 1's leaf
    assert topology_from_graph(flapped).hosts["dgx-000"].home != topology_from_graph(fabric).hosts["dgx-000"].home
    for i in range(4 * SETTLE):
        cluster.poll(flapped if i % 2 == 0 else fabric)
    assert cluster.label_patches()[first:] == []
    moves = [e for e in views.events(cluster.plane.fabric, limit=2000) if e["kind"] == "host-moved"]
    assert len(moves) == 4 * SETTLE  # every flip is told, none is written


def test_a_flapping_cable_writes_no_label_while_another_subnet_reports_between_its_flips(fabric: FabricGraph) -> None:
    """With a second watcher's subnet (here a lone storage switch) reporting between the flaps, its reports do not
    count as polls of the flapping one: a poll is every subnet's report."""
    storage = FabricGraph(source="storage")
    storage.add_node(Node("storage-leaf-1", NodeKind.switch, guid="0x00000000000000ff", ports=64, lid=900))
    cluster = Cluster(fabric)
    for _ in range(SETTLE):
        cluster.poll(fabric)
        cluster.poll(storage, subnet="storage")
    cluster.plane.tick()
    first = len(cluster.label_patches())
    assert first == len(topology_from_graph(fabric).hosts)
    flapped = _without(fabric, cable="dgx-000/mlx5_0/1")
    for i in range(4 * SETTLE):
        cluster.poll(flapped if i % 2 == 0 else fabric)
        cluster.poll(storage, subnet="storage")
        cluster.poll(storage, subnet="storage")  # even two of its reports between two flips
    assert cluster.label_patches()[first:] == []
    cluster.poll(flapped)
    for _ in range(SETTLE):
        cluster.poll(storage, subnet="storage")
        cluster.poll(flapped)
    assert [host for host, _ in cluster.label_patches()[first:]] == ["dgx-000"]  # a move that holds is written


def test_without_settling_the_same_flapping_cable_relabels_at_every_flip(fabric: FabricGraph) -> None:
    """What the settle polls prevent: with one poll, dgx-000 is relabelled back and forth."""
    cluster = Cluster(fabric, settle=1)
    cluster.poll(fabric)
    cluster.plane.tick()
    first = len(cluster.label_patches())
    flapped = _without(fabric, cable="dgx-000/mlx5_0/1")
    for i in range(4):
        cluster.poll(flapped if i % 2 == 0 else fabric)
    assert [host for host, _ in cluster.label_patches()[first:]] == ["dgx-000"] * 4


def test_a_host_that_vanished_keeps_its_labels(fabric: FabricGraph) -> None:
    cluster = _settled(fabric)
    labels = cluster.labels("dgx-005")
    first = len(cluster.label_patches())
    gone = _without(fabric, host="dgx-005")
    for _ in range(2 * SETTLE):
        cluster.poll(gone)
    assert cluster.label_patches()[first:] == []
    assert cluster.labels("dgx-005") == labels
    assert [e["ends"] for e in views.events(cluster.plane.fabric) if e["kind"] == "host-gone"] == [["dgx-005"]]
    for _ in range(2 * SETTLE):
        cluster.poll(fabric)  # back where it was: nothing to write either
    assert cluster.label_patches()[first:] == []


def test_a_host_that_is_no_node_of_the_cluster_is_audited_once_and_tried_again_later(fabric: FabricGraph) -> None:
    cluster = Cluster(fabric)
    node = cluster.api.nodes.pop("dgx-007")  # in the fabric, not (yet) a Kubernetes node
    for _ in range(SETTLE + 5):
        cluster.poll(fabric)  # 30 s apart: past the first retry, not the second
    failed = [e for e in cluster.relabels() if e.target == "node/dgx-007"]
    assert len(failed) == 1 and failed[0].decision.startswith("failed:") and "404" in failed[0].decision
    reads = [args for name, args in cluster.api.calls if name == "read_node" and args == ("dgx-007",)]
    assert len(reads) == 2  # at the settle poll and once RETRY_S later, not at every turn
    cluster.api.nodes["dgx-007"] = node  # it joins the cluster
    cluster.now += 2 * RETRY_S
    cluster.plane.tick()
    assert cluster.labels("dgx-007")[LEAF_LABEL] == topology_from_graph(fabric).hosts["dgx-007"].home
    assert cluster.relabels()[-1].target == "node/dgx-007" and cluster.relabels()[-1].decision.startswith("labelled")


def test_a_nodes_nvlink_domain_from_its_agent_becomes_its_label(fabric: FabricGraph) -> None:
    cluster = _settled(fabric)
    uuid = "5b3a1f2e-9c4d-4e6f-8a7b-1c2d3e4f5a6b"
    gpus = [GpuInfo(index=i, uuid=f"GPU-{i}", model="NVIDIA GB200", cluster_uuid=uuid, clique_id=7) for i in range(4)]
    inventory = NodeInventory(hostname="dgx-003", gpus=gpus)
    cluster.plane.ingest(
        Batch(v=SCHEMA_VERSION, agent="dgx-003", incarnation="a", node="dgx-003", sent=time.time(), inventory=inventory)
    )
    for _ in range(SETTLE):
        cluster.poll(fabric)  # the same fabric: the new domain alone rebuilds the topology
    assert cluster.labels("dgx-003")[NVLINK_DOMAIN_LABEL] == f"{uuid}.7"
    assert NVLINK_DOMAIN_LABEL not in cluster.labels("dgx-004")
    assert cluster.plane.fabric.topology.topology.hosts["dgx-003"].nvlink_domain == f"{uuid}.7"


def test_after_a_restart_labels_already_on_the_nodes_are_read_not_written(fabric: FabricGraph) -> None:
    cluster = _settled(fabric)
    written = len(cluster.label_patches())
    service = FabricService(load_thresholds(), fabric, TopologyTracker(settler=LabelSettler(SETTLE)))
    backend = KubernetesBackend(cluster.api, clock=lambda: cluster.now)
    cluster.plane = ControlPlane(Database(":memory:"), backend, clock=lambda: cluster.now, fabric=service,
                                 remediation="on")  # fmt: skip
    for _ in range(SETTLE):
        cluster.poll(fabric)
    cluster.plane.tick()
    assert len(cluster.label_patches()) == written
    assert cluster.relabels() == []  # nothing written, nothing to audit
    assert cluster.plane.fabric.topology.settler.due() == {}


def test_a_dry_run_audits_what_it_would_write_and_writes_nothing(fabric: FabricGraph) -> None:
    cluster = _settled(fabric, remediation="dry-run")
    assert cluster.label_patches() == []
    audited = cluster.relabels()
    assert len(audited) == len(topology_from_graph(fabric).hosts)
    assert all(e.dry_run and e.decision.startswith("would label") for e in audited)
    cluster.poll(fabric)
    assert len(cluster.relabels()) == len(audited)  # said once, not every turn


def test_off_writes_and_records_nothing(fabric: FabricGraph) -> None:
    cluster = _settled(fabric, remediation="off")
    assert cluster.label_patches() == [] and cluster.relabels() == []


def test_the_topology_travels_as_json_and_back(fabric: FabricGraph) -> None:
    topology = topology_from_graph(fabric, nvlink_domains={"dgx-000": "c0ffee.1"})
    again = topology_from_dict(topology_to_dict(topology))
    assert again.switches == topology.switches and again.hosts == topology.hosts


def test_nvlink_domains_are_what_most_of_a_hosts_gpus_joined() -> None:
    uuid = "5b3a1f2e-9c4d-4e6f-8a7b-1c2d3e4f5a6b"
    domains = nvlink_domains(
        [
            ("gb200-01", [(uuid, 1)] * 3 + [(uuid, 2)]),
            ("gb200-02", [(uuid, 2)] * 4),
            ("h100-01", [("", None)] * 8),  # joined none
        ]
    )
    assert domains == {"gb200-01": f"{uuid}.1", "gb200-02": f"{uuid}.2"}


def test_the_manifests_nvlink_domains_stand_where_no_node_reported_one() -> None:
    from pathlib import Path

    from gpufleet.cli.server import FabricOptions

    manifest = Path(__file__).parents[2] / "src" / "gpufleet" / "examples" / "clusters" / "gb200-nvl72.yaml"
    service = FabricOptions(expect=manifest).service()
    declared = service.declared_domains
    assert declared
    assert service.expected is not None
    host = sorted(declared)[0]
    service.nvlink_domains = lambda: {host: "c0ffee.3"}  # what the host's own GPUs report wins
    service.take(report_from_graph(service.expected, subnet="default", time=1000.0))
    topology = service.topology.topology
    assert topology is not None
    assert topology.hosts[host].nvlink_domain == "c0ffee.3"
    assert {h: topology.hosts[h].nvlink_domain for h in sorted(declared)[1:]} == {
        h: declared[h] for h in sorted(declared)[1:]
    }
    assert FabricOptions(expect=None).service().declared_domains == {}
