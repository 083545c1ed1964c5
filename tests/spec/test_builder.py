from collections import Counter
from pathlib import Path

import pytest

from gpufleet.errors import ParseError
from gpufleet.sched.replay.openb_cluster import load_openb_nodes
from gpufleet.spec.builder import build_cluster
from gpufleet.spec.loader import load_cluster

EXAMPLES = Path(__file__).resolve().parents[2] / "src" / "gpufleet" / "examples"


def _build(name: str):  # type: ignore[no-untyped-def]
    manifest = load_cluster(EXAMPLES / "clusters" / name)
    return build_cluster(manifest.metadata.name, manifest.spec)


def test_dgx_scalable_unit_shape() -> None:
    cluster = _build("dgx-h100-su.yaml")
    assert len(cluster.nodes) == 32 and cluster.gpu_count == 256
    tiers = Counter(sw.tier for sw in cluster.fabric.switches)
    # 8 rail leaves of radix 64: 32 down, 32 up each; 256 uplinks over 64-port spines = 4 spines.
    assert tiers == {"leaf": 8, "spine": 4}
    node_links = [lk for lk in cluster.fabric.links if "/" in lk.b[0]]
    uplinks = [lk for lk in cluster.fabric.links if "/" not in lk.b[0]]
    assert len(node_links) == 256 and len(uplinks) == 256


def test_rail_optimized_wiring() -> None:
    cluster = _build("dgx-h100-su.yaml")
    for node in cluster.nodes:
        for nic in node.nics:
            assert cluster.fabric.leaf_of(f"{node.name}/{nic.name}") == f"leaf-su1-r{nic.rail}"


def test_gpu_identities_are_unique_and_stable() -> None:
    a, b = _build("dgx-h100-su.yaml"), _build("dgx-h100-su.yaml")
    uuids = [g.uuid for _, g in a.iter_gpus()]
    assert len(set(uuids)) == 256
    assert uuids == [g.uuid for _, g in b.iter_gpus()]
    first = a.nodes[0].gpus
    assert [g.pci_bus_id for g in first][:2] == ["00000000:18:00.0", "00000000:2A:00.0"]
    assert first[0].nvlink_peers == [1, 2, 3, 4, 5, 6, 7]  # NVSwitch: all-to-all


def test_mixed_fleet() -> None:
    cluster = _build("mixed-fleet.yaml")
    pools = {p.name: p for p in cluster.pools}
    assert pools["cpu"].gpu_model is None and pools["t4"].gpus_per_node == 4
    t4 = cluster.node("t4-000")
    assert t4.taints[0].key == "gpufleet.io/inference-only"
    assert t4.gpus[0].nvlink_peers == []
    cpu = cluster.node("cpu-000")
    assert not cpu.gpus and not cpu.nics
    a100 = cluster.node("a100-000")
    assert a100.labels["gpufleet.io/tier"] == "training" and len(a100.nics) == 4


def test_openb_node_list(openb: Path) -> None:
    cluster = load_openb_nodes(openb / "openb_node_list_gpu_node.csv")
    assert len(cluster.nodes) == 1213
    assert cluster.gpu_count == 6212  # the trace's published GPU count
    models = Counter(n.gpus[0].model.name for n in cluster.nodes if n.gpus)
    assert models["openb-g2"] == 549 and models["t4"] == 404


def test_openb_malformed_row_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "nodes.csv"
    path.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1024,2,P100\nn1,lots,1024,2,P100\n")
    with pytest.raises(ParseError, match=r"nodes.csv:3"):
        load_openb_nodes(path)
