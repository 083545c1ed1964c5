"""`gpufleet triage pod.json train.log`: a pod OOMKilled by the kernel and a log's CUDA out of memory, side by side,
said as the two different failures they are."""

from __future__ import annotations

import json
from pathlib import Path

from tests.clirun import gpufleet

DATA = Path(__file__).resolve().parent / "data" / "oom"
POD = DATA / "pod_trainer_gpu_oomkilled_constructed.json"
LOG = DATA / "app_torch2_rank3_eks.log"


def test_a_table_ends_with_one_line_that_tells_them_apart() -> None:
    res = gpufleet("triage", str(POD), str(LOG))
    assert res.returncode == 1, res.stderr  # faulty
    out = " ".join(res.stdout.split())  # the line wraps on a narrow terminal
    assert "host-oom" in out and "gpu-oom" in out
    assert (
        f"side by side: pod trainer-0 container trainer: killed by the kernel's OOM killer (host memory, 16Gi limit);"
        f" {LOG}: running out of GPU memory by 11:10:18 on rank 3 is a separate failure."
    ) in out


def test_json_carries_the_line_as_a_note_of_both_reports() -> None:
    res = gpufleet("triage", str(LOG), str(POD), "-o", "json")
    pod_log, pod = json.loads(res.stdout)
    assert pod["findings"][0]["message"].endswith(
        "(host memory, not GPU memory; its 8 nvidia.com/gpu are not involved)"
    )
    assert "(GPU memory, not host memory or a container's memory limit)" in pod_log["findings"][0]["message"]
    for report in (pod_log, pod):
        assert report["notes"][-1].startswith("side by side: pod trainer-0 container trainer: killed by the kernel's")
    alone = json.loads(gpufleet("triage", str(LOG), str(DATA / "app_jax_xla_oom.log"), "-o", "json").stdout)
    assert not any(note.startswith("side by side") for report in alone for note in report["notes"])
