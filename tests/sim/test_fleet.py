"""The twin's nodes as agents: the inventory each reports carries its GPUs' MIG layout and power limits, as an agent
reading NVML would; and an hour of every fault class through the door yields the records and incidents it always
has (the agents' path is batched over the fleet for speed: what they push must not change)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from gpufleet.model.observe import Ack, Batch, Finding, MigInfo
from gpufleet.model.wire import decode_batch, encode
from gpufleet.sim.fleet import node_inventory
from gpufleet.sim.scenario import carve_mig
from gpufleet.spec.scenario_spec import MigSpec
from tests.twins import small_twin


def test_the_inventory_carries_the_mig_layout_and_the_power_limit() -> None:
    twin = small_twin(nodes=1, job_nodes=0)
    carve_mig(twin.cluster, [MigSpec(nodes=["n-000"], gpus=[3], devices={"3g.40gb": 1, "2g.20gb": 1})], "test")
    twin.set_power_limit("n-000", 5, 560.0)
    gpus = node_inventory(twin, "n-000").gpus
    mig = gpus[3].mig
    assert gpus[3].mig_mode is True
    expected = [("2g.20gb", 1, 0, 2), ("3g.40gb", 2, 4, 4)]
    assert [(m.profile, m.gi_id, m.start, m.size) for m in mig] == expected
    assert [m.uuid for m in mig] == [i.uuid for i in twin.cluster.node("n-000").gpus[3].mig_instances]
    assert {m.ci_id for m in mig} == {0}
    others = [g for g in gpus if g.index != 3]
    assert all(g.mig_mode is False and g.mig == [] for g in others)
    assert [g.power_limit_w for g in gpus] == [700.0] * 5 + [560.0] + [700.0] * 2
    assert gpus[0].memory_mib == 81559.0


def test_a_gpu_without_mig_reports_mig_unknown() -> None:
    gpus = node_inventory(small_twin(nodes=1, job_nodes=0, model="l40s"), "n-000").gpus
    assert {(g.mig_mode, g.power_limit_w) for g in gpus} == {(None, 350.0)}


def test_the_inventory_passes_the_contract() -> None:
    twin = small_twin(nodes=1, job_nodes=0)
    carve_mig(twin.cluster, [MigSpec(nodes=["n-000"], devices={"1g.10gb": 7})], "test")
    inventory = node_inventory(twin, "n-000")
    back = decode_batch(encode(Batch(1, "n-000", "i", "n-000", 1.0, inventory=inventory))).inventory
    assert back == inventory and len(back.gpus[7].mig) == 7
    assert isinstance(back.gpus[7].mig[0], MigInfo)


EIGHT_NODES = """apiVersion: gpufleet.io/v1
kind: Cluster
metadata: {name: eight}
spec:
  nodePools:
    - {name: dgx, count: 8, gpu: {model: h100-sxm, count: 8}, nics: {count: 8, speedGbps: 400}, nodesPerRack: 4}
  fabric: {topology: rail-optimized-fat-tree, transport: ib, leafRadix: 64, linkSpeedGbps: 400}
"""
AN_HOUR = """apiVersion: gpufleet.io/v1
kind: Scenario
metadata: {{name: hour}}
spec:
  cluster: {cluster}
  duration: 1h
  seed: 7
  workload:
    autoTrainingNodesPerJob: 3
    autoTrainingFill: 1.0
    inference:
      - {{name: chat-api, node: dgx-007, gpus: 2, requestsPerS: 80}}
  faults:
    - {{at: 4m, type: xid, node: dgx-001, gpu: 3, code: 13}}
    - {{at: 8m, type: ecc-dbe, node: dgx-004, gpu: 1}}
    - {{at: 12m, type: thermal-runaway, node: dgx-007, gpu: 5}}
    - {{at: 16m, type: power-brake, node: dgx-002, gpu: 0, duration: 5m}}
    - {{at: 20m, type: pcie-degrade, node: dgx-006, gpu: 5}}
    - {{at: 24m, type: nvlink-errors, node: dgx-003, gpu: 4}}
    - {{at: 28m, type: ib-symbol-errors, node: dgx-005, rail: 3}}
    - {{at: 32m, type: link-flap, node: dgx-000, rail: 1, duration: 4m}}
    - {{at: 36m, type: link-down, node: dgx-004, rail: 6}}
    - {{at: 40m, type: straggler, job: train-0, rank: 12, factor: 1.6, duration: 10m}}
    - {{at: 44m, type: gpu-off-bus, node: dgx-005, gpu: 6}}
    - {{at: 48m, type: idle-gpu, node: dgx-006, gpu: 7}}
    - {{at: 52m, type: driver-mismatch, node: dgx-002}}
    - {{at: 55m, type: nccl-hang, job: train-1, rank: 3}}
"""


def test_an_hour_of_every_fault_through_the_door_yields_what_it_always_has(tmp_path: Path) -> None:
    """Pinned from the agents' path before it was batched over the fleet: every record each node pushed, by kind,
    and every incident (cause, node, entity, severity, state) at `--at 1h`."""
    from gpufleet.cli.core import twin_plane
    from gpufleet.sim.fleet import SimFleet
    from gpufleet.sim.runner import run_headless
    from gpufleet.sim.scenario import build_twin

    cluster = tmp_path / "eight.yaml"
    cluster.write_text(EIGHT_NODES)
    scenario = tmp_path / "hour.yaml"
    scenario.write_text(AN_HOUR.format(cluster=cluster))
    twin, _ = build_twin(scenario)
    plane = twin_plane(twin)
    pushed: Counter[tuple[str, str]] = Counter()

    def transport(batch: Batch) -> Ack:
        for r in batch.records:
            kind = type(r.body).__name__
            pushed[(batch.node, f"{kind}/{r.body.entity.kind.value}" if isinstance(r.body, Finding) else kind)] += 1
        return plane.ingest(batch)

    run_headless(twin, SimFleet(twin), transport, plane.tick, 3600)
    incidents = sorted(
        (r["cause"], r["node"], r["entity"]["text"], r["severity"], r["state"]) for r in plane.incidents(limit=1000)
    )
    assert incidents == [
        ("driver-mismatch", "dgx-002", "node/dgx-002", "critical", "open"),
        ("ecc-dbe", "dgx-004", "gpu/dgx-004/1", "critical", "open"),
        ("gpu-lost", "dgx-005", "gpu/dgx-005/6", "critical", "open"),
        ("gpu-xid", "dgx-001", "gpu/dgx-001/3", "warning", "open"),
        ("ib-link-down", "dgx-004", "port/dgx-004/1/mlx5_6", "critical", "open"),
        ("ib-link-flap", "dgx-000", "port/dgx-000/1/mlx5_1", "critical", "resolved"),
        ("ib-symbol-errors", "dgx-005", "port/dgx-005/1/mlx5_3", "critical", "open"),
        ("nvlink", "dgx-003", "gpu/dgx-003/4", "critical", "open"),
        ("pcie", "dgx-006", "gpu/dgx-006/5", "warning", "open"),
        ("power-brake", "dgx-002", "gpu/dgx-002/0", "warning", "resolved"),
        ("straggler", "dgx-001", "gpu/dgx-001/4", "warning", "resolved"),
        ("thermal", "dgx-007", "gpu/dgx-007/5", "warning", "open"),
    ]
    # a port's findings repeat while its error counters climb, as fast as the twin's fabric makes them: which
    # ports report is pinned here, their count follows the fabric's own model
    ports = {key for key in pushed if key[1] == "Finding/port"}
    assert ports == {("dgx-000", "Finding/port"), ("dgx-004", "Finding/port"), ("dgx-005", "Finding/port")}
    assert {key: n for key, n in pushed.items() if key not in ports} == {
        ("dgx-000", "LinkEvent"): 6,
        ("dgx-001", "Finding/gpu"): 1,
        ("dgx-001", "KernelReport"): 1,
        ("dgx-002", "Finding/gpu"): 10,
        ("dgx-002", "Finding/node"): 3,
        ("dgx-002", "KernelReport"): 1,
        ("dgx-003", "Finding/gpu"): 73,
        ("dgx-003", "KernelReport"): 1,
        ("dgx-004", "Finding/gpu"): 43,
        ("dgx-004", "KernelReport"): 2,
        ("dgx-004", "LinkEvent"): 1,
        ("dgx-005", "Finding/gpu"): 2,
        ("dgx-005", "KernelReport"): 2,
        ("dgx-006", "Finding/gpu"): 84,
        ("dgx-007", "Finding/gpu"): 84,
    }


def test_each_node_s_values_are_cut_from_one_copy_as_they_would_be_copied_one_by_one() -> None:
    import numpy as np

    from gpufleet.sim.fleet import _by_node, _gather

    values = np.arange(5 * 12, dtype=np.float64).reshape(5, 12)
    values[1, 3] = np.nan
    layouts = [
        [slice(0, 4), slice(4, 8), slice(8, 12)],  # runs in order: the node-major copy as it is
        [np.array([0, 5, 6]), np.array([1, 2, 3]), np.array([4, 7, 8]), np.array([9, 10, 11])],  # interleaved
        [slice(0, 8), slice(8, 12)],  # nodes of different widths: one by one
    ]
    for cols in layouts:
        want = [np.ascontiguousarray(values[:, c], dtype="<f8").tobytes() for c in cols]
        assert _by_node(values, cols, _gather(cols, 12)) == want
    assert _gather(layouts[0], 12) == (None, 4) and _gather(layouts[2], 12)[1] == 0
