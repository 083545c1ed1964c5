"""Node-local remedies through the node's own agent, on the twin end to end: the control plane queues the GPU reset
and the diagnostics, the twin's agent pulls them with its push and carries them out, the runbook goes on with each
result, and the node returns to service on the proof; a GPU reset a third time in seven days goes to RMA instead."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpufleet.agent.actions import Commands, NodeActionRunner, NodeFacts
from gpufleet.model import RootCause
from gpufleet.model.actions import NodeActionKind
from gpufleet.remediate import FileTicketSink, RemediationStore, Remediator
from gpufleet.sim.faults import InjectedFault
from gpufleet.sim.runner import run_headless
from gpufleet.spec.scenario_spec import FaultType
from gpufleet.state import Database
from tests.remediate.helpers import incident, policy, remediator
from tests.twins import door, small_twin

NOW = 1_800_000_000.0
PASS_R2 = Path(__file__).parents[1] / "agent" / "data" / "dcgmi_diag_r2_pass.txt"


def through_agents(plane: Any) -> None:
    plane.remediation.remediator.policy.spec.node_actions.route = "agent"


def test_a_dbe_is_reset_and_checked_through_the_nodes_agent() -> None:
    twin = small_twin(faults=[InjectedFault(0, FaultType.ecc_dbe, 30.0, node="n-000", gpu=5)])
    plane, fleet = door(twin, remediation="on")
    through_agents(plane)
    run_headless(twin, fleet, plane.ingest, plane.tick, 900)
    [inc] = [i for i in plane.book.incidents.values() if i.cause is RootCause.ecc_dbe]
    steps = {s.step: s for s in plane.remediation.remediator.store.audit_entries(incident=inc.id) if s.step}
    actions = [r.action for r in plane.node_actions.table.listed(incident=inc.id)]
    assert [(a.kind.value, a.gpu) for a in actions] == [("diag", 5), ("reset-gpu", 5)], actions
    rows = {r.action.kind.value: r for r in plane.node_actions.table.listed(incident=inc.id)}
    assert rows["reset-gpu"].state == "done" and "GPU 5 on n-000 reset" in rows["reset-gpu"].result.detail
    assert rows["diag"].state == "passed"
    audit = [(e.action, e.decision) for e in plane.store.audit_log.entries(incident=inc.id)]
    assert ("reset-gpu", "queued") in audit and ("agent-reset-gpu", "done") in audit
    assert ("uncordon", "done") in audit, audit
    assert "n-000" not in plane.backend.unavailable()
    # returned to service by proof: resolved, the check's words in the audit log
    assert plane.book.incidents[inc.id].state.value == "resolved"
    [why] = [e.reason for e in plane.store.audit_log.entries(incident=inc.id) if e.action == "resolved"]
    assert why == f"returned to service after diag passed: {inc.id}.diag: diag r2 PASS on 8 GPUs"
    assert steps


def test_a_gpu_reset_the_third_time_in_seven_days_goes_to_rma_instead(tmp_path: Path) -> None:
    twin = small_twin(job_nodes=0)
    rem = remediator(twin, tmp_path, policy(rateLimits={}))
    decisions = []
    for k in range(3):
        twin.time = k * 2 * 86400.0  # every other day
        inc = incident(RootCause.ecc_dbe, "n-001", gpu=4, xid=48, action="WORKFLOW_XID_48", ident=f"dbe-{k}")
        inc.id = f"INC-{k + 1}"
        report = rem.apply(inc)
        decisions.append({s.step: s.decision for s in report.steps})
        rem.apply(inc)  # the rest of its runbook (the node back, the diag, the return to service)
    assert decisions[0]["reset"] == decisions[1]["reset"] == "done"
    third = decisions[2]
    assert third["reset"] == "escalated" and "diag" not in third
    [rma] = [t for t in (tmp_path / "tickets").iterdir() if "INC-3" in t.name]
    body = json.loads(rma.read_text())
    assert body["kind"] == "rma" and "needs reset-gpu a third time in 7 days (before: INC-1, INC-2)" in body["message"]
    # a week later the count starts again
    twin.time = 12 * 86400.0
    inc = incident(RootCause.ecc_dbe, "n-001", gpu=4, xid=48, action="WORKFLOW_XID_48", ident="dbe-late")
    inc.id = "INC-9"
    assert {s.step: s.decision for s in rem.apply(inc).steps}["reset"] == "done"


def test_kubernetes_resets_through_the_nodes_agent(tmp_path: Path, state_db: Database) -> None:
    pytest.importorskip("kubernetes.client")
    from gpufleet.control.node_actions import NodeActionQueue
    from gpufleet.integrations.kubernetes.remediation import KubernetesBackend
    from gpufleet.model.observe import SCHEMA_VERSION, Batch
    from tests.integrations.kubernetes.test_remediation import _cluster

    api = _cluster()
    backend = KubernetesBackend(api, sleep=lambda s: None, clock=lambda: NOW)
    queue = NodeActionQueue(state_db, clock=lambda: NOW)
    rem = Remediator(
        backend, RemediationStore(state_db), policy(rateLimits={}, budget={"cluster": "50%"}),
        tickets=FileTicketSink(tmp_path / "t"), node_agents=queue,
    )  # fmt: skip
    marks = tmp_path / "ran"
    runner = NodeActionRunner(
        tmp_path / "agent", "gpu-1", NodeFacts(gpus=lambda: list(range(8))),
        Commands({NodeActionKind.reset_gpu: f"sh -c 'echo reset {{gpu}} >> {marks}'",
                  NodeActionKind.diag: f"cat {PASS_R2}"}, None),
        clock=lambda: NOW,
    )  # fmt: skip

    def push() -> None:  # the node's agent pushes: results in, actions out
        ack = queue.exchange(
            Batch(v=SCHEMA_VERSION, agent="gpu-1", incarnation="i", node="gpu-1", sent=NOW, can=runner.can,
                  results=runner.results()), None)  # fmt: skip
        runner.acknowledged(ack[0])
        runner.offer(ack[1])
        runner.join(10)

    push()  # heard from: the queue knows what the agent on gpu-1 carries out
    inc = incident(RootCause.ecc_dbe, "gpu-1", gpu=2, xid=48, action="WORKFLOW_XID_48")
    first = {s.step: s.decision for s in rem.apply(inc).steps}
    assert first["reset"] == "queued"
    for _ in range(4):
        push()
        push()
        report = rem.apply(inc)
    steps = {s.step: (s.decision, s.reason) for s in report.steps}
    assert marks.read_text() == "reset 2\n"
    assert steps["reset"][0] == "done-earlier" and steps["diag"][0] == "done-earlier"
    assert steps["uncordon"][0] == "done-earlier"
    assert not api.nodes["gpu-1"].spec.unschedulable
