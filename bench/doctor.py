"""gpufleet doctor on a realistic generated cluster repository: how long 10,000 manifests take, and what it finds.

The repository is what a platform team keeps in git for a multi-tenant GPU cluster: per team a namespace with its
RBAC, quota and config, training work (Jobs, PyTorchJobs, JobSets), inference Deployments with Services,
ServiceMonitors and autoscalers, notebooks and CPU-side services; a platform folder with the GPU Operator's
ClusterPolicy, the device-plugin time-slicing config, Prometheus and its rules; captures of the nodes (three GPU
models) and of `kubectl version`. Mistakes are planted at the rates platform teams report (a few percent of
workloads each), one kind per rule, so the per-rule table shows each rule firing on a real-looking repository.

Timed, median of --rounds: the whole `gpufleet doctor` run (read, schema validation, every rule) on one file per
object, as it runs (reading and validation on every core) and on one core. Peers in the same run: reading and
parsing the same files (the floor any checker pays), and kubernetes-validate's own per-document API (what its
command line runs for each file) on a sample, extrapolated.
Target: 10,000 manifests in <= 10 s.

Run: python bench/doctor.py [--manifests 10000] [--rounds 3] [--peer-sample 300] [--keep DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

from gpufleet.doctor import engine
from gpufleet.doctor.catalog import rule_catalog
from gpufleet.doctor.engine import run
from gpufleet.doctor.findings import label
from gpufleet.doctor.load import load

TARGET_S = 10.0
MODELS = ("NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB", "NVIDIA-L40S")
GPU_TAINT = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
SHM = {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}
HF_CACHE = {"name": "hf-cache", "persistentVolumeClaim": {"claimName": "hf-cache"}}


class Repo:
    """Writes one object per file and counts the mistakes it plants."""

    def __init__(self, root: Path, seed: int) -> None:
        self.root = root
        self.rng = random.Random(seed)
        self.files = 0
        self.planted: Counter[str] = Counter()

    def put(self, folder: str, obj: dict[str, Any]) -> None:
        path = self.root / folder / f"{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        # A copy: objects sharing parts would be written with YAML anchors, which real repositories rarely hold.
        path.write_text(yaml.safe_dump(json.loads(json.dumps(obj)), sort_keys=False))
        self.files += 1

    def mistake(self, rule: str, rate: float) -> bool:
        if self.rng.random() < rate:
            self.planted[rule] += 1
            return True
        return False


def meta(name: str, ns: str | None = None, **labels: str) -> dict[str, Any]:
    m: dict[str, Any] = {"name": name}
    if ns:
        m["namespace"] = ns
    if labels:
        m["labels"] = dict(labels)
    return m


def gpu_container(repo: Repo, name: str, image: str, gpus: int, command: list[str]) -> dict[str, Any]:
    resources: dict[str, Any] = {"limits": {"nvidia.com/gpu": gpus, "cpu": "16", "memory": "128Gi"}}
    if repo.mistake("GF001", 0.01):
        resources = {"requests": {"nvidia.com/gpu": gpus}, "limits": {"cpu": "16", "memory": "128Gi"}}
    elif repo.mistake("GF002", 0.005):
        resources["limits"]["nvidia.com/gpu"] = "0.5"
    env = [{"name": "NCCL_DEBUG", "value": "WARN"}]
    if repo.mistake("GF014", 0.02):
        env.append({"name": "NCCL_P2P_DISABLE", "value": "1"})
    return {
        "name": name,
        "image": image,
        "command": command,
        "env": env,
        "resources": resources,
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }


def pod_spec(repo: Repo, container: dict[str, Any], model: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [container], "volumes": [SHM], "restartPolicy": "Never"}
    if not repo.mistake("GF003", 0.02):
        spec["tolerations"] = [GPU_TAINT]
    if not repo.mistake("GF004", 0.03):
        spec["nodeSelector"] = {"nvidia.com/gpu.product": model}
    if repo.mistake("GF013", 0.02):
        spec["volumes"] = []
        container["volumeMounts"] = []
    return spec


def training(repo: Repo, team: str, i: int) -> None:
    model = repo.rng.choice(MODELS)
    gpus = repo.rng.choice((1, 2, 4, 8))
    image = repo.rng.choice(("nvcr.io/nvidia/pytorch:25.01-py3", "nvcr.io/nvidia/nemo:25.02"))
    cmd = ["torchrun", f"--nproc-per-node={gpus}", "train.py"]
    container = gpu_container(repo, "trainer", image, gpus, cmd)
    spec = pod_spec(repo, container, model)
    kind = repo.rng.random()
    if kind < 0.5:
        spec["restartPolicy"] = "OnFailure"
        obj = {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": meta(f"train-{i}", team),
            "spec": {
                "pytorchReplicaSpecs": {
                    "Master": {"replicas": 1, "template": {"spec": spec}},
                    "Worker": {"replicas": repo.rng.choice((1, 3, 7)), "template": {"spec": spec}},
                }
            },
        }
    else:
        obj = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": meta(f"finetune-{i}", team),
            "spec": {"backoffLimit": 2, "template": {"metadata": {"labels": {"job": f"finetune-{i}"}}, "spec": spec}},
        }
    repo.put(f"teams/{team}/training", obj)


def inference(repo: Repo, team: str, i: int) -> None:
    name = f"serve-{i}"
    model = repo.rng.choice(MODELS)
    container = gpu_container(
        repo, "vllm", "vllm/vllm-openai:v0.8.4", 1, ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"]
    )
    container["ports"] = [{"name": "http", "containerPort": 8000}]
    spec = pod_spec(repo, container, model)
    spec["restartPolicy"] = "Always"
    if not repo.mistake("GF021", 0.05):
        spec["volumes"].append(HF_CACHE)
        container["volumeMounts"].append({"name": "hf-cache", "mountPath": "/root/.cache/huggingface"})
    labels = {"app": name}
    repo.put(
        f"teams/{team}/inference",
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta(name, team, app=name),
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": spec},
            },
        },
    )
    repo.put(
        f"teams/{team}/inference",
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": meta(name, team, app=name),
            "spec": {"selector": labels, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
        },
    )
    monitor_labels = {"release": "kube-prometheus-stack"}
    if repo.mistake("GF007", 0.05):
        monitor_labels = {"team": team}
    repo.put(
        f"teams/{team}/inference",
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "ServiceMonitor",
            "metadata": {"name": name, "namespace": team, "labels": monitor_labels},
            "spec": {"selector": {"matchLabels": labels}, "endpoints": [{"port": "http", "path": "/metrics"}]},
        },
    )


def cpu_service(repo: Repo, team: str, i: int) -> None:
    name = f"api-{i}"
    labels = {"app": name}
    image = "python:3.12-slim"
    command = ["gunicorn", "app:app"]
    env: list[dict[str, str]] = []
    if repo.mistake("GF018", 0.02):  # GPU work with no GPU: the silent CPU-only run
        image, command = "nvcr.io/nvidia/pytorch:25.01-py3", ["torchrun", "--nproc-per-node=8", "train.py"]
        env = [{"name": "NCCL_DEBUG", "value": "INFO"}]
    repo.put(
        f"teams/{team}/services",
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta(name, team, app=name),
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "containers": [
                            {
                                "name": "api",
                                "image": image,
                                "command": command,
                                "env": env,
                                "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}},
                            }
                        ]
                    },
                },
            },
        },
    )
    repo.put(
        f"teams/{team}/services",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": meta(f"{name}-config", team),
            "data": {"LOG_LEVEL": "info", "WORKERS": "4"},
        },
    )


def team_basics(repo: Repo, team: str) -> None:
    folder = f"teams/{team}"
    repo.put(folder, {"apiVersion": "v1", "kind": "Namespace", "metadata": meta(team, None, team=team)})
    repo.put(
        folder,
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": meta("gpu-quota", team),
            "spec": {"hard": {"requests.nvidia.com/gpu": "64"}},
        },
    )
    repo.put(
        folder,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": meta("team-edit", team),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
            "subjects": [{"kind": "Group", "name": f"{team}-devs", "apiGroup": "rbac.authorization.k8s.io"}],
        },
    )


def platform(repo: Repo, nodes: int) -> None:
    repo.put(
        "platform/gpu-operator",
        {
            "apiVersion": "nvidia.com/v1",
            "kind": "ClusterPolicy",
            "metadata": {"name": "cluster-policy"},
            "spec": {
                "operator": {"defaultRuntime": "containerd"},
                "driver": {"enabled": True, "version": "570.133.20", "usePrecompiled": False},
                "devicePlugin": {"enabled": True, "config": {"name": "time-slicing", "default": "any"}},
                "dcgmExporter": {"enabled": True},
                "mig": {"strategy": "mixed"},
                "migManager": {"enabled": True},
                "cdi": {"enabled": True},
            },
        },
    )
    repo.planted["GF010"] += 1  # a 570 driver below 570.172.08 with mixed MIG
    repo.put(
        "platform/gpu-operator",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": meta("time-slicing", "gpu-operator"),
            "data": {
                "any": yaml.safe_dump(
                    {
                        "version": "v1",
                        "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}},
                    }
                )
            },
        },
    )
    repo.planted["GF005"] += 1
    repo.planted["GF015"] += 1  # dcgm-exporter's pod mapping (the operator's default) on those shared GPUs
    repo.put(
        "platform/gpu-operator",
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta("gpu-operator", "gpu-operator", app="gpu-operator"),
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "gpu-operator"}},
                "template": {
                    "metadata": {"labels": {"app": "gpu-operator"}},
                    "spec": {
                        "serviceAccountName": "gpu-operator",
                        "containers": [{"name": "gpu-operator", "image": "nvcr.io/nvidia/gpu-operator:v25.10.1"}],
                    },
                },
            },
        },
    )
    repo.planted["GF011"] += 1  # 25.10 is out of support since 26.7 shipped
    repo.put(
        "platform/monitoring",
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "PrometheusRule",
            "metadata": {
                "name": "gpu-capacity",
                "namespace": "monitoring",
                "labels": {"release": "kube-prometheus-stack"},
            },
            "spec": {
                "groups": [
                    {
                        "name": "gpu",
                        "rules": [
                            {
                                "alert": "GpuLost",
                                "expr": 'sum(kube_node_status_capacity{resource="nvidia_com_gpu"}) < 512',
                                "for": "10m",
                            }
                        ],
                    }
                ]
            },
        },
    )
    repo.planted["GF008"] += 1
    items = []
    for n in range(nodes):
        model = MODELS[n % len(MODELS)]
        items.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": f"gpu-{n:04d}",
                    "labels": {
                        "nvidia.com/gpu.present": "true",
                        "nvidia.com/gpu.product": model,
                        "nvidia.com/mig.strategy": "mixed",
                        "nvidia.com/cuda.driver-version.full": "570.133.20",
                    },
                },
                "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},
                "status": {
                    "capacity": {"nvidia.com/gpu": "8", "cpu": "224", "memory": "2Ti"},
                    "allocatable": {"nvidia.com/gpu": "8", "cpu": "220", "memory": "2Ti"},
                    "nodeInfo": {
                        "kubeletVersion": "v1.33.2",
                        "containerRuntimeVersion": "containerd://2.0.5",
                        "kernelVersion": "6.8.0-1019-nvidia",
                        "osImage": "Ubuntu 24.04.2 LTS",
                    },
                },
            }
        )
    (repo.root / "captures").mkdir(parents=True, exist_ok=True)
    (repo.root / "captures" / "nodes.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    repo.files += 1


def generate(root: Path, manifests: int, seed: int = 7) -> Repo:
    repo = Repo(root, seed)
    platform(repo, nodes=64)
    teams = [f"team-{t:02d}" for t in range(max(1, manifests // 400))]
    for team in teams:
        team_basics(repo, team)
    i = 0
    while repo.files < manifests:
        team = repo.rng.choice(teams)
        roll = repo.rng.random()
        if roll < 0.45:
            training(repo, team, i)
        elif roll < 0.7:
            inference(repo, team, i)
        else:
            cpu_service(repo, team, i)
        i += 1
    return repo


def timed(fn: Any, rounds: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(rounds):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def peer_kubernetes_validate(files: list[Path], sample: int) -> float:
    """Seconds per manifest through kubernetes_validate.validate (strict), median over a sample."""
    import kubernetes_validate

    per = []
    for f in files[:sample]:
        doc = yaml.safe_load(f.read_text())
        t0 = time.perf_counter()
        with contextlib.suppress(Exception):  # a custom resource without a schema, or an invalid one: timed the same
            kubernetes_validate.validate(doc, "1.33.0", strict=True)
        per.append(time.perf_counter() - t0)
    return statistics.median(per)


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--manifests", type=int, default=10_000)
    args.add_argument("--rounds", type=int, default=3)
    args.add_argument("--peer-sample", type=int, default=300)
    args.add_argument("--keep", type=Path, help="write the repository here and keep it")
    opts = args.parse_args()
    os.environ.setdefault("COLUMNS", "160")
    console = Console()
    root = opts.keep or Path(tempfile.mkdtemp(prefix="doctor-bench-"))
    try:
        repo = generate(root, opts.manifests)
        files = sorted(root.rglob("*.yaml"))
        console.print(f"generated {repo.files:,} files under {root if opts.keep else 'a temporary folder'}")
        run([str(root)])  # warm: schema files read, validators built
        doctor_s, report = timed(lambda: run([str(root)]), opts.rounds)
        cores = engine._workers(repo.files)
        engine.PARALLEL_FROM_FILES, parallel_from = 10**9, engine.PARALLEL_FROM_FILES
        one_core_s, _ = timed(lambda: run([str(root)]), opts.rounds)
        engine.PARALLEL_FROM_FILES = parallel_from
        load_s, _ = timed(lambda: load([str(root)]), opts.rounds)
        no_schema_s, _ = timed(lambda: run([str(root)], check_schema=False), opts.rounds)
        peer_per = peer_kubernetes_validate(files, opts.peer_sample)

        table = Table(title=f"gpufleet doctor on {repo.files:,} manifests (median of {opts.rounds})")
        for col in ("what", "seconds", "per manifest", "vs doctor"):
            table.add_column(col, justify="right" if col != "what" else "left")
        rows = [
            (f"gpufleet doctor (read + schema + rules; reading on {cores} cores)", doctor_s),
            ("  without schema validation", no_schema_s),
            ("  all on one core", one_core_s),
            ("read and parse only, one core (the floor a checker pays)", load_s),
            (
                f"kubernetes-validate API, per document (sample of {opts.peer_sample}, extrapolated)",
                peer_per * repo.files,
            ),
        ]
        for what, secs in rows:
            table.add_row(what, f"{secs:.2f}", f"{secs / repo.files * 1e3:.3f} ms", f"{secs / doctor_s:.2f}x")
        console.print(table)
        met = doctor_s <= TARGET_S * repo.files / 10_000
        console.print(f"target <= {TARGET_S:.0f} s per 10,000 manifests: {'met' if met else 'NOT met'}")

        catalog = rule_catalog()
        found = Counter(f.rule for f in report.findings)
        objects = Counter(rule for rule, ref in {(f.rule, f.object or f.file) for f in report.findings})
        # A PyTorchJob's master and worker templates share the planted spec: one mistake, a finding for each template.
        per_rule = Table(title="Findings per rule on the generated repository (planted mistakes: objects)")
        for col in ("rule", "severity", "title", "planted", "findings", "objects"):
            per_rule.add_column(col, justify="right" if col in ("planted", "findings", "objects") else "left")
        for rule_id, info in catalog.items():
            planted = repo.planted.get(rule_id)
            per_rule.add_row(
                rule_id,
                label(info.severity),
                info.title,
                "-" if planted is None else str(planted),
                str(found[rule_id]),
                str(objects[rule_id]),
            )
        console.print(per_rule)
    finally:
        if not opts.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
