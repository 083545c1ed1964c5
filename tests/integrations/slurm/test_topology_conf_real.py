"""topology.conf from `gpufleet fabric export --format slurm-topology`, read by a real slurmctld (topology/tree):
for the ibsim fat tree, a two-tier fabric over the test cluster's own nodes and a three-tier rail-optimised one.
One cluster for the module; each fabric is loaded with `scontrol reconfigure`."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.fabric.intended import load_expected
from gpufleet.fabric.topology import Topology, topology_from_graph
from gpufleet.integrations.slurm.client import expand_hostlist, parse_kv_record
from gpufleet.integrations.slurm.topology_conf import slurm_switch_names
from tests.clirun import gpufleet
from tests.conftest import REPO_ROOT
from tests.slurm_cluster import SlurmCluster, require_slurm

pytestmark = pytest.mark.real

DATA = Path(__file__).parent / "data"
FABRICS = {
    "ibsim": REPO_ROOT / "examples" / "clusters" / "ibsim-fattree.yaml",
    "two-tier": DATA / "two-tier-fabric.yaml",
    "three-tier": DATA / "three-tier-fabric.yaml",
}
# the fabrics' hosts beside the cluster's gpu-01..04 (which have a slurmd each): defined, down, never scheduled on
OTHER_NODES = "node[01-08],cn[01-08],hx[8-15]"


@pytest.fixture(scope="module")
def cluster() -> Iterator[SlurmCluster]:
    require_slurm()
    root = Path(tempfile.mkdtemp(prefix="gpufleet-slurm-topo-"))
    (root / "etc").mkdir()
    (root / "etc" / "topology.conf").write_text(_export(FABRICS["two-tier"]))
    extra = "\n".join(
        (
            "TopologyPlugin=topology/tree",
            f"NodeName={OTHER_NODES} NodeAddr=127.0.0.1 Port=9 CPUs=1 RealMemory=1000 State=DOWN Reason=no-slurmd",
        )
    )
    slurm = SlurmCluster(root, nodes=4, extra_conf=extra)
    try:
        slurm.start()
        yield slurm
    finally:
        slurm.stop()
        shutil.rmtree(root, ignore_errors=True)


def _export(manifest: Path) -> str:
    ran = gpufleet("fabric", "export", "--format", "slurm-topology", "--cluster", str(manifest))
    assert ran.returncode == 0, ran.stderr
    return ran.stdout


def _load(cluster: SlurmCluster, text: str) -> dict[str, dict[str, str]]:
    (cluster.root / "etc" / "topology.conf").write_text(text)
    cluster.scontrol("reconfigure")
    return _read_back(cluster)


def _read_back(cluster: SlurmCluster) -> dict[str, dict[str, str]]:
    records = [parse_kv_record(line) for line in cluster.scontrol("show", "topology").splitlines() if line.strip()]
    return {r["SwitchName"]: r for r in records}


def _written(text: str) -> dict[str, dict[str, str]]:
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    return {r["SwitchName"]: r for r in map(parse_kv_record, lines)}


def _hosts_below(name: str, written: dict[str, dict[str, str]]) -> set[str]:
    record = written[name]
    if "Nodes" in record:
        return set(expand_hostlist(record["Nodes"]))
    return set().union(*(_hosts_below(child, written) for child in expand_hostlist(record["Switches"])))


@pytest.mark.parametrize("fabric", sorted(FABRICS))
def test_slurmctld_reads_back_every_switch_as_written(cluster: SlurmCluster, fabric: str) -> None:
    text = _export(FABRICS[fabric])
    written = _written(text)
    shown = _load(cluster, text)
    assert sorted(shown) == sorted(written)
    levels = {"leaf": "0", "spine": "1", "core": "2"}
    topology = _topology(FABRICS[fabric])
    names = slurm_switch_names(topology)
    for switch in topology.switches.values():
        if names[switch.name] in written:
            assert shown[names[switch.name]]["Level"] == levels[switch.tier]
    for name, record in written.items():
        back = shown[name]
        assert set(expand_hostlist(back["Nodes"])) == _hosts_below(name, written), name
        if "Switches" in record:
            assert expand_hostlist(back["Switches"]) == expand_hostlist(record["Switches"]), name
        else:
            assert expand_hostlist(back["Nodes"]) == expand_hostlist(record["Nodes"]), name
    # every host is under exactly one leaf, the one the model calls its home
    leaves = {n: set(expand_hostlist(r["Nodes"])) for n, r in shown.items() if r["Level"] == "0"}
    for host in topology.hosts.values():
        assert [leaf for leaf, hosts in leaves.items() if host.name in hosts] == [names[host.home]]


def _topology(manifest: Path) -> Topology:
    return topology_from_graph(load_expected(manifest))


def test_a_job_that_asks_for_one_switch_lands_under_one_leaf(cluster: SlurmCluster) -> None:
    text = _export(FABRICS["two-tier"])
    _load(cluster, text)
    cluster.runner.run(["scancel", "--full", "-u", "root"])
    cluster.wait_for(lambda: not cluster.runner.squeue(), "jobs to finish")
    run = ["sbatch", "--parsable", "-o", str(cluster.jobs_dir / "topo-%j.out")]
    try:
        # gpu-01 busy: without the topology, two nodes would be gpu-02 and gpu-03 (the lowest free), across leaves
        cluster.runner.run([*run, "-w", "gpu-01", "--exclusive", "--wrap", "sleep 300"])
        job = cluster.runner.run([*run, "-N", "2", "--exclusive", "--switches=1", "--wrap", "sleep 300"]).strip()
        cluster.wait_for(lambda: cluster.runner.jobs(job)[0].state == "RUNNING", "the two-node job to start")
        nodes = cluster.runner.jobs(job)[0].nodes
        assert sorted(nodes) == ["gpu-03", "gpu-04"]  # both under leaf-2
    finally:
        cluster.runner.run(["scancel", "--full", "-u", "root"])


def test_listing_a_host_under_each_of_its_leaves_is_what_slurmctld_warns_of(cluster: SlurmCluster) -> None:
    """Why each host is written under one leaf: slurmctld takes a node under two leaf switches but warns of it
    (and counts the node under both)."""
    log = cluster.root / "log" / "slurmctld.log"
    warning = "Multiple leaf switches contain nodes"
    _load(cluster, _export(FABRICS["ibsim"]))
    assert warning not in log.read_text()
    shown = _load(cluster, "SwitchName=leaf3 Nodes=node[05-08]\nSwitchName=leaf4 Nodes=node[05-08]\n")
    cluster.wait_for(lambda: warning in log.read_text(), "slurmctld's warning")
    assert expand_hostlist(shown["leaf4"]["Nodes"]) == ["node05", "node06", "node07", "node08"]
