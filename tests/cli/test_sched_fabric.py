"""`gpufleet sched plan --fabric`: a gang keeps off the nodes of the leaf the captured fabric shows short of an
uplink (ibsim's fat tree, leaf1's port 35 unlinked)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.clirun import gpufleet
from tests.conftest import CAPTURES
from tests.sched.k8s_objects import klist, knode, kpod

CAPTURE = CAPTURES / "ibsim" / "ibnetdiscover.txt"


def test_plan_keeps_a_gang_off_a_degraded_leaf(tmp_path: Path) -> None:
    group = {"scheduling.x-k8s.io/pod-group": "g"}
    body = klist(*[knode(f"node0{i}") for i in range(1, 9)], *[kpod(f"g-{i}", gpus=8, labels=group) for i in range(2)])
    snapshot = tmp_path / "snap.json"
    snapshot.write_text(json.dumps(body))
    plain = gpufleet("sched", "plan", "-f", str(snapshot), "-o", "json")
    aware = gpufleet("sched", "plan", "-f", str(snapshot), "--fabric", str(CAPTURE), "-o", "json")
    assert plain.returncode == 0 and aware.returncode == 0, aware.stderr
    assert sorted(p["node"] for p in json.loads(plain.stdout)["placements"]) == ["node01", "node02"]
    data = json.loads(aware.stdout)
    assert sorted(p["node"] for p in data["placements"]) == ["node03", "node04"]
    assert data["fabric"] == {
        "leaf1": {"state": "degraded", "uplink_capacity": 0.5, "reasons": ["1 of 2 uplinks missing (it has 1)"]}
    }
    table = gpufleet("sched", "plan", "-f", str(snapshot), "--fabric", str(CAPTURE))
    assert "fabric: leaf1 is degraded (1 of 2 uplinks missing (it has 1))" in table.stdout


def _plan(tmp_path: Path, members: int, *extra: str) -> dict:  # type: ignore[type-arg]
    group = {"scheduling.x-k8s.io/pod-group": "g"}
    pods = [kpod(f"g-{i}", gpus=8, labels=group) for i in range(members)]
    snapshot = tmp_path / "snap.json"
    snapshot.write_text(json.dumps(klist(*[knode(f"node0{i}") for i in range(1, 9)], *pods)))
    run = gpufleet("sched", "plan", "-f", str(snapshot), "--fabric", str(CAPTURE), "-o", "json", *extra)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)  # type: ignore[no-any-return]


def test_a_gang_under_one_leaf_is_predicted_at_the_nccl_models_figure(tmp_path: Path) -> None:
    gang = _plan(tmp_path, 2)["gangs"]["default/g"]
    assert gang["nodes"] == ["node03", "node04"] and gang["leaves"] == ["leaf2"] and gang["switch_hops"] == 1
    ar = gang["allreduce"]
    assert ar["nodes"] == 2 and ar["gpus_per_node"] == 8 and ar["bytes"] == 1 << 30
    assert ar["time_us"] == ar["one_leaf_time_us"] > 0 and ar["bandwidth_share"] == 1.0


def test_a_gang_across_leaves_pays_the_spine_hops_and_the_leaves_oversubscription(tmp_path: Path) -> None:
    # six members: leaf2's two nodes and the four under leaf3+leaf4 (leaf1 is degraded); leaf3 has four host
    # cables and two uplinks (2:1), so the cross-leaf part of the all-reduce runs at half the NICs' rate
    gang = _plan(tmp_path, 6, "--allreduce-size", "256M")["gangs"]["default/g"]
    assert gang["nodes"] == [f"node0{i}" for i in range(3, 9)] and gang["switch_hops"] == 3
    assert gang["spines"] == ["spine1", "spine2"] and gang["leaves"] == ["leaf2", "leaf3", "leaf4"]
    ar = gang["allreduce"]
    assert ar["bytes"] == 256 << 20 and ar["oversubscription"] == 2.0 and ar["bandwidth_share"] == 0.5
    assert ar["extra_latency_us"] > 0 and ar["time_us"] > 1.5 * ar["one_leaf_time_us"]
