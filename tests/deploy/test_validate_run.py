"""Running the validation. Kubernetes: the official client over real HTTP against a small API server that keeps the
Jobs it is sent, makes each a pod as the Job controller does (ownerReferences, the template's labels, bound to the
node the Job's affinity names) and moves it through the phases a scenario gives, with the pods' logs from real
captures; what is checked is what the client sent and what the run reported. Slurm: the real slurmctld the tests
start (tests/slurm_cluster.py), whose nodes have GPU GRES on placeholder devices and no GPU: srun places each step
where it was asked and the steps fail honestly (no nvidia-smi, no all_reduce_perf)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.deploy import validate as v
from gpufleet.deploy.validate_judge import sections, where
from gpufleet.deploy.validate_run import KubernetesRun, SlurmOptions, batch_script, run_slurm, slurm_nodes, srun_args
from tests.slurm_cluster import SlurmCluster, slurm_cluster  # noqa: F401

kube = pytest.importorskip("kubernetes.client")

TESTS = Path(__file__).resolve().parents[1]
NODES = TESTS / "integrations" / "kubernetes" / "data" / "gpu_drain" / "nodes.json"
SMI = (TESTS / "corpus" / "nvsmi_table_01_a100_stas00.txt").read_text()
VECTORADD = (Path(__file__).parent / "data" / "validate" / "vectoradd_pass.txt").read_text()
HEALTHY = (TESTS / "scored" / "round2" / "nccltests" / "05_h100_8gpu_single_node_indented.txt").read_text()
SLOW = (TESTS / "scored" / "round2" / "nccltests" / "04_dgx_a100_4gpu_p2p_disabled.txt").read_text()
MARK = v.MARK


def _marked(node: str, *parts: tuple[str, str, int]) -> str:
    out = f"{MARK} where node={node} gpus=0\n"
    for name, text, code in parts:
        out += f"{MARK} {name}\n{text.rstrip()}\n{MARK} {name} exit {code}\n"
    return out


def _nodes() -> list[dict[str, Any]]:
    first = json.loads(NODES.read_text())["items"][0]
    second = json.loads(json.dumps(first))
    second["metadata"]["name"] = second["metadata"]["labels"]["kubernetes.io/hostname"] = "dgx-005"
    return [first, second]


def _waiting_for_image(image: str) -> dict[str, Any]:
    message = f'Back-off pulling image "{image}"'
    return {"waiting": {"reason": "ImagePullBackOff", "message": message}}


# (node, step) -> the pod's states in turn (each list call moves one on) and its log
SCENARIO: dict[tuple[str, str], tuple[list[dict[str, Any]], str]] = {
    ("dgx-004", "cuda"): (
        [{"phase": "Running"}, {"phase": "Succeeded"}],
        _marked("dgx-004", ("nvidia-smi", SMI, 0), ("vectorAdd", VECTORADD, 0)),
    ),
    ("dgx-004", "nccl"): (
        [{"phase": "Pending"}, {"phase": "Running"}, {"phase": "Succeeded"}],
        _marked("dgx-004", ("nccl-tests", HEALTHY, 0)),
    ),
    ("dgx-005", "cuda"): ([{"phase": "Pending", "containerState": _waiting_for_image(v.VECTORADD_IMAGE)}], ""),
    ("dgx-005", "nccl"): ([{"phase": "Running"}, {"phase": "Succeeded"}], _marked("dgx-005", ("nccl-tests", SLOW, 0))),
}


class Api:
    """The endpoints a validation run uses, and what reached them."""

    def __init__(self) -> None:
        self.nodes = _nodes()
        self.jobs: dict[str, dict[str, Any]] = {}
        self.pods: dict[str, dict[str, Any]] = {}
        self.states: dict[str, list[dict[str, Any]]] = {}
        self.logs: dict[str, str] = {}
        self.requests: list[tuple[str, str, dict[str, list[str]], Any]] = []
        self.lock = threading.Lock()

    def _pod_for(self, job: dict[str, Any]) -> None:
        name = job["metadata"]["name"]
        template = job["spec"]["template"]
        terms = template["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        node = terms["nodeSelectorTerms"][0]["matchFields"][0]["values"][0]
        step = job["metadata"]["labels"][v.STEP_LABEL]
        pod_name = f"{name}-x7k2p"
        self.pods[pod_name] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": pod_name,
                "namespace": job["metadata"]["namespace"],
                "labels": {**template["metadata"]["labels"], "batch.kubernetes.io/job-name": name},
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": f"uid-{name}"}],
                "creationTimestamp": "2026-12-03T10:00:00Z",
            },
            "spec": {**template["spec"], "nodeName": node},
            "status": {"phase": "Pending"},
        }
        states, log = SCENARIO[(node, step)]
        self.states[pod_name], self.logs[pod_name] = list(states), log

    def _advance(self) -> None:
        for name, pod in self.pods.items():
            states = self.states[name]
            state = states.pop(0) if len(states) > 1 else states[0]
            container = pod["spec"]["containers"][0]
            status: dict[str, Any] = {"phase": state["phase"]}
            if "containerState" in state:
                status["containerStatuses"] = [
                    {
                        "name": container["name"],
                        "image": container["image"],
                        "imageID": "",
                        "ready": False,
                        "restartCount": 0,
                        "state": state["containerState"],
                    }
                ]
            pod["status"] = status

    def handle(self, method: str, url: str, body: Any) -> tuple[int, Any]:
        parsed = urlparse(url)
        query = parse_qs(parsed.query)
        parts = parsed.path.strip("/").split("/")
        with self.lock:
            self.requests.append((method, parsed.path, query, body))
            if parts == ["api", "v1", "nodes"]:
                return 200, {"apiVersion": "v1", "kind": "NodeList", "metadata": {}, "items": self.nodes}
            if parts[:3] == ["apis", "batch", "v1"] and parts[5:6] == ["jobs"]:
                if method == "POST":
                    self.jobs[body["metadata"]["name"]] = body
                    self._pod_for(body)
                    return 201, body
                if method == "GET":
                    wanted = dict(x.split("=", 1) for x in query.get("labelSelector", [""])[0].split(",") if x)
                    items = [
                        j
                        for j in self.jobs.values()
                        if all(j["metadata"]["labels"].get(k) == x for k, x in wanted.items())
                    ]
                    return 200, {"apiVersion": "batch/v1", "kind": "JobList", "metadata": {}, "items": items}
                if method == "DELETE":
                    gone = self.jobs.pop(parts[6], None)
                    return (200, {"kind": "Status", "status": "Success"}) if gone else (404, {"kind": "Status"})
            if parts[:2] == ["api", "v1"] and parts[4:] == ["pods"]:
                self._advance()
                wanted = dict(s.split("=", 1) for s in query.get("labelSelector", [""])[0].split(",") if s)
                items = [
                    p for p in self.pods.values() if all(p["metadata"]["labels"].get(k) == x for k, x in wanted.items())
                ]
                return 200, {"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": items}
            if parts[:2] == ["api", "v1"] and parts[4:] == ["events"]:
                return 200, {"apiVersion": "v1", "kind": "EventList", "metadata": {}, "items": []}
            if parts[:2] == ["api", "v1"] and parts[4] == "pods" and parts[6:] == ["log"]:
                if parts[5] not in self.pods or self.pods[parts[5]]["status"]["phase"] == "Pending":
                    return 400, {"kind": "Status", "message": "container is waiting to start"}
                return 200, self.logs[parts[5]]
        return 404, {"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404}


@pytest.fixture
def api() -> Iterator[tuple[Api, str]]:
    state = Api()

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            status, out = state.handle(self.command, self.path, body)
            raw = out.encode() if isinstance(out, str) else json.dumps(out).encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain" if isinstance(out, str) else "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        do_GET = do_POST = do_DELETE = _answer

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{httpd.server_port}"
    finally:
        httpd.shutdown()
        thread.join(timeout=10)


def _clients(host: str) -> tuple[Any, Any]:
    config = kube.Configuration()
    config.host = host
    client = kube.ApiClient(config)
    return kube.CoreV1Api(client), kube.BatchV1Api(client)


def test_a_run_creates_the_jobs_judges_each_step_and_deletes_them(api: tuple[Api, str]) -> None:
    state, host = api
    core, batch = _clients(host)
    nodes = [g for g in (v.gpu_node(n) for n in core.list_node().items) if g is not None]
    opts = v.JobOptions(namespace="gpu-validate", run_id="ab12cd")
    planned = v.plan(nodes, opts)
    seen: list[str] = []
    results = KubernetesRun(core, batch, opts, sleep=lambda _: None).run(
        planned, on_result=lambda r: seen.append(f"{r.node}/{r.step}")
    )
    verdicts = {(r.node, r.step): (r.status, r.reason) for r in results}
    assert verdicts[("dgx-004", "cuda")][0] == "PASS"
    assert verdicts[("dgx-004", "nccl")][0] == "PASS"
    assert verdicts[("dgx-005", "cuda")] == (
        "FAIL",
        f'image pull failed (ImagePullBackOff): Back-off pulling image "{v.VECTORADD_IMAGE}"',
    )
    status, reason = verdicts[("dgx-005", "nccl")]
    assert status == "FAIL" and reason.startswith("bus bandwidth far below the expected")
    assert sorted(seen) == sorted(f"{n}/{s}" for n, s in verdicts)
    posted = [body for method, _, _, body in state.requests if method == "POST"]
    assert [(b["kind"], b["metadata"]["namespace"]) for b in posted] == [("Job", "gpu-validate")] * 4
    assert posted == [v.as_dict(p.obj) for p in planned]  # the client's models, as they go on the wire
    listed = [q for method, path, q, _ in state.requests if method == "GET" and path.endswith("/pods")]
    assert {q["labelSelector"][0] for q in listed} == {f"{v.RUN_LABEL}=ab12cd"}
    logs = [q["container"][0] for method, path, q, _ in state.requests if path.endswith("/log")]
    assert sorted(logs) == ["cuda", "nccl", "nccl"]  # not the pod whose image never came
    deleted = [(path.rsplit("/", 1)[1], q) for method, path, q, _ in state.requests if method == "DELETE"]
    assert sorted(name for name, _ in deleted) == sorted(p.obj.metadata.name for p in planned)
    assert all(q["propagationPolicy"] == ["Background"] for _, q in deleted)
    assert state.jobs == {}


def test_the_command_runs_through_a_kubeconfig_and_exits_1_on_a_failed_node(
    api: tuple[Api, str], tmp_path: Path
) -> None:
    state, host = api
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "test", "cluster": {"server": host}}],
                "users": [{"name": "test", "user": {"token": "t"}}],
                "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
                "current-context": "test",
            }
        )
    )
    args = ["deploy", "validate", "--kubeconfig", str(kubeconfig), "-n", "gpu-validate", "-o", "json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)["nodes"]
    assert [(n["node"], n["status"]) for n in report] == [("dgx-004", "PASS"), ("dgx-005", "FAIL")]
    only = CliRunner().invoke(app, [*args, "--node", "dgx-004"])
    assert only.exit_code == 0, only.output
    assert state.jobs == {}


# --- Slurm ----------------------------------------------------------------------------------------------------------


def test_srun_asks_for_the_node_and_its_gpus() -> None:
    node = v.GpuNode("gpu-01", 8)
    opts = SlurmOptions(timeout_s=300, partition="gpu")
    cuda, nccl = (srun_args(node, s, opts) for s in v.steps_for(node))
    assert cuda[:8] == ["srun", "-w", "gpu-01", "-N", "1", "-n", "1", "--gres=gpu:1"]
    assert "--time=5" in cuda and "--partition=gpu" in cuda
    assert f"--container-image=nvcr.io#{v.VECTORADD_IMAGE.split('/', 1)[1]}" in cuda
    assert "--gres=gpu:8" in nccl and "--container-image=nvcr.io#nvidia/pytorch:25.06-py3" in nccl
    script = batch_script([node, v.GpuNode("gpu-02", 4), v.GpuNode("gpu-03", 8, problem="node DOWN")], opts)
    assert "#SBATCH --nodelist=gpu-01,gpu-02" in script and "#SBATCH --nodes=2" in script
    assert script.count("srun -w gpu-01") == 2 and script.count("srun -w gpu-02") == 2
    assert "gpu-03" not in script and script.rstrip().endswith("wait")


@pytest.mark.real
def test_on_the_real_slurmctld_each_step_lands_on_its_node_and_fails_without_a_gpu(
    slurm_cluster: SlurmCluster,  # noqa: F811
) -> None:
    runner = slurm_cluster.runner
    nodes = slurm_nodes(runner, ["gpu-02", "gpu-03"])
    assert [(n.name, n.gpus, n.product, n.problem) for n in nodes] == [
        ("gpu-02", 8, "h100", ""),
        ("gpu-03", 8, "h100", ""),
    ]
    opts = SlurmOptions(timeout_s=60, container=False)
    # where srun put the step and which GPU it was given, from the step's own first line
    cuda = v.steps_for(nodes[0])[0]
    proc = runner.step(srun_args(nodes[0], cuda, opts), timeout_s=120)
    assert where(proc.stdout) == {"node": "gpu-02", "gpus": "0"}
    assert sections(proc.stdout)["nvidia-smi"].exit_code == 127
    results = run_slurm(runner, nodes, opts)
    by_step = {(r.node, r.step): r for r in results}
    assert sorted(by_step) == [("gpu-02", "cuda"), ("gpu-02", "nccl"), ("gpu-03", "cuda"), ("gpu-03", "nccl")]
    for node in ("gpu-02", "gpu-03"):
        assert by_step[(node, "cuda")].status == "FAIL"
        assert by_step[(node, "cuda")].reason.startswith("nvidia-smi not found where the step ran")
        assert by_step[(node, "nccl")].reason.startswith("all_reduce_perf not found where the step ran")


@pytest.mark.real
def test_a_drained_slurm_node_is_reported_not_run(slurm_cluster: SlurmCluster) -> None:  # noqa: F811
    slurm_cluster.scontrol("update", "NodeName=gpu-04", "State=DRAIN", "Reason=validate-test")
    try:
        (node,) = slurm_nodes(slurm_cluster.runner, ["gpu-04"])
        assert node.problem.startswith("node IDLE+DRAIN") and node.problem.endswith(": validate-test")
        assert run_slurm(slurm_cluster.runner, [node], SlurmOptions(container=False)) == []
    finally:
        slurm_cluster.scontrol("update", "NodeName=gpu-04", "State=RESUME")


@pytest.mark.real
def test_the_sbatch_script_runs_on_the_real_slurmctld_and_its_files_are_judged(
    slurm_cluster: SlurmCluster,  # noqa: F811
    tmp_path: Path,
) -> None:
    render = CliRunner().invoke(
        app,
        ["deploy", "validate", "--slurm", "--slurm-conf", slurm_cluster.conf, "--render", "--bare", "--timeout", "60",
         "--node", "gpu-01", "--node", "gpu-02"],
    )  # fmt: skip
    assert render.exit_code == 0, render.output
    (tmp_path / "validate.sbatch").write_text(render.stdout)
    job = slurm_cluster.runner.run(["sbatch", "--parsable", f"--chdir={tmp_path}", str(tmp_path / "validate.sbatch")])
    slurm_cluster.wait_for(lambda: not slurm_cluster.runner.squeue(), f"job {job.strip()} to finish", timeout_s=120)
    outputs = sorted(p.name for p in tmp_path.glob("gpufleet-validate-gpu-*.out"))
    assert outputs == [f"gpufleet-validate-gpu-0{n}-{s}.out" for n in (1, 2) for s in ("cuda", "nccl")]
    judged = CliRunner().invoke(app, ["deploy", "validate", "--judge", str(tmp_path), "-o", "json"])
    assert judged.exit_code == 1, judged.output
    report = {n["node"]: n for n in json.loads(judged.stdout)["nodes"]}
    assert sorted(report) == ["gpu-01", "gpu-02"]
    for node in report.values():
        reasons = {s["step"]: s["reason"] for s in node["steps"]}
        assert reasons["cuda"].startswith("nvidia-smi not found where the step ran")
        assert reasons["nccl"].startswith("all_reduce_perf not found where the step ran")
