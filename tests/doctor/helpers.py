"""Running the doctor on manifests written inline in a test."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import yaml

from gpufleet.doctor.engine import Report, run
from gpufleet.doctor.findings import Finding


def write(tmp_path: Path, name: str, content: str | list[dict[str, Any]] | dict[str, Any]) -> Path:
    """A file in tmp_path: YAML text (dedented), or objects dumped as multi-document YAML (.json: as JSON)."""
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, str):
        path.write_text(textwrap.dedent(content))
    elif name.endswith(".json"):
        path.write_text(json.dumps(content))
    else:
        docs = content if isinstance(content, list) else [content]
        path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return path


def doctor(tmp_path: Path, *files: tuple[str, Any], facts: dict[str, Any] | None = None, **kwargs: Any) -> Report:
    """Run the doctor on the given (name, content) files; `facts` is written as a --cluster-facts file."""
    paths = [str(write(tmp_path, name, content)) for name, content in files]
    cluster_facts = write(tmp_path, "cluster-facts.yaml", facts) if facts is not None else None
    return run(paths, cluster_facts=cluster_facts, **kwargs)


def hits(report: Report, rule: str) -> list[Finding]:
    return [f for f in report.findings if f.rule == rule]


def gpu_pod(
    name: str = "train",
    *,
    limits: dict[str, Any] | None = None,
    requests: dict[str, Any] | None = None,
    image: str = "nvcr.io/nvidia/pytorch:25.01-py3",
    namespace: str = "ml",
    **spec: Any,
) -> dict[str, Any]:
    """A Pod with one container asking for GPUs (by default one nvidia.com/gpu as a limit); `spec` adds pod-spec
    fields (tolerations, nodeSelector, volumes, ...)."""
    resources: dict[str, Any] = {}
    if limits is None and requests is None:
        limits = {"nvidia.com/gpu": 1}
    if limits is not None:
        resources["limits"] = limits
    if requests is not None:
        resources["requests"] = requests
    container = {"name": "main", "image": image, "resources": resources}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [container], **spec},
    }


def deployment(name: str, pod: dict[str, Any], replicas: int = 1) -> dict[str, Any]:
    """A Deployment whose template is `pod`'s spec."""
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": pod["metadata"].get("namespace", "default")},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod["spec"]},
        },
    }


def gpu_node(
    name: str,
    *,
    product: str = "NVIDIA-H100-80GB-HBM3",
    gpus: int = 8,
    taints: list[dict[str, str]] | None = None,
    labels: dict[str, str] | None = None,
    runtime: str = "containerd://1.7.27",
    kubelet: str = "v1.33.2",
) -> dict[str, Any]:
    """A Node as `kubectl get nodes -o json` prints it, with GPU Feature Discovery's labels."""
    all_labels = {"kubernetes.io/hostname": name, "nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": product}
    all_labels.update(labels or {})
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": all_labels},
        "spec": {"taints": taints if taints is not None else [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},
        "status": {
            "capacity": {"cpu": "224", "memory": "2063731636Ki", "nvidia.com/gpu": str(gpus), "pods": "110"},
            "allocatable": {"cpu": "220", "memory": "2000000000Ki", "nvidia.com/gpu": str(gpus), "pods": "110"},
            "nodeInfo": {
                "kubeletVersion": kubelet,
                "containerRuntimeVersion": runtime,
                "kernelVersion": "5.15.0-1071-nvidia",
                "osImage": "Ubuntu 22.04.5 LTS",
                "architecture": "amd64",
                "operatingSystem": "linux",
            },
        },
    }


def node_list(*nodes: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "List", "items": list(nodes), "metadata": {"resourceVersion": ""}}


DATA = Path(__file__).parent / "data"


def kubectl_create(*args: str) -> dict[str, Any]:
    """`kubectl create ARGS --dry-run=client -o json` (offline): the object kubectl would send, as a base to edit."""
    import subprocess

    from tests.conftest import require_tool

    require_tool("kubectl")
    split = args.index("--") if "--" in args else len(args)  # kubectl's flags go before the command
    command = ["kubectl", "create", *args[:split], "--dry-run=client", "-o", "json", *args[split:]]
    made = subprocess.run(command, capture_output=True, text=True, check=True)
    obj: dict[str, Any] = json.loads(made.stdout)
    return obj


def vendor_node(
    name: str,
    vendor: str,
    *,
    capacity: dict[str, str],
    labels: dict[str, str] | None = None,
    allocatable: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A Node as `kubectl get nodes -o json` prints it, for an AMD (amd) or Gaudi (intel) node: capacity as the
    device plugin and kubelet report it, labels as the vendor's feature discovery writes them."""
    base = {"amd": {"amd.com/gpu.family": "AI", "feature.node.kubernetes.io/amd-gpu": "true"},
            "intel": {"habana.ai/device.family": "gaudi", "habana.ai/device.count": "8"}}.get(vendor, {})  # fmt: skip
    common = {"cpu": "192", "memory": "2113224092Ki", "pods": "110", "hugepages-2Mi": "0"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **base, **(labels or {})}},
        "spec": {},
        "status": {
            "capacity": {**common, **capacity},
            "allocatable": {**common, **capacity, **(allocatable or {})},
            "nodeInfo": {"kubeletVersion": "v1.33.2", "containerRuntimeVersion": "containerd://1.7.27"},
        },
    }
