"""`gpufleet nccl compare --report` sends its findings to a running control plane."""

from __future__ import annotations

from pathlib import Path

from gpufleet.state import Database
from tests import apiclient
from tests.clirun import gpufleet
from tests.twins import door, small_twin


def test_compare_report_reaches_the_control_plane(corpus: Path, tmp_path: Path) -> None:
    plane, _ = door(small_twin(), db=Database(tmp_path / "s.db"))
    run_file = corpus / "nccl" / "perf" / "h100_oci_bm_gpu_h100_8_2node_roce.txt"
    command = ["nccl", "compare", "--report", str(run_file), "--gpu", "h100-sxm", "--nic-gbps", "200"]
    with apiclient.serving(apiclient.app(plane, secret="tok")) as url:
        env = {"GPUFLEET_SERVER": url, "GPUFLEET_TOKEN": "tok"}
        run = gpufleet(*command, env=env)
        bad = gpufleet(*command, env={**env, "GPUFLEET_TOKEN": "wrong"})
    assert run.returncode == 0, run.stderr
    assert "reported 0 finding(s)" in run.stdout  # a healthy run: nothing to open
    assert bad.returncode == 1 and "refused the findings" in bad.stderr and "Traceback" not in bad.stderr
    audit = [(e.actor, e.action, e.decision) for e in plane.store.audit_log.entries()]  # type: ignore[attr-defined]
    assert audit[0] == ("admin", "nccl-findings", "0 finding(s)")
    assert audit[1][:2] == ("anonymous", "POST /api/v1/nccl-findings") and "not valid" in audit[1][2]
