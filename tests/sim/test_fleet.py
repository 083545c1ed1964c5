"""The twin's nodes as agents: the inventory each reports carries its GPUs' MIG layout and power limits, as an agent
reading NVML would."""

from __future__ import annotations

from gpufleet.model.observe import Batch, MigInfo
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
