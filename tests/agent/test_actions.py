"""The agent's node actions: each begun at most once across restarts (the journal), its node's preconditions checked
when it acts, real commands run and their output kept, results kept until acknowledged."""

from __future__ import annotations

import time
from pathlib import Path

from gpufleet.agent.actions import Commands, NodeActionRunner, NodeFacts
from gpufleet.model.actions import ActionResult, NodeAction, NodeActionKind, Outcome

NOW = 1_800_000_000.0


def runner(
    tmp_path: Path,
    *,
    held: dict[int, str] | None = None,
    boot: str = "boot-a",
    nccl: str | None = None,
    nvlink: str | None = None,
    model: str = "",
    **commands: str,
) -> NodeActionRunner:
    given = {NodeActionKind(k.replace("_", "-")): v for k, v in commands.items()}
    facts = NodeFacts(holders=lambda: dict(held or {}), gpus=lambda: list(range(8)), gpu_model=lambda: model)
    return NodeActionRunner(
        tmp_path / "actions", "n1", facts, Commands(given, nccl, nvlink), clock=lambda: NOW, boot=lambda: boot,
        sleep=lambda _s: None,
    )  # fmt: skip


def reset(action_id: str = "INC-1.reset", gpu: int = 3, node: str = "n1") -> NodeAction:
    return NodeAction(action_id, NodeActionKind.reset_gpu, node, NOW + 900, incident="INC-1", gpu=gpu)


def wait(r: NodeActionRunner) -> None:
    r.join(10.0)


def test_a_reset_runs_its_command_once_and_reports_its_output(tmp_path: Path) -> None:
    marks = tmp_path / "ran"
    r = runner(tmp_path, reset_gpu=f"sh -c 'echo GPU {{gpu}} reset; echo x >> {marks}'")
    assert r.can == [NodeActionKind.reset_gpu]
    r.offer([reset()])
    wait(r)
    [result] = r.results()
    assert result.outcome is Outcome.done and result.output.strip() == "GPU 3 reset"
    r.offer([reset()])  # handed again before the control plane took the result
    wait(r)
    assert marks.read_text() == "x\n"
    r.acknowledged(["INC-1.reset"])
    assert r.results() == []
    # a new agent on the same data directory: the id is known, never begun again
    again = runner(tmp_path, reset_gpu=f"sh -c 'echo x >> {marks}'")
    again.offer([reset()])
    wait(again)
    assert marks.read_text() == "x\n" and again.results() == []


def test_a_pod_holding_the_gpu_refuses_the_reset(tmp_path: Path) -> None:
    r = runner(tmp_path, held={3: "team-a/train-0"}, reset_gpu="true")
    r.offer([reset()])
    wait(r)
    [result] = r.results()
    assert result.outcome is Outcome.refused and "team-a/train-0" in result.detail
    r.offer([reset("INC-1.reset#2", gpu=5)])  # GPU 5 is free
    wait(r)
    assert {x.id: x.outcome for x in r.results()}["INC-1.reset#2"] is Outcome.done


def test_another_nodes_action_is_never_acted_on(tmp_path: Path) -> None:
    r = runner(tmp_path, reset_gpu="true")
    r.offer([reset(node="n2")])
    wait(r)
    assert r.results() == []


def test_a_failing_command_is_a_failure_with_its_last_line(tmp_path: Path) -> None:
    r = runner(tmp_path, reset_gpu="sh -c 'echo Unable to reset GPU 00000000:3B:00.0 because it is in use >&2; exit 3'")
    r.offer([reset()])
    wait(r)
    [result] = r.results()
    assert result.outcome is Outcome.failed and "exited 3" in result.detail and "in use" in result.detail


def test_an_action_begun_when_the_agent_stopped_is_interrupted_not_run_again(tmp_path: Path) -> None:
    r = runner(tmp_path, reset_gpu="true")
    r.journal.write({"id": "INC-1.reset", "state": "begun", "started": NOW, "boot_id": "boot-a",
                     "action": {"id": "INC-1.reset", "kind": "reset-gpu", "node": "n1", "deadline": NOW + 900,
                                "gpu": 3}})  # fmt: skip
    again = runner(tmp_path, reset_gpu="true")
    [result] = again.results()
    assert result.outcome is Outcome.interrupted and "whether it took effect is unknown" in result.detail


def test_a_reboot_is_done_when_the_agent_comes_back_under_a_new_boot(tmp_path: Path) -> None:
    r = runner(tmp_path, reboot_node="true")
    reboot = NodeAction("INC-2.reboot", NodeActionKind.reboot_node, "n1", NOW + 1800, incident="INC-2")
    # the command returns and the node goes down: the agent never writes a result before it does
    begun = {"id": reboot.id, "kind": "reboot-node", "node": "n1", "deadline": NOW + 1800}
    r.journal.write({"id": reboot.id, "state": "begun", "started": NOW, "boot_id": "boot-a", "action": begun})
    after = runner(tmp_path, reboot_node="true", boot="boot-b")
    [result] = after.results()
    assert result.outcome is Outcome.done and "rebooted" in result.detail


def test_a_reboot_that_never_took_the_node_down_fails(tmp_path: Path) -> None:
    r = runner(tmp_path, reboot_node="true")
    r.offer([NodeAction("INC-2.reboot", NodeActionKind.reboot_node, "n1", NOW + 1800)])
    wait(r)
    [result] = r.results()
    assert result.outcome is Outcome.failed and "did not go down" in result.detail


def test_a_reboot_waits_for_pods_to_leave(tmp_path: Path) -> None:
    r = runner(tmp_path, held={0: "team-a/serve-0"}, reboot_node="true")
    r.offer([NodeAction("INC-2.reboot", NodeActionKind.reboot_node, "n1", NOW + 1800)])
    wait(r)
    [result] = r.results()
    assert result.outcome is Outcome.refused and "team-a/serve-0" in result.detail


def test_an_expired_action_is_not_begun(tmp_path: Path) -> None:
    r = runner(tmp_path, reset_gpu="true")
    r.offer([NodeAction("INC-1.reset", NodeActionKind.reset_gpu, "n1", NOW - 1, gpu=3)])
    wait(r)
    assert r.results()[0].outcome is Outcome.expired


def test_a_kind_without_a_command_here_is_unsupported(tmp_path: Path) -> None:
    r = runner(tmp_path, reset_gpu="no-such-program-anywhere -r")
    assert r.can == []
    r.offer([reset()])
    wait(r)
    assert r.results()[0].outcome is Outcome.unsupported


TESTS = Path(__file__).parents[1]


def test_diag_judges_real_dcgmi_output(tmp_path: Path) -> None:
    passed = PASS_R2
    r = runner(tmp_path, diag=f"cat {passed}")
    r.offer([NodeAction("INC-3.diag", NodeActionKind.diag, "n1", NOW + 3600, level=2)])
    wait(r)
    [result] = r.results()
    assert result.outcome is Outcome.passed, result.detail
    assert result.detail.startswith("dcgmi diag -r 2: Pass") and "Diagnostic" in result.output


def test_diag_failure_names_the_failing_test(tmp_path: Path) -> None:
    failed = TESTS / "corpus/dcgmi_diag_fail_02_r2_memory_thermal_stas00.txt"
    r = runner(tmp_path, diag=f"cat {failed}")
    r.offer([NodeAction("INC-3.diag", NodeActionKind.diag, "n1", NOW + 3600, level=2)])
    wait(r)
    [result] = r.results()
    assert result.outcome is Outcome.failed and "Fail" in result.detail, result.detail


PASS_R2 = Path(__file__).parent / "data" / "dcgmi_diag_r2_pass.txt"
NCCL = TESTS / "corpus/nccl/perf/a100_azure_ndv4_1node_8gpu.txt"
NVLINK_DOWN = TESTS / "corpus/nvlink_status_all_inactive_aznhc.txt"


def diag2(r: NodeActionRunner, gpu: int | None = None) -> ActionResult:
    r.offer([NodeAction("INC-3.diag", NodeActionKind.diag, "n1", NOW + 3600, level=2, gpu=gpu)])
    wait(r)
    [result] = r.results()
    return result


def test_the_return_to_service_proof_runs_an_nccl_all_reduce_across_the_gpus(tmp_path: Path) -> None:
    # the A100 node's own nccl-tests run, judged against what eight A100s should reach
    result = diag2(runner(tmp_path, diag=f"cat {PASS_R2}", nccl=f"sh -c 'cat {NCCL} # -g {{gpus}}'",
                          model="NVIDIA A100-SXM4-80GB"))  # fmt: skip
    assert result.outcome is Outcome.passed
    assert "NCCL all-reduce across 8 GPUs: healthy" in result.detail and "231.58" in result.output


def test_an_all_reduce_short_of_the_nodes_bandwidth_fails_the_proof(tmp_path: Path) -> None:
    # the same run on a node whose GPUs should reach H100 speed: half of it is a slow link
    result = diag2(runner(tmp_path, diag=f"cat {PASS_R2}", nccl=f"cat {NCCL}", model="NVIDIA H100 80GB HBM3"))
    assert result.outcome is Outcome.failed and "underperforming" in result.detail


def test_no_loopback_while_pods_hold_gpus(tmp_path: Path) -> None:
    # the faulty GPU 3 is tested alone while GPU 7 keeps serving
    result = diag2(runner(tmp_path, held={7: "ml/serve-0"}, diag=f"cat {PASS_R2}", nccl=f"cat {NCCL}"), gpu=3)
    assert result.outcome is Outcome.passed and "NCCL loopback not run: pods hold GPUs (ml/serve-0)" in result.detail


def test_a_diag_pass_with_an_nvlink_down_is_not_trusted(tmp_path: Path) -> None:
    result = diag2(runner(tmp_path, diag=f"cat {PASS_R2}", nvlink=f"cat {NVLINK_DOWN}"))
    assert result.outcome is Outcome.failed and "GPU 6" in result.detail and "all NVLinks are inactive" in result.detail


def test_the_journal_is_written_before_the_command_runs(tmp_path: Path) -> None:
    seen: list[str] = []
    r = runner(tmp_path, reset_gpu="true")

    def run(argv: list[str], timeout: float) -> tuple[int, str]:
        seen.append(str(r.journal.read("INC-1.reset")["state"]))
        return 0, ""

    r.run = run
    r.carry_out(reset())
    assert seen == ["begun"]
    assert time.time() > 0
