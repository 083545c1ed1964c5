"""`gpufleet sched plan|explain --affinity NODE=FILE`: a node's `nvidia-smi topo -m` (a real DGX H100's) decides which
GPUs a pod asking for RDMA NICs gets, and the plan says how they sit with their NICs."""

from __future__ import annotations

import json
from pathlib import Path

from tests.clirun import gpufleet
from tests.conftest import CAPTURES
from tests.sched.k8s_objects import klist
from tests.sched.test_nics import nic_pod, rdma_node

TOPO = CAPTURES / "affinity" / "topo_m_h100_nccl1453.txt"


def test_plan_and_explain_say_how_gpus_sit_with_their_nics(tmp_path: Path) -> None:
    # GPUs 0-3 busy under a pod holding no NIC: the next pod gets GPUs 4 and 5 with the NICs behind their switches
    body = klist(rdma_node("dgx-a"), nic_pod("busy", 4, node="dgx-a"), nic_pod("train", 2, nics=2))
    snapshot = tmp_path / "snap.json"
    snapshot.write_text(json.dumps(body))
    plain = gpufleet("sched", "plan", "-f", str(snapshot), "-o", "json")
    assert plain.returncode == 0, plain.stderr
    (before,) = json.loads(plain.stdout)["placements"]
    assert before["gpus"] == [4, 5] and "alignment" not in before  # no affinity known: placed as ever
    aware = gpufleet("sched", "plan", "-f", str(snapshot), "--affinity", f"dgx-*={TOPO}", "-o", "json")
    assert aware.returncode == 0, aware.stderr
    (placed,) = json.loads(aware.stdout)["placements"]
    assert placed["gpus"] == [4, 5] and placed["nics"] == ["NIC3", "NIC4"]
    assert placed["alignment"] == "aligned: GPUs 4,5 share PCIe switches with NIC3,NIC4"
    table = gpufleet("sched", "plan", "-f", str(snapshot), "--affinity", f"dgx-a={TOPO}")
    assert "GPU-NIC" in table.stdout and "NIC3,NIC4" in table.stdout
    explained = gpufleet("sched", "explain", "train", "-f", str(snapshot), "--affinity", f"dgx-a={TOPO}", "-o", "json")
    assert explained.returncode == 0, explained.stderr
    assert json.loads(explained.stdout)["feasible"][0]["alignment"].startswith("aligned: GPUs 4,5")


def test_affinity_option_errors_name_the_fix(tmp_path: Path) -> None:
    snapshot = tmp_path / "snap.json"
    snapshot.write_text(json.dumps(klist(rdma_node("dgx-a"))))
    bad = gpufleet("sched", "plan", "-f", str(snapshot), "--affinity", str(TOPO))
    assert bad.returncode != 0 and "is not NODE=FILE" in bad.stderr and "Traceback" not in bad.stderr
    none = gpufleet("sched", "plan", "-f", str(snapshot), "--affinity", f"gpu-*={TOPO}")
    assert none.returncode != 0 and "no node of the snapshot matches" in none.stderr
