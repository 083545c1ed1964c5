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
