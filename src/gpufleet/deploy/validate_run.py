"""Running the validation: the Jobs through the Kubernetes API (create, watch, read logs, judge, delete), or the steps
through Slurm (`srun -w NODE --gres=gpu:N`, one node's steps after each other, the nodes side by side), and the
batch script that does the same inside one allocation."""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from gpufleet.deploy.validate import (
    DEFAULT_TIMEOUT_S,
    NCCL_IMAGE,
    RUN_LABEL,
    VECTORADD_IMAGE,
    GpuNode,
    JobOptions,
    PlannedJob,
    Step,
    as_dict,
    steps_for,
)
from gpufleet.deploy.validate_judge import StepResult, finished, judge_output, judge_step, phase
from gpufleet.errors import BackendError

GRACE_S = 60  # past the Jobs' own deadline, for the API server to mark them and the logs to be read
LOG_BYTES = 1 << 20  # a step prints a few KiB; more is not read


def problems(nodes: list[GpuNode]) -> list[StepResult]:
    """Nodes that cannot run the steps, each a failed result naming why."""
    return [StepResult(n.name, "node", "FAIL", n.problem) for n in nodes if n.problem]


# --- Kubernetes ---------------------------------------------------------------------------------------------------


def _owner_job(pod: Any) -> str:
    for ref in pod.metadata.owner_references or []:
        if ref.kind == "Job":
            return str(ref.name)
    labels = pod.metadata.labels or {}
    return str(labels.get("batch.kubernetes.io/job-name") or labels.get("job-name") or "")


def _api_error(exc: Exception, what: str) -> BackendError:
    status = getattr(exc, "status", None)
    reason = getattr(exc, "reason", None) or exc
    fix = "check the kubeconfig's user may create Jobs and read pods, their logs and events in the namespace"
    return BackendError(f"{what}: {status or ''} {reason}".replace("  ", " "), fix=fix)


@dataclass
class KubernetesRun:
    """One validation run through the API: `core` a CoreV1Api, `batch` a BatchV1Api."""

    core: Any
    batch: Any
    opts: JobOptions
    poll_s: float = 2.0
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    keep: bool = False  # leave the Jobs (their TTL still removes them)

    def run(self, planned: list[PlannedJob], on_result: Callable[[StepResult], None] | None = None) -> list[StepResult]:
        ns = self.opts.namespace
        created: list[PlannedJob] = []
        results: dict[str, StepResult] = {}
        try:
            for job in planned:
                try:
                    self.batch.create_namespaced_job(ns, job.obj)
                except Exception as exc:  # the client's ApiException, or a connection error
                    raise _api_error(exc, f"cannot create Job {job.obj.metadata.name} in {ns}") from exc
                created.append(job)
            waiting = {j.obj.metadata.name: j for j in created}
            deadline = self.clock() + self.opts.timeout_s + GRACE_S
            while waiting:
                timed_out = self.clock() >= deadline
                pods, jobs, events = self._observe()
                for name, job in list(waiting.items()):
                    pod = pods.get(name)
                    pod_dict = as_dict(pod) if pod is not None else None
                    job_dict = jobs.get(name)
                    pod_name = pod.metadata.name if pod is not None else None
                    seen = [e for e in events if e["involvedObject"].get("name") in (pod_name, name)]
                    if not (timed_out or finished(pod_dict, seen, job_dict)):
                        continue
                    started = pod_dict is not None and phase(pod_dict) in ("Running", "Succeeded", "Failed")
                    log = self._log(pod) if started else ""  # a container that never started has none
                    result = judge_step(job.node.name, job.step.name, job.step.gpus, pod_dict, seen, log,
                                        job=job_dict, timed_out=timed_out, product=job.node.product)  # fmt: skip
                    results[name] = result
                    del waiting[name]
                    if on_result is not None:
                        on_result(result)
                if waiting:
                    self.sleep(self.poll_s)
        finally:
            if not self.keep:
                self._delete(created)
        return [results[j.obj.metadata.name] for j in created if j.obj.metadata.name in results]

    def _observe(self) -> tuple[dict[str, Any], dict[str, dict[str, Any]], list[dict[str, Any]]]:
        """This run's pods by their Job (the newest where a Job made several), its Jobs, and the namespace's
        events."""
        ns = self.opts.namespace
        selector = f"{RUN_LABEL}={self.opts.run_id}"
        try:
            pod_list = self.core.list_namespaced_pod(ns, label_selector=selector)
            job_list = self.batch.list_namespaced_job(ns, label_selector=selector)
            event_list = self.core.list_namespaced_event(ns)
        except Exception as exc:
            raise _api_error(exc, f"cannot list Jobs, pods and events in {ns}") from exc
        jobs = {j.metadata.name: as_dict(j) for j in job_list.items or []}
        pods: dict[str, Any] = {}
        for pod in pod_list.items or []:
            job = _owner_job(pod)
            older = pods.get(job)
            if older is None or str(pod.metadata.creation_timestamp or "") >= str(
                older.metadata.creation_timestamp or ""
            ):
                pods[job] = pod
        events = [as_dict(e) for e in event_list.items or []]
        for event in events:
            event.setdefault("involvedObject", {})
        return pods, jobs, events

    def _log(self, pod: Any) -> str:
        container = pod.spec.containers[0].name if pod.spec and pod.spec.containers else None
        try:
            text = self.core.read_namespaced_pod_log(
                pod.metadata.name, self.opts.namespace, container=container, limit_bytes=LOG_BYTES
            )
        except Exception:  # no log (the container never started): the pod's own state says why
            return ""
        return str(text or "")

    def _delete(self, jobs: list[PlannedJob]) -> None:
        for job in jobs:
            try:  # Background: the Job goes now, its pods after it (the default, Orphan, would leave them)
                self.batch.delete_namespaced_job(
                    job.obj.metadata.name, self.opts.namespace, propagation_policy="Background"
                )
            except Exception:  # gone already, or the TTL will remove it
                continue


# --- Slurm --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SlurmOptions:
    timeout_s: int = DEFAULT_TIMEOUT_S
    partition: str | None = None
    container: bool = True  # run the steps in NVIDIA's images through pyxis (--container-image)
    vectoradd_image: str = VECTORADD_IMAGE
    nccl_image: str = NCCL_IMAGE
    vectoradd: str = "/cuda-samples/vectorAdd"  # where the binary is: in the image, or on the node when bare


def slurm_nodes(runner: Any, names: list[str] | None = None) -> list[GpuNode]:
    """The Slurm nodes with GPU GRES (`scontrol -o -d show node`), each with why it cannot run the steps."""
    out = []
    for node in runner.nodes():
        if node.gpus < 1 or (names and node.name not in names):
            continue
        problem = ""
        if not node.state.available:
            problem = f"node {node.state}" + (f": {node.reason}" if node.reason else "")
        product = next((g.type for g in node.gres if g.name == "gpu" and g.type), None) or ""
        out.append(GpuNode(node.name, node.gpus, product, problem=problem))
    return out


def _pyxis_image(image: str) -> str:
    """nvcr.io/nvidia/x:tag as enroot names it: nvcr.io#nvidia/x:tag (the registry before '#')."""
    host, _, rest = image.partition("/")
    return f"{host}#{rest}" if "." in host and rest else image


def slurm_steps(node: GpuNode, opts: SlurmOptions) -> list[Step]:
    from gpufleet.deploy.validate import cuda_script

    steps = steps_for(node, opts.vectoradd_image, opts.nccl_image)
    return [Step(s.name, s.gpus, s.image, cuda_script(opts.vectoradd)) if s.name == "cuda" else s for s in steps]


def srun_args(node: GpuNode, step: Step, opts: SlurmOptions, *, inside_allocation: bool = False) -> list[str]:
    """`srun -w NODE -N 1 -n 1 --gres=gpu:N ... sh -c SCRIPT` for one step on one node."""
    args = ["srun", "-w", node.name, "-N", "1", "-n", "1", f"--gres=gpu:{step.gpus}"]
    if not inside_allocation:
        args += [f"--job-name=gpufleet-validate-{step.name}", f"--time={max(1, -(-opts.timeout_s // 60))}"]
        if opts.partition:
            args.append(f"--partition={opts.partition}")
    if opts.container:
        args.append(f"--container-image={_pyxis_image(step.image)}")
    return [*args, "sh", "-c", step.script]


def run_slurm(
    runner: Any,
    nodes: list[GpuNode],
    opts: SlurmOptions,
    on_result: Callable[[StepResult], None] | None = None,
) -> list[StepResult]:
    """Each node's steps one after the other (the nccl step needs the GPUs the cuda step held), nodes in parallel;
    each step's output judged as a pod's log is."""

    def one(node: GpuNode) -> list[StepResult]:
        out = []
        for step in slurm_steps(node, opts):
            args = srun_args(node, step, opts)
            try:
                proc = runner.step(args, timeout_s=opts.timeout_s + GRACE_S)
            except BackendError as exc:
                result = StepResult(node.name, step.name, "FAIL", exc.message)
            else:
                log = proc.stdout + ("\n" + proc.stderr if proc.stderr else "")
                srun_error = [line for line in proc.stderr.splitlines() if line.startswith("srun: error")]
                if srun_error and "=== gpufleet-validate" not in proc.stdout:
                    result = StepResult(node.name, step.name, "FAIL", srun_error[-1], tuple(srun_error[-3:]))
                else:
                    result = judge_output(node.name, step.name, step.gpus, log, node.product)
            if on_result is not None:
                on_result(result)
            out.append(result)
        return out

    runnable = [n for n in nodes if not n.problem]
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(runnable)))) as pool:
        per_node = list(pool.map(one, runnable))
    return [r for results in per_node for r in results]


def batch_script(nodes: list[GpuNode], opts: SlurmOptions) -> str:
    """An sbatch script doing the same inside one allocation of the nodes: each node's steps in order, the nodes in
    parallel, each step's output in gpufleet-validate-<node>-<step>.out for `gpufleet deploy validate` to judge."""
    runnable = [n for n in nodes if not n.problem]
    lines = [
        "#!/bin/bash",
        "# Generated by `gpufleet deploy validate --slurm --render`.",
        "#SBATCH --job-name=gpufleet-validate",
        f"#SBATCH --nodelist={','.join(n.name for n in runnable)}",
        f"#SBATCH --nodes={len(runnable)}",
        "#SBATCH --exclusive",
        f"#SBATCH --time={max(1, -(-opts.timeout_s * 2 // 60))}",
        "#SBATCH --output=gpufleet-validate-%j.out",
    ]
    if opts.partition:
        lines.append(f"#SBATCH --partition={opts.partition}")
    lines.append("")
    for node in runnable:
        steps = [
            shlex.join(srun_args(node, step, opts, inside_allocation=True))
            + f" > {shlex.quote(f'gpufleet-validate-{node.name}-{step.name}.out')} 2>&1"
            for step in slurm_steps(node, opts)
        ]
        lines.append(f"( {' ; '.join(steps)} ) &")
    lines += ["wait", ""]
    return "\n".join(lines)
