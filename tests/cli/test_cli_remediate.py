"""`gpufleet remediate ...` run the way a person runs it: the real entry point, real files, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.clirun import Ran
from tests.clirun import gpufleet as run_cli
from tests.slurm_cluster import SlurmCluster, slurm_cluster  # noqa: F401

INCIDENT = """id: xid64-dgx-005-1
cause: row-remap-failure
entity: {kind: gpu, node: dgx-005, index: 1}
severity: critical
summary: Xid 64 row remap failure on dgx-005 GPU 1
action: CONTACT_SUPPORT
xid: 64
serial: "1654321098765"
"""


def gpufleet(home: Path, *args: str) -> Ran:
    return run_cli(*args, env={"GPUFLEET_HOME": str(home)})


@pytest.fixture
def incident_file(tmp_path: Path) -> Path:
    path = tmp_path / "incident.yaml"
    path.write_text(INCIDENT)
    return path


def test_plan_dry_run_apply_and_audit(tmp_path: Path, incident_file: Path) -> None:
    home = tmp_path / "home"
    plan = gpufleet(home, "remediate", "plan", "--incident", str(incident_file), "-o", "json")
    assert plan.returncode == 0, plan.stderr
    [report] = json.loads(plan.stdout)
    assert report["runbook"] == "row-remap-failure" and [s["decision"] for s in report["steps"]] == ["would"] * 3

    dry = gpufleet(home, "remediate", "apply", "--incident", str(incident_file), "--dry-run")
    assert dry.returncode == 0 and "would" in dry.stdout
    applied = gpufleet(home, "remediate", "apply", "--incident", str(incident_file), "-o", "json")
    assert [s["decision"] for s in json.loads(applied.stdout)[0]["steps"]] == ["done"] * 3

    audit = gpufleet(home, "remediate", "audit", "-o", "json")
    entries = json.loads(audit.stdout)
    assert [(e["decision"], e["dry_run"]) for e in entries] == [("would", True)] * 3 + [("done", False)] * 3
    [ticket] = (home / "tickets").glob("*.json")
    assert json.loads(ticket.read_text())["serial"] == "1654321098765"
    table = gpufleet(home, "remediate", "audit", "--limit", "2")
    assert table.returncode == 0 and len(table.stdout.strip().splitlines()) == 3  # header + the last two


def test_resume_continues_a_paused_runbook(tmp_path: Path) -> None:
    home = tmp_path / "home"
    path = tmp_path / "lost.json"
    path.write_text(
        json.dumps({"id": "lost-1", "cause": "gpu-lost", "entity": {"kind": "gpu", "node": "dgx-007", "index": 4},
                    "severity": "critical"})
    )  # fmt: skip
    first = json.loads(gpufleet(home, "remediate", "apply", "--incident", str(path), "-o", "json").stdout)
    assert [s["decision"] for s in first[0]["steps"]] == ["done", "done", "waiting"]
    # The CLI's twin is built fresh each run, so here the node is up: the runbook continues to diag and uncordon.
    again = json.loads(gpufleet(home, "remediate", "resume", "-o", "json").stdout)
    assert [s["decision"] for s in again[0]["steps"]][2:4] == ["passed", "done"]
    assert gpufleet(home, "remediate", "resume").stdout.strip() == "no paused runbooks"


def test_breaker_status_and_reset(tmp_path: Path) -> None:
    home = tmp_path / "home"
    status = gpufleet(home, "remediate", "breaker", "status", "-o", "json")
    assert status.returncode == 0 and json.loads(status.stdout)["state"] == "closed"
    reset = gpufleet(home, "remediate", "breaker", "reset", "--by", "oncall", "--note", "checked")
    assert reset.returncode == 0
    audit = json.loads(gpufleet(home, "remediate", "audit", "-o", "json").stdout)
    assert audit[-1]["decision"] == "breaker-reset" and "oncall" in audit[-1]["reason"]


def test_runbooks_list(tmp_path: Path) -> None:
    out = gpufleet(tmp_path, "remediate", "runbooks")
    assert out.returncode == 0 and "ecc-dbe" in out.stdout and "gpu-lost" in out.stdout
    assert "gpu-xid action=CONTACT_SUPPORT,WORKFLOW_XID_45 severity=warning,info" in out.stdout
    data = json.loads(gpufleet(tmp_path, "remediate", "runbooks", "-o", "json").stdout)
    assert {d["metadata"]["name"] for d in data} >= {"ecc-dbe", "bad-cable", "nccl-hang", "idle-gpu"}


def test_bad_incident_file_is_one_line_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("id: x\ncause: gpu-melted\nentity: {kind: gpu, node: a}\nseverity: critical\n")
    out = gpufleet(tmp_path, "remediate", "plan", "--incident", str(bad))
    assert out.returncode == 2 and "cause" in out.stderr and "Traceback" not in out.stderr
    missing = gpufleet(tmp_path, "remediate", "plan", "--incident", str(tmp_path / "nope.yaml"))
    assert missing.returncode == 2 and "file not found" in missing.stderr


def test_policy_file_validates(tmp_path: Path) -> None:
    pol = tmp_path / "policy.yaml"
    pol.write_text(
        "apiVersion: gpufleet.io/v1\nkind: RemediationPolicy\nmetadata: {name: p}\n"
        "spec:\n  breaker: {threshold: '30%', window: 5m}\n  budget: {perLeaf: 1}\n"
    )
    assert gpufleet(tmp_path, "validate", str(pol)).returncode == 0
    pol.write_text("apiVersion: gpufleet.io/v1\nkind: RemediationPolicy\nmetadata: {name: p}\nspec:\n  breakr: {}\n")
    out = gpufleet(tmp_path, "validate", str(pol))
    assert out.returncode == 2 and "breaker" in out.stderr


@pytest.mark.real
def test_apply_through_real_slurm(
    tmp_path: Path,
    slurm_cluster: SlurmCluster,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = tmp_path / "incident.json"
    path.write_text(
        json.dumps(
            {"id": "ecc-gpu-03", "cause": "row-remap-failure", "entity": {"kind": "gpu", "node": "gpu-03", "index": 2},
             "severity": "critical", "serial": "1650000000042"}
        )
    )  # fmt: skip
    env_home = tmp_path / "home"
    monkeypatch.setenv("SLURM_CONF", slurm_cluster.conf)
    out = gpufleet(env_home, "remediate", "apply", "--incident", str(path), "--backend", "slurm", "-o", "json")
    assert out.returncode == 0, out.stderr
    assert [s["decision"] for s in json.loads(out.stdout)[0]["steps"]] == ["done", "done", "done"]
    node = slurm_cluster.runner.node("gpu-03")
    # the incident named first, as gpufleet marks its own drains
    assert node.state.drained and node.reason == "gpufleet[ecc-gpu-03]: row remap failure"
    slurm_cluster.reset_nodes()
