"""The verdict on one validation step of one node: a pure function of the pod and its events as kubectl prints them
(`kubectl get pod -o json`, `kubectl get events -o json` items) and of the step's output.

The output is read by the readers `gpufleet triage` uses, never re-parsed here: nvidia-smi's table by the triage
reader (a driver it cannot reach, a GPU lost, uncorrectable ECC ... are its findings), nccl-tests by nccl.compare's
judge_run (a run that stopped, corrupted data, bus bandwidth far below what the model expects of the GPUs it names,
or below the run's own peak and the PCIe floor where the model cannot size it). vectorAdd passes only with its own
"Test PASSED" line (CUDA samples' vectorAdd prints it after checking every element; on a failed CUDA call it prints
"Failed to ... (error code ...)!" and exits non-zero).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from gpufleet.deploy.validate import MARK

Status = Literal["PASS", "FAIL"]
IMAGE_PULL = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"})
# Waiting reasons from which a container never starts without a change (an image pull may be retried, but the
# retries only back off: each says what is wrong now)
STUCK = IMAGE_PULL | {"CreateContainerConfigError", "CreateContainerError", "RunContainerError"}
# Warning events that say why a pod did not start (the sandbox: a missing runtime handler such as "nvidia")
TELLING_EVENTS = ("FailedCreatePodSandBox", "FailedScheduling", "Failed", "FailedMount", "FailedCreate", "BackOff")
NOT_FOUND = re.compile(r"(?:command not found|not found|No such file or directory)", re.IGNORECASE)
VECTORADD_ERROR = re.compile(r"^(?:Failed to .*\(error code .*\)!?|Result verification failed at element \d+!?)\s*$")
TAIL_LINES = 5


@dataclass(frozen=True, slots=True)
class StepResult:
    node: str
    step: str  # "cuda", "nccl", or "node" for a node that could not run them
    status: Status
    reason: str  # why it failed, or what it showed when it passed
    evidence: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "step": self.step,
            "status": self.status,
            "reason": self.reason,
            "evidence": list(self.evidence),
        }


@dataclass(slots=True)
class NodeReport:
    node: str
    steps: list[StepResult] = field(default_factory=list)

    @property
    def status(self) -> Status:
        return "PASS" if self.steps and all(s.status == "PASS" for s in self.steps) else "FAIL"

    def as_dict(self) -> dict[str, Any]:
        return {"node": self.node, "status": self.status, "steps": [s.as_dict() for s in self.steps]}


def reports(results: list[StepResult]) -> list[NodeReport]:
    """Results grouped by node, in the order the nodes first appear."""
    out: dict[str, NodeReport] = {}
    for result in results:
        out.setdefault(result.node, NodeReport(result.node)).steps.append(result)
    return list(out.values())


# --- the output ---------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Section:
    lines: list[str] = field(default_factory=list)
    exit_code: int | None = None  # None: the section never reached its end marker

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def where(log: str) -> dict[str, str]:
    """The `=== gpufleet-validate where node=... gpus=...` line: where the step ran ({} if it printed none)."""
    for line in log.splitlines():
        if line.startswith(f"{MARK} where "):
            return dict(w.partition("=")[::2] for w in line[len(MARK) + 7 :].split() if "=" in w)
    return {}


def sections(log: str) -> dict[str, Section]:
    """The scripts' marked sections (`=== gpufleet-validate NAME` ... `=== gpufleet-validate NAME exit N`)."""
    out: dict[str, Section] = {}
    current: Section | None = None
    for raw in log.splitlines():
        line = raw.rstrip("\r")
        if line.startswith(MARK + " "):
            words = line[len(MARK) + 1 :].split()
            if words and words[0] == "where":
                continue
            if len(words) == 3 and words[1] == "exit" and words[2].lstrip("-").isdigit():
                if words[0] in out:
                    out[words[0]].exit_code = int(words[2])
                current = None
            elif len(words) == 1:
                current = out[words[0]] = Section()
            continue
        if current is not None:
            current.lines.append(line)
    return out


def _tail(text: str, n: int = TAIL_LINES) -> tuple[str, ...]:
    return tuple(line for line in text.strip().splitlines()[-n:] if line.strip())


def _missing_tool(section: Section, tool: str, fix: str) -> str | None:
    if section.exit_code in (126, 127) or (
        section.exit_code and NOT_FOUND.search(section.text) and tool in section.text
    ):
        return f"{tool} not found where the step ran: {fix}"
    return None


def judge_cuda(node: str, log: str) -> StepResult:
    """nvidia-smi's table and vectorAdd's output, as the cuda step prints them."""
    from gpufleet.parsers.nvidia.smi_table import parse_table
    from gpufleet.triage.readers.smi import read_nvidia_smi_table

    found = sections(log)
    smi, vector = found.get("nvidia-smi"), found.get("vectorAdd")
    if smi is None:
        return StepResult(node, "cuda", "FAIL", "the step printed none of its test output", _tail(log))
    missing = _missing_tool(
        smi,
        "nvidia-smi",
        "in a container, the NVIDIA container toolkit did not mount the driver's utilities (is the pod on NVIDIA's "
        "runtime: RuntimeClass nvidia, or the toolkit set as containerd's default?); on a bare node, no driver is "
        "installed",
    )
    if missing:
        return StepResult(node, "cuda", "FAIL", missing, _tail(smi.text))
    triage = read_nvidia_smi_table(smi.lines, f"nvidia-smi on {node}")
    worst = triage.ordered()[0] if triage.findings else None
    if triage.verdict == "faulty" and worst is not None:
        return StepResult(
            node, "cuda", "FAIL", f"nvidia-smi: {worst.message}", tuple(worst.evidence) or _tail(smi.text)
        )
    table = parse_table(smi.text, source=f"nvidia-smi on {node}", strict=False)
    if smi.exit_code not in (0, None) or not table.gpus:
        why = f"exit {smi.exit_code}" if smi.exit_code not in (0, None) else "no GPU in its table"
        return StepResult(node, "cuda", "FAIL", f"nvidia-smi failed ({why})", _tail(smi.text))
    if vector is None:
        return StepResult(node, "cuda", "FAIL", "vectorAdd did not run after nvidia-smi", _tail(log))
    missing = _missing_tool(vector, "vectorAdd", "run the CUDA samples' vectorAdd image (--vectoradd-image)")
    if missing:
        return StepResult(node, "cuda", "FAIL", missing, _tail(vector.text))
    passed = any(line.strip() == "Test PASSED" for line in vector.lines)
    errors = tuple(line.strip() for line in vector.lines if VECTORADD_ERROR.match(line.strip()))
    if not passed or errors or vector.exit_code not in (0, None):
        why = f"vectorAdd failed: {errors[0]}" if errors else '"Test PASSED" missing from vectorAdd\'s output'
        if vector.exit_code not in (0, None):
            why += f" (exit {vector.exit_code})"
        return StepResult(node, "cuda", "FAIL", why, errors or _tail(vector.text))
    names = sorted({g.product_name or "a GPU" for g in table.gpus})
    shown = f"{len(table.gpus)} GPU ({', '.join(names)})" if len(table.gpus) == 1 else f"{len(table.gpus)} GPUs"
    versions = f", driver {table.driver_version}, CUDA {table.cuda_version}" if table.driver_version else ""
    warned = f"; nvidia-smi: {worst.message}" if worst is not None and triage.verdict == "degraded" else ""
    return StepResult(node, "cuda", "PASS", f"nvidia-smi: {shown}{versions}; vectorAdd: Test PASSED{warned}")


def gpu_model(product: str) -> str | None:
    """The catalog's name for a node's GPU: GPU feature discovery's nvidia.com/gpu.product label (the product name
    with '-' for ' ': NVIDIA-H100-80GB-HBM3, NVIDIA-A100-SXM4-80GB) or Slurm's GRES type (h100)."""
    from gpufleet.catalog.gpus import get_gpu_model
    from gpufleet.errors import UserError

    for candidate in dict.fromkeys((product, product.replace("-", " ", 1), product.replace("-", " "))):
        if not candidate:
            continue
        try:
            return str(get_gpu_model(candidate).name)
        except UserError:
            continue
    return None


def judge_nccl(node: str, log: str, gpus: int, product: str = "") -> StepResult:
    """all_reduce_perf across the node's `gpus` GPUs, judged as `gpufleet nccl compare` judges a run: against the
    model for the GPUs its header names or, where it names none, the node's own GPU (`product`)."""
    from gpufleet.errors import ParseError
    from gpufleet.nccl.compare import judge_run
    from gpufleet.nccl.perf_parser import parse_perf_runs

    section = sections(log).get("nccl-tests")
    if section is None:
        return StepResult(node, "nccl", "FAIL", "the step printed none of its test output", _tail(log))
    missing = _missing_tool(section, "all_reduce_perf", "use an image with nccl-tests on its PATH (--nccl-image)")
    if missing:
        return StepResult(node, "nccl", "FAIL", missing, _tail(section.text))
    try:
        runs = parse_perf_runs(section.lines)
    except ParseError:
        why = "all_reduce_perf printed no results"
        if section.exit_code not in (0, None):
            why += f" (exit {section.exit_code})"
        return StepResult(node, "nccl", "FAIL", why, _tail(section.text))
    table = runs[0]
    model = gpu_model(product) if not table.rank_gpus else None
    flags: dict[str, object] = {"gpu": model, "gpus_per_node": gpus or None} if model else {}
    judged = judge_run(table, flags, default_op="allreduce")
    ranks = table.nranks or len(table.rank_gpus) or None
    if judged.verdict in ("failed", "underperforming"):
        cause = judged.causes[0] if judged.causes else None
        lead = "all_reduce_perf failed" if judged.verdict == "failed" else "bus bandwidth far below the expected"
        return StepResult(node, "nccl", "FAIL", f"{lead}: {cause.message if cause else 'see its output'}",
                          tuple(table.last_errors or table.errors) or _tail(section.text))  # fmt: skip
    if section.exit_code not in (0, None) or table.truncated:
        why = f"exit {section.exit_code}" if section.exit_code not in (0, None) else "its output ends early"
        return StepResult(node, "nccl", "FAIL", f"all_reduce_perf did not finish ({why})", _tail(section.text))
    if ranks is not None and ranks < gpus:
        return StepResult(node, "nccl", "FAIL", f"all_reduce_perf ran on {ranks} of the node's {gpus} GPUs",
                          _tail(section.text))  # fmt: skip
    peak = max(table.rows, key=lambda r: r.busbw) if table.rows else None
    shown = f"busbw avg {table.avg_busbw:g} GB/s" if table.avg_busbw is not None else "no average printed"
    if peak is not None:
        shown += f", peak {peak.busbw:g} GB/s at {_size(peak.bytes)}"
    if judged.result is not None:
        ratio = judged.result.median_ratio_bandwidth_region
        shown += f", {ratio:.0%} of the model's expectation" if ratio is not None else ", as the model expects"
    elif judged.not_judged:
        shown += f" (not compared with a model: {judged.not_judged})"
    count = ranks or gpus
    return StepResult(node, "nccl", "PASS", f"all_reduce_perf{f' on {count} GPUs' if count else ''}: {shown}")


def judge_output(node: str, step: str, gpus: int, log: str, product: str = "") -> StepResult:
    """A step's output judged; a step that ran somewhere other than `node` fails whatever it printed."""
    ran_on = where(log).get("node")
    if ran_on and ran_on != node:
        return StepResult(node, step, "FAIL", f"the step ran on {ran_on}, not on {node}", _tail(log))
    return judge_cuda(node, log) if step == "cuda" else judge_nccl(node, log, gpus, product)


SAVED_NAME = re.compile(r"^gpufleet-validate-(?P<node>.+)-(?P<step>cuda|nccl)\.(?:out|log)$")


def judge_saved(text: str, name: str) -> StepResult:
    """Output a step printed, saved to a file (`kubectl logs job/NAME > x.log`, or the sbatch script's
    gpufleet-validate-NODE-STEP.out): the node from the step's own where line, else the file's name; the step from
    the sections it printed; the GPUs from the devices it was given."""
    found = sections(text)
    named = SAVED_NAME.match(name)
    node = where(text).get("node") or (named.group("node") if named else name)
    step = (
        "nccl" if "nccl-tests" in found else "cuda" if "nvidia-smi" in found else named.group("step") if named else ""
    )
    if not step:
        return StepResult(node, "?", "FAIL", f"{name} holds no step output (no {MARK} lines)", _tail(text))
    devices = where(text).get("gpus", "")
    # indices (Slurm's CUDA_VISIBLE_DEVICES) or UUIDs (the device plugin's NVIDIA_VISIBLE_DEVICES); "all" or a
    # path (other device-list strategies) says nothing: 0, and the ranks are not checked
    gpus = len([d for d in devices.split(",") if re.match(r"^(?:\d+|GPU-|MIG-)", d.strip())])
    return judge_cuda(node, text) if step == "cuda" else judge_nccl(node, text, gpus)


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


# --- the pod ------------------------------------------------------------------------------------------------------


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _l(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def pod_problem(pod: dict[str, Any] | None, events: list[dict[str, Any]]) -> str | None:
    """Why a pod (as kubectl prints it) did not or will not run its container, or None while nothing says so.
    Unschedulable is reported too: the caller decides whether to wait for GPUs to free up."""
    status = _d(_d(pod).get("status"))
    if pod is not None and status.get("reason"):  # Evicted, UnexpectedAdmissionError, DeadlineExceeded, ...
        message = str(status.get("message") or "").strip()
        return f"{status['reason']}: {message}" if message else str(status["reason"])
    for c in _l(status.get("initContainerStatuses")) + _l(status.get("containerStatuses")):
        waiting = _d(_d(_d(c).get("state")).get("waiting"))
        reason = str(waiting.get("reason") or "")
        if reason in STUCK:
            message = str(waiting.get("message") or "").strip()
            lead = f"image pull failed ({reason})" if reason in IMAGE_PULL else reason
            return f"{lead}: {message}" if message else lead
    for condition in _l(status.get("conditions")):
        condition = _d(condition)
        scheduled = (condition.get("type"), condition.get("status"), condition.get("reason"))
        if scheduled == ("PodScheduled", "False", "Unschedulable"):
            return f"unschedulable: {condition.get('message') or 'no node fits'}"
    warnings = [_d(e) for e in events if _d(e).get("type") == "Warning" and _d(e).get("reason") in TELLING_EVENTS]
    if warnings:
        last = max(warnings, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
        reason = str(last.get("reason"))
        message = str(last.get("message") or "").strip()
        if reason == "FailedScheduling":
            return f"unschedulable: {message}"
        return f"{reason}: {message}" if message else reason
    if pod is None:
        return "no pod was created for the Job"
    return None


def phase(pod: dict[str, Any] | None) -> str:
    return str(_d(_d(pod).get("status")).get("phase") or "") if pod is not None else ""


def job_failure(job: dict[str, Any] | None) -> str | None:
    """The Job's own Failed condition (DeadlineExceeded, BackoffLimitExceeded, ...): its pods may be gone by then."""
    for condition in _l(_d(_d(job).get("status")).get("conditions")):
        condition = _d(condition)
        if condition.get("type") == "Failed" and condition.get("status") == "True":
            reason, message = str(condition.get("reason") or "Failed"), str(condition.get("message") or "").strip()
            return f"the Job failed ({reason}): {message}" if message else f"the Job failed ({reason})"
    return None


def _waiting_on(pod: dict[str, Any] | None, events: list[dict[str, Any]]) -> str:
    """What a pod that has not finished is waiting on: its container's waiting reason and the newest event."""
    said = []
    for c in _l(_d(_d(pod).get("status")).get("containerStatuses")):
        waiting = _d(_d(_d(c).get("state")).get("waiting"))
        if waiting.get("reason"):
            said.append(str(waiting["reason"]))
    if events:
        last = max(events, key=lambda e: str(_d(e).get("lastTimestamp") or _d(e).get("eventTime") or ""))
        if last.get("message"):
            said.append(f"last event {last.get('reason')}: {str(last['message']).strip()}")
    return f"; {'; '.join(said)}" if said else ""


def judge_step(
    node: str,
    step: str,
    gpus: int,
    pod: dict[str, Any] | None,
    events: list[dict[str, Any]],
    log: str,
    *,
    job: dict[str, Any] | None = None,
    timed_out: bool = False,
    product: str = "",
) -> StepResult:
    """One step's verdict from its Job, its pod, their events and the pod's log. `timed_out`: the run stopped
    waiting."""
    state = phase(pod)
    if state in ("Succeeded", "Failed") and MARK in log:
        return judge_output(node, step, gpus, log, product)
    failed = job_failure(job)
    problem = pod_problem(pod, events) if pod is not None or failed is None else None
    if problem is not None and (timed_out or not problem.startswith("unschedulable")):
        return StepResult(node, step, "FAIL", problem)
    if failed is not None:
        return StepResult(node, step, "FAIL", failed + _waiting_on(pod, events), _tail(log))
    if state == "Failed":
        terminated = [
            _d(_d(_d(c).get("state")).get("terminated")) for c in _l(_d(_d(pod).get("status")).get("containerStatuses"))
        ]
        said = next((t for t in terminated if t), {})
        why = str(said.get("message") or said.get("reason") or "").strip()
        return StepResult(node, step, "FAIL", f"the pod failed before the test ran: {why or 'no reason given'}",
                          _tail(log))  # fmt: skip
    if state == "Succeeded":  # ended well but printed nothing of the test: the log unreadable or the command replaced
        return StepResult(node, step, "FAIL", "the pod succeeded but its log holds none of the test's output",
                          _tail(log))  # fmt: skip
    if timed_out:
        waited = f"did not finish in time (pod {state or 'not created'}{_waiting_on(pod, events)})"
        return StepResult(node, step, "FAIL", waited, _tail(log))
    return StepResult(node, step, "FAIL", f"still {state or 'waiting'}: not judged yet")


def finished(pod: dict[str, Any] | None, events: list[dict[str, Any]], job: dict[str, Any] | None = None) -> bool:
    """The step has its verdict: the pod ended, the Job failed, or the pod is stuck in a way waiting does not
    mend."""
    if phase(pod) in ("Succeeded", "Failed") or job_failure(job) is not None:
        return True
    problem = pod_problem(pod, events)
    return problem is not None and not problem.startswith("unschedulable") and pod is not None
