"""The Slurm scheduler view on output captured from a real Slurm 22.05 cluster: four nodes full of 8-GPU jobs, and
jobs pending behind them for every reason the capture shows (data/SOURCE.txt)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from gpufleet.errors import ParseError
from gpufleet.integrations.slurm.client import SlurmNode, parse_scontrol_nodes
from gpufleet.integrations.slurm.queue import (
    SQUEUE_QUEUE_ARGS,
    QueueJob,
    SlurmQueueReader,
    explain,
    parse_queue,
    scheduler_report,
    tres_gpus,
)

DATA = Path(__file__).parent / "data"
SUBMITTED = datetime.fromisoformat("2026-11-24T03:11:11").timestamp()  # squeue prints local time, as read back
NOW = SUBMITTED + 600


def _jobs() -> dict[str, QueueJob]:
    return {j.job_id: j for j in parse_queue((DATA / "squeue_queue.txt").read_text())}


def test_gpus_asked_for_per_node_per_job_per_task_and_per_array_task() -> None:
    jobs = _jobs()
    assert jobs["5"].name == "big|job one"  # a '|' in the name, which comes last
    gpus = {k: j.gpus for k, j in jobs.items()}
    assert gpus == {
        "1": 8, "2": 8, "3": 8, "4": 8,  # --gres=gpu:h100:8 on one node each
        "5": 8, "6": 4,  # --gpus=4 is per job
        "7": 4,  # --gres=gpu:2 on two nodes
        "8": 1, "9": 3,  # --gpus-per-task=1 with three tasks
        "10": 1, "11_[1-3]": 3,  # three waiting array tasks of one GPU each
        "12": 1,
    }  # fmt: skip
    five = jobs["5"]
    assert five.state == "PENDING" and five.partitions == ("gpu",) and five.account == ""
    assert five.submitted == SUBMITTED and five.priority == 4294901755
    assert jobs["10"].reason == "ReqNodeNotAvail, UnavailableNodes:gpu-04"


@pytest.mark.parametrize(
    ("text", "gpus"),
    [
        ("gres:gpu:h100:8", 8),
        ("gres/gpu:h100=8", 8),
        ("gres/gpu=4", 4),
        ("gpu:2", 2),
        ("gres:gpu", 1),
        ("cpu=4,gres/gpu:a100=2,gres/gpu:h100=1", 3),
        ("gres:nvme:1", 0),
        ("N/A", 0),
        ("(null)", 0),
    ],
)
def test_tres_forms_of_old_and_new_slurm(text: str, gpus: int) -> None:
    assert tres_gpus(text) == gpus


def test_the_report_names_each_reason_and_the_partitions_use() -> None:
    nodes = parse_scontrol_nodes((DATA / "scontrol_show_node_queue.txt").read_text())
    report = scheduler_report(list(_jobs().values()), nodes, NOW)
    assert report.manager == "slurm" and report.time == NOW
    by_name = {p.name: p for p in report.pending}
    assert list(by_name) == [
        "5 big|job one", "6 wrap", "7 wrap", "8 wrap", "9 wrap", "10 wrap", "11_[1-3] wrap", "12 wrap",
    ]  # fmt: skip
    big = by_name["5 big|job one"]
    assert (big.queue, big.gpus, big.reason, big.since) == ("gpu", 8, "Resources", SUBMITTED)
    assert big.message == (
        "waiting for resources: not enough free nodes or GPUs for it now "
        "(partition gpu: 32 of 32 GPUs allocated; it asks for 8)"
    )
    assert by_name["6 wrap"].reason == "Priority" and "higher-priority" in by_name["6 wrap"].message
    drained = by_name["10 wrap"]
    assert drained.reason == "ReqNodeNotAvail" and drained.message.endswith("; unavailable nodes: gpu-04")
    held = by_name["12 wrap"]
    assert held.reason == "JobHeldUser" and "scontrol release" in held.message and held.priority == 0
    (gpu,) = report.queues
    assert (gpu.name, gpu.gpus_used, gpu.quota, gpu.running, gpu.pending) == ("gpu", 32, 32, 4, 8)
    assert gpu.gpus_pending == 8 + 4 + 4 + 1 + 3 + 1 + 3 + 1 and gpu.borrowing_limit is None


@pytest.mark.parametrize(
    ("reason", "words"),
    [
        ("QOSMaxGRESPerUser", "its QOS's limit on GRES (GPUs) per user is reached"),
        ("QOSMaxGRESPerJob", "it asks for more GRES (GPUs) per job than its QOS allows"),
        ("AssocGrpGRES", "its account has reached its aggregate limit on GRES (GPUs)"),
        ("AssocGrpGRESMinutes", "its account has reached its aggregate limit on GRES (GPUs)-minutes"),
        ("QOSMaxJobsPerUserLimit", "its QOS's limit on running jobs per user is reached"),
        ("AssocMaxCpuPerJobLimit", "it asks for more CPUs per job than its account allows"),
        ("Resources", "waiting for resources: not enough free nodes or GPUs for it now"),
        ("SomethingNew", "pending (SomethingNew)"),
    ],
)
def test_reasons_in_words(reason: str, words: str) -> None:
    assert explain(reason) == words


def test_a_line_that_is_not_squeues_is_a_parse_error() -> None:
    with pytest.raises(ParseError, match="squeue line 1: expected 14"):
        parse_queue("1|PENDING|gpu\n")
    with pytest.raises(ParseError, match="NumNodes 'x' is not a count"):
        parse_queue("5|N/A|PENDING|gpu|(null)|gres:gpu:8|N/A|N/A|x|1|2026-11-24T03:11:11|1|Resources|a|\n")


class _Runner:
    """Answers the reader's two commands with the captured outputs."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    def run(self, args: tuple[str, ...]) -> str:
        self.calls.append(tuple(args))
        return (DATA / "squeue_queue.txt").read_text()

    def nodes(self) -> list[SlurmNode]:
        return parse_scontrol_nodes((DATA / "scontrol_show_node_queue.txt").read_text())


def test_the_reader_runs_squeue_with_the_documented_fields() -> None:
    runner = _Runner()
    report = SlurmQueueReader(runner, clock=lambda: NOW).read()  # type: ignore[arg-type]
    assert runner.calls == [SQUEUE_QUEUE_ARGS] and len(report.pending) == 8
    assert "-O" in SQUEUE_QUEUE_ARGS and SQUEUE_QUEUE_ARGS[-1].endswith("Reason:|,Name:|")
