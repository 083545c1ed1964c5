"""The control plane keeps Slurm's topology.conf to the settled topology, read by a real slurmctld (topology/tree):
a two-tier rail-optimised fabric over the test cluster's own nodes (two rails each, so a host whose first rail's leaf
fails moves to its second rail's), polled through the one door, with the Slurm backend and --slurm-topology-conf.

slurmctld starts with the file `fabric export --format slurm-topology` wrote; once the polls settled, the control
plane's file is written and `scontrol reconfigure`d; a failed leaf moves its hosts, and after the move held
`scontrol show topology` shows them under their new leaf; a flapping cable writes nothing."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.control.fabric import FabricService
from gpufleet.control.fabric_topology import LabelSettler, TopologyTracker
from gpufleet.control.relabel import RETRY_S
from gpufleet.control.scheduler_topology import RESYNC_S, TopologyOutputs
from gpufleet.control.service import ControlPlane
from gpufleet.fabric.graph import FabricGraph
from gpufleet.fabric.intended import intended_graph
from gpufleet.fabric.report import report_from_graph
from gpufleet.fabric.topology import topology_from_graph
from gpufleet.health.thresholds import load_thresholds
from gpufleet.integrations.slurm.client import SlurmRunner, expand_hostlist, parse_kv_record
from gpufleet.integrations.slurm.remediation import SlurmBackend
from gpufleet.integrations.slurm.topology_conf import render_block_conf, render_topology_conf
from gpufleet.model.observe import SCHEMA_VERSION, Batch
from gpufleet.spec.builder import build_cluster
from gpufleet.spec.cluster_spec import ClusterBody
from gpufleet.state import Database
from tests.control.test_fabric_topology import _without
from tests.slurm_cluster import SlurmCluster, require_slurm

pytestmark = pytest.mark.real

SETTLE = 3
FAILED_LEAF = "leaf-su1-r0"  # gpu-01's and gpu-02's first rail: their home leaf
NEW_LEAF = "leaf-su1-r1"  # their second rail's


def _fabric() -> FabricGraph:
    body = ClusterBody.model_validate(
        {
            "nodePools": [{"name": "gpu", "count": 4, "hostnames": ["gpu-01", "gpu-02", "gpu-03", "gpu-04"],
                           "nics": {"count": 2}}],
            "fabric": {"topology": "rail-optimized-fat-tree", "leafRadix": 4, "tiers": 2},
        }
    )  # fmt: skip
    return intended_graph(build_cluster("slurm-rails", body))


@pytest.fixture(scope="module")
def cluster() -> Iterator[SlurmCluster]:
    require_slurm()
    root = Path(tempfile.mkdtemp(prefix="gpufleet-slurm-keep-"))
    (root / "etc").mkdir()
    (root / "etc" / "topology.conf").write_text(render_topology_conf(topology_from_graph(_fabric())))  # the export
    slurm = SlurmCluster(root, nodes=4, extra_conf="TopologyPlugin=topology/tree")
    try:
        slurm.start()
        yield slurm
    finally:
        slurm.stop()
        shutil.rmtree(root, ignore_errors=True)


class Plane:
    def __init__(
        self,
        cluster: SlurmCluster,
        remediation: str = "on",
        *,
        path: Path | None = None,
        style: str = "tree",
        domains: dict[str, str] | None = None,
    ) -> None:
        self.now = time.time()
        self.path = path or cluster.root / "etc" / "topology.conf"
        tracker = TopologyTracker(settler=LabelSettler(SETTLE))
        service = FabricService(load_thresholds(), _fabric(), tracker, domains)
        outputs = TopologyOutputs(slurm_conf=self.path, slurm_format=style)
        self.plane = ControlPlane(Database(":memory:"), SlurmBackend(SlurmRunner(cluster.conf)), clock=lambda: self.now,
                                  remediation=remediation, fabric=service, topology_outputs=outputs)  # fmt: skip

    def poll(self, graph: FabricGraph) -> None:
        self.now += 30.0
        report = report_from_graph(graph, subnet="default", time=self.now)
        batch = Batch(v=SCHEMA_VERSION, agent="watch", incarnation="i", node="sm", sent=time.time(), fabric=[report])
        self.plane.ingest(batch)
        self.plane.tick()

    def audited(self) -> list[str]:
        return [e.decision for e in self.plane.store.audit_log.entries() if e.action == "topology-conf"]


def _leaves(cluster: SlurmCluster) -> dict[str, set[str]]:
    """Each leaf switch slurmctld knows -> its nodes (`scontrol show topology`)."""
    records = [parse_kv_record(line) for line in cluster.scontrol("show", "topology").splitlines() if line.strip()]
    return {r["SwitchName"]: set(expand_hostlist(r["Nodes"])) for r in records if r.get("Level") == "0"}


def test_a_failed_leaf_moves_its_hosts_in_slurmctld_once_the_move_has_held(cluster: SlurmCluster) -> None:
    fabric = _fabric()
    plane = Plane(cluster)
    assert _leaves(cluster)[FAILED_LEAF] == {"gpu-01", "gpu-02"}  # as the export wrote it
    for _ in range(SETTLE):
        plane.poll(fabric)
    written = plane.path.read_text()
    assert "written by the gpufleet control plane" in written
    assert [d.split(" (")[0] for d in plane.audited()] == [f"wrote {plane.path}"]
    assert _leaves(cluster)[FAILED_LEAF] == {"gpu-01", "gpu-02"}

    failed = _without(fabric, switch=FAILED_LEAF)
    for _ in range(SETTLE - 1):
        plane.poll(failed)
    assert plane.path.read_text() == written  # the move has not held yet
    plane.poll(failed)
    leaves = _leaves(cluster)
    assert FAILED_LEAF not in leaves
    assert leaves[NEW_LEAF] == {"gpu-01", "gpu-02"}  # slurmctld has them under their new leaf
    assert leaves["leaf-su2-r0"] == {"gpu-03", "gpu-04"}
    assert (
        len(plane.audited()) == 2
        and "2 hosts moved: gpu-01 to leaf-su1-r1, gpu-02 to leaf-su1-r1" in plane.audited()[1]
    )
    assert not list(plane.path.parent.glob(".topology.conf.*"))  # no temporary file left beside it

    for _ in range(SETTLE + 1):
        plane.poll(failed)
    assert len(plane.audited()) == 2  # written once

    # a fresh control plane over the same fabric: the file holds its topology, nothing is written or reconfigured
    again = Plane(cluster)
    before = plane.path.stat().st_mtime_ns
    for _ in range(SETTLE):
        again.poll(failed)
    assert again.audited() == [] and plane.path.stat().st_mtime_ns == before


def test_a_flapping_cable_writes_no_topology_conf(cluster: SlurmCluster) -> None:
    fabric = _fabric()
    plane = Plane(cluster)
    for _ in range(SETTLE):
        plane.poll(fabric)
    written = plane.path.read_text()
    flapped = _without(fabric, cable="gpu-03/mlx5_0/1")  # gpu-03's first rail: its home flips with the cable
    assert topology_from_graph(flapped).hosts["gpu-03"].home != topology_from_graph(fabric).hosts["gpu-03"].home
    audited = len(plane.audited())
    for i in range(4 * SETTLE):
        plane.poll(flapped if i % 2 == 0 else fabric)
    assert plane.path.read_text() == written and len(plane.audited()) == audited
    assert "gpu-03" in _leaves(cluster)["leaf-su2-r0"]


def test_a_dry_run_says_what_it_would_write_and_leaves_the_file(cluster: SlurmCluster) -> None:
    plane = Plane(cluster, remediation="dry-run")
    before = plane.path.read_text()
    failed = _without(_fabric(), switch="leaf-su2-r0")
    for _ in range(SETTLE):
        plane.poll(failed)
    assert plane.path.read_text() == before
    assert [d.split(" (")[0] for d in plane.audited()] == [f"would write {plane.path}"]


def test_the_backend_writes_atomically_and_reconfigures_only_what_changed(cluster: SlurmCluster) -> None:
    backend = SlurmBackend(SlurmRunner(cluster.conf))
    path = cluster.root / "etc" / "topology.conf"
    text = render_topology_conf(topology_from_graph(_fabric()))
    path.write_text(text + "# an older version\n")
    assert backend.write_topology_conf(path, text).startswith(f"wrote {path}")
    assert path.read_text() == text and oct(path.stat().st_mode & 0o777) == "0o644"
    assert backend.write_topology_conf(path, text) == ""  # held already: no write, no reconfigure
    # a retry after a failed reconfigure: the file may hold the text, slurmctld may not have read it
    assert backend.write_topology_conf(path, text, retry=True).endswith("reconfigured slurmctld")
    assert _leaves(cluster)[FAILED_LEAF] == {"gpu-01", "gpu-02"}
    assert not list(path.parent.glob(".topology.conf.*"))


def test_the_block_format_writes_the_nvlink_domains_as_blocks(cluster: SlurmCluster, tmp_path: Path) -> None:
    """topology/block came with Slurm 23.11: the file is written beside the test cluster's (whose slurmctld runs
    topology/tree and is reconfigured all the same) and is what `fabric export --format slurm-block` writes for the
    fabric and its NVLink domains."""
    domains = {"gpu-01": "nvl-a", "gpu-02": "nvl-a", "gpu-03": "nvl-b", "gpu-04": "nvl-b"}
    path = tmp_path / "topology.conf"
    plane = Plane(cluster, path=path, style="block", domains=domains)
    for _ in range(SETTLE):
        plane.poll(_fabric())
    exported = render_block_conf(topology_from_graph(_fabric(), nvlink_domains=domains))
    written = path.read_text()
    assert [line for line in written.splitlines() if not line.startswith("#")] == [
        line for line in exported.splitlines() if not line.startswith("#")
    ]
    assert "BlockName=nvl-a Nodes=gpu-[01-02]" in written and "BlockName=nvl-b Nodes=gpu-[03-04]" in written
    assert [d.split(" (")[0] for d in plane.audited()] == [f"wrote {path}"]


def test_a_failed_reconfigure_is_audited_once_and_tried_again_later(cluster: SlurmCluster) -> None:
    """The file was written but slurmctld could not be told (its client has no configuration here): the next try,
    RETRY_S later, reconfigures though the file already holds the topology."""
    plane = Plane(cluster)
    backend = plane.plane.backend
    assert isinstance(backend, SlurmBackend)
    backend.runner = SlurmRunner(str(cluster.root / "etc" / "no-such-slurm.conf"))
    failed = _without(_fabric(), switch="leaf-su2-r0")
    for _ in range(SETTLE + 1):
        plane.poll(failed)  # 30 s apart: within the first retry's wait
    audited = plane.audited()
    assert len(audited) == 1 and audited[0].startswith("failed:") and "no Slurm configuration" in audited[0]
    assert "SwitchName=leaf-su2-r1 Nodes=gpu-[03-04]" in plane.path.read_text()  # written, not yet read
    assert _leaves(cluster)["leaf-su2-r0"] == {"gpu-03", "gpu-04"}
    backend.runner = SlurmRunner(cluster.conf)  # slurmctld's client works again
    plane.now += RETRY_S
    plane.plane.tick()
    assert plane.audited()[1].startswith(f"{plane.path} held the topology already; reconfigured slurmctld")
    assert _leaves(cluster)["leaf-su2-r1"] == {"gpu-03", "gpu-04"}


def test_a_topology_conf_edited_by_hand_is_written_again_at_the_next_check(cluster: SlurmCluster) -> None:
    plane = Plane(cluster)
    for _ in range(SETTLE):
        plane.poll(_fabric())
    written = plane.path.read_text()
    plane.path.write_text(written.replace(f"SwitchName={FAILED_LEAF} ", "SwitchName=by-hand ", 1))
    plane.poll(_fabric())
    assert "SwitchName=by-hand" in plane.path.read_text()  # between checks, the file is not read
    plane.now += RESYNC_S
    plane.poll(_fabric())
    assert plane.path.read_text() == written
    assert FAILED_LEAF in _leaves(cluster) and "by-hand" not in _leaves(cluster)
    assert plane.audited()[-1].startswith(f"wrote {plane.path}")
