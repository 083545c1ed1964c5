"""`gpufleet sched plan|explain` on the shipped kubectl capture, through the real entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.clirun import gpufleet
from tests.conftest import REPO_ROOT
from tests.slurm_cluster import SlurmCluster, slurm_cluster  # noqa: F401

SAMPLE = REPO_ROOT / "examples" / "k8s" / "snapshot-h100.json"


def test_plan_on_the_sample_snapshot() -> None:
    out = gpufleet("sched", "plan", "--snapshot", str(SAMPLE), "-o", "json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    placed = {p["pod"]: p for p in data["placements"]}
    # the 4 x 8-GPU gang lands whole, under one leaf group (su2 holds two free nodes and two preemptible ones)
    gang = [p for k, p in placed.items() if k.startswith("research/llama-pretrain-")]
    assert len(gang) == 4 and len({p["node"] for p in gang}) == 4
    assert all(p["node"].startswith("dgx-b") for p in gang)
    assert {e["pod"] for e in data["evictions"]} == {"research/sweep-2-x7k2p", "research/sweep-3-x7k2p"}
    # the LoRA job asked for an H100 NVL with > 90000 MiB: it takes a whole NVLink pair there
    ft = placed["research/ft-lora-5n2xw"]
    assert ft["node"].startswith("nvl-") and ft["gpus"] in ([0, 1], [2, 3])
    failures = {f["pod"]: f["message"] for f in data["failures"]}
    assert failures["research/too-big-9m4tq"] == (
        "0/13 nodes are available: 1 node(s) had untolerated taint {gpufleet.io/maintenance: true}, "
        "1 node(s) had untolerated taint {node.kubernetes.io/unreachable: }, 1 node(s) were unschedulable, "
        "10 Insufficient nvidia.com/gpu. preemption: 0/13 nodes are available: "
        "10 No preemption victims found for incoming pod, 3 Preemption is not helpful for scheduling."
    )
    assert "10 node(s) didn't match Pod's node affinity/selector" in failures["research/needs-b200-k2w9d"]
    # no GPU is handed out twice
    seen = [(p["node"], g) for p in data["placements"] for g in p["gpus"]]
    assert len(seen) == len(set(seen))


def test_plan_table_and_explain() -> None:
    table = gpufleet("sched", "plan", "-f", str(SAMPLE), "--policy", "spread", "--no-preemption")
    assert table.returncode == 0 and "FailedScheduling" in table.stdout and "preemptions" not in table.stdout
    exp = gpufleet("sched", "explain", "--snapshot", str(SAMPLE), "research/ft-lora-5n2xw", "-o", "json")
    data = json.loads(exp.stdout)
    # binpack: the fuller NVL node, whose one free pair the job fills exactly
    assert [f["node"] for f in data["feasible"]] == ["nvl-01", "nvl-02"]
    assert data["rejected"]["node(s) didn't match Pod's node affinity/selector"] == 8
    bad = gpufleet("sched", "explain", "--snapshot", str(SAMPLE), "ghost")
    assert bad.returncode == 2 and "no pod 'ghost'" in bad.stderr and "Traceback" not in bad.stderr


def test_bad_snapshot_and_policy_are_one_line_errors(tmp_path: Path) -> None:
    broken = tmp_path / "s.json"
    broken.write_text(
        '{"kind": "List", "items": [{"kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": '
        '[{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "0.5"}}}]}}]}'
    )
    out = gpufleet("sched", "plan", "--snapshot", str(broken))
    assert out.returncode == 2 and "must be an integer" in out.stderr and "Traceback" not in out.stderr
    pol = gpufleet("sched", "plan", "--snapshot", str(SAMPLE), "--policy", "nope")
    assert pol.returncode == 2 and "unknown policy" in pol.stderr


def test_plan_with_queues(tmp_path: Path) -> None:
    queues = tmp_path / "queues.yaml"
    # Every sample pod is in queue `default`: 19 GPUs run, the urgent pod takes it to 27, and the 32-GPU gang would
    # pass the 40 guaranteed with borrowing switched off.
    queues.write_text("- {name: default, guaranteed: {nvidia.com/gpu: 40}, borrowing: false}\n")
    out = gpufleet("sched", "plan", "-f", str(SAMPLE), "--queues", str(queues), "-o", "json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    messages = [f["message"] for f in data["failures"]]
    assert any("queue default is at its guaranteed 40 nvidia.com/gpu and may not borrow" in m for m in messages)
    bad = tmp_path / "bad.yaml"
    bad.write_text("- {name: q, guarenteed: {}}\n")
    err = gpufleet("sched", "plan", "-f", str(SAMPLE), "--queues", str(bad))
    assert err.returncode == 2 and "guarenteed" in err.stderr and "Traceback" not in err.stderr


def test_plan_with_backfill_reserves_for_the_gang() -> None:
    out = gpufleet("sched", "plan", "-f", str(SAMPLE), "--backfill", "--now", "2026-11-20T09:00:00Z", "-o", "json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    # the sweep pods (6h estimates, started 08:00) free su2 at 14:00: the gang is reserved there, 5 h from now
    assert data["reservation"] == {
        "unit": "research/llama-pretrain",
        "start_in_s": 18000.0,
        "nodes": ["dgx-b01", "dgx-b02", "dgx-b03", "dgx-b04"],
    }
    placed = {p["pod"]: p["node"] for p in data["placements"]}
    assert placed["research/ft-lora-5n2xw"].startswith("nvl-")  # backfilled: 2h job on nodes the gang does not need
    assert data["evictions"] == []


def test_run_without_credentials_is_a_one_line_error(tmp_path: Path) -> None:
    cfg = tmp_path / "kubeconfig"
    cfg.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    out = gpufleet("sched", "run", "--once", "--kubeconfig", str(cfg))
    assert out.returncode == 1 and "cannot load Kubernetes credentials" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.real
def test_submit_gres_jobs_and_see_them_in_jobs_and_nodes(slurm_cluster: SlurmCluster) -> None:  # noqa: F811
    env = {"SLURM_CONF": slurm_cluster.conf}
    run = gpufleet(
        "sched", "submit", "--nodes", "2", "--gpus-per-node", "4", "--model", "h100-sxm", "--name", "pretrain",
        "--exclude", "gpu-01", "--chdir", str(slurm_cluster.jobs_dir), "-o", "json", "--", "sleep", "30", env=env,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    job_id = json.loads(run.stdout)["job_id"]
    try:
        slurm_cluster.wait_for(
            lambda: (
                json.loads(gpufleet("sched", "jobs", "--job", job_id, "-o", "json", env=env).stdout)[0]["state"]
                == "RUNNING"
            ),
            "the job to run",
        )
        [job] = json.loads(gpufleet("sched", "jobs", "--job", job_id, "-o", "json", env=env).stdout)
        assert job["name"] == "pretrain" and len(job["nodes"]) == 2 and "gpu-01" not in job["nodes"]
        assert job["gpus_per_node"] == "gpu:h100:4"
        nodes = {n["name"]: n for n in json.loads(gpufleet("sched", "nodes", "-o", "json", env=env).stdout)}
        assert all(nodes[n]["gpus_used"] == 4 and nodes[n]["gpus_free"] == 4 for n in job["nodes"])
        table = gpufleet("sched", "nodes", env=env)
        assert "GPU TYPE" in table.stdout and "h100" in table.stdout
    finally:
        slurm_cluster.reset_nodes()


def test_submit_needs_a_backend_that_takes_jobs() -> None:
    run = gpufleet("sched", "submit", "--backend", "kubernetes", "--", "true")
    assert run.returncode == 2 and "cannot take jobs" in run.stderr and "Traceback" not in run.stderr
