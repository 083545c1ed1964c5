"""Build snapshot-h100.json: what `kubectl get nodes,pods,priorityclasses,podgroups -A -o json` prints for a small
H100 cluster with a gpufleet secondary scheduler.

Pod specs come from kubectl itself (`kubectl create job|deployment --dry-run=client`, `kubectl set resources --local`,
`kubectl patch --local`); the script then wraps each pod template the way the API server returns a Pod (metadata,
priority resolved from the PriorityClass, status). Nodes are assembled in the Node shape kubectl prints, with the labels
GPU Feature Discovery sets. Run: `.venv/bin/python scripts/build_k8s_snapshot.py` (needs kubectl; no cluster is
contacted). A development script, not part of the installed package.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import uuid
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[1] / "src" / "gpufleet" / "examples" / "k8s" / "snapshot-h100.json"
NS = uuid.UUID("2b8f8a52-7d3e-4c61-9f0e-2d7c2a1f5e11")
T0 = "2026-11-20T08:00:00Z"
KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: offline, cluster: {server: "https://127.0.0.1:1"}}]
contexts: [{name: offline, context: {cluster: offline, user: offline}}]
current-context: offline
users: [{name: offline, user: {token: unused}}]
"""
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
PRIORITIES = {"training-high": 100000, "training": 10000, "batch-low": 100}


def uid(*parts: str) -> str:
    return str(uuid.uuid5(NS, "/".join(parts)))


def kubectl(args: list[str], stdin: str | None = None) -> Any:
    out = subprocess.run(["kubectl", *args], input=stdin, capture_output=True, text=True, check=True, env=ENV)
    return json.loads(out.stdout)


def template(kind: str, name: str, image: str, limits: str, requests: str | None, patch: dict[str, Any]) -> Any:
    obj = kubectl(["create", kind, name, f"--image={image}", "--dry-run=client", "-o", "json"])
    args = ["set", "resources", "-f", "-", "--local", f"--limits={limits}", "-o", "json"]
    if requests:
        args.insert(-2, f"--requests={requests}")
    obj = kubectl(args, json.dumps(obj))
    obj = kubectl(
        ["patch", "-f", "-", "--local", "--type=merge", "-p", json.dumps(patch), "-o", "json"], json.dumps(obj)
    )
    return obj


def pod_from(owner: Any, name: str, namespace: str, node: str | None, extra_labels: dict[str, str]) -> dict[str, Any]:
    tpl = owner["spec"]["template"]
    spec = json.loads(json.dumps(tpl["spec"]))
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    # the DefaultTolerationSeconds admission plugin adds these to every pod
    spec["tolerations"] = [
        *spec.get("tolerations", []),
        *(
            {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
        ),
    ]
    pcn = spec.get("priorityClassName")
    spec["priority"] = PRIORITIES.get(pcn, 0) if pcn else 0
    spec["preemptionPolicy"] = "PreemptLowerPriority"
    labels = {**(tpl["metadata"].get("labels") or {}), **extra_labels}
    meta = {
        "name": name,
        "namespace": namespace,
        "uid": uid("pod", namespace, name),
        "resourceVersion": str(40000 + len(name)),
        "creationTimestamp": T0,
        "labels": labels,
        "ownerReferences": [
            {
                "apiVersion": owner["apiVersion"],
                "kind": owner["kind"],
                "name": owner["metadata"]["name"],
                "uid": uid(owner["kind"], namespace, owner["metadata"]["name"]),
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    if tpl["metadata"].get("annotations"):
        meta["annotations"] = tpl["metadata"]["annotations"]
    if node:
        spec["nodeName"] = node
        status = {
            "phase": "Running",
            "conditions": [
                {"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": T0}
                for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")
            ],
            "hostIP": "10.0.0.1",
            "podIP": "10.244.1.10",
            "startTime": T0,
            "qosClass": "Burstable",
        }
    else:
        status = {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "lastProbeTime": None,
                    "lastTransitionTime": T0,
                    "reason": "Unschedulable",
                    "message": "waiting for scheduler gpufleet",
                }
            ],
            "qosClass": "Burstable",
        }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def gpu_node(
    name: str,
    product: str,
    gpus: int,
    alloc_gpus: int,
    memory_mib: int,
    family: str,
    cc: str,
    leaf_group: str,
    taints: list[dict[str, str]] | None = None,
    ready: bool = True,
    unschedulable: bool = False,
) -> dict[str, Any]:
    major, minor = cc.split(".")
    labels = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": "dgx-h100" if gpus == 8 else "h100-nvl-4x",
        "topology.kubernetes.io/zone": "dc1-hall2",
        "gpufleet.io/leaf-group": leaf_group,
        "nvidia.com/cuda.driver-version.full": "550.90.07",
        "nvidia.com/cuda.driver-version.major": "550",
        "nvidia.com/cuda.driver-version.minor": "90",
        "nvidia.com/cuda.driver-version.revision": "07",
        "nvidia.com/cuda.runtime-version.full": "12.4",
        "nvidia.com/cuda.runtime-version.major": "12",
        "nvidia.com/cuda.runtime-version.minor": "4",
        "nvidia.com/gpu.compute.major": major,
        "nvidia.com/gpu.compute.minor": minor,
        "nvidia.com/gpu.count": str(gpus),
        "nvidia.com/gpu.family": family,
        "nvidia.com/gpu.machine": "DGXH100" if gpus == 8 else "SYS-421GE-TNRT",
        "nvidia.com/gpu.memory": str(memory_mib),
        "nvidia.com/gpu.mode": "compute",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/mig.capable": "true",
        "nvidia.com/mps.capable": "false",
    }
    cpu, mem = ("224", "2063731096Ki") if gpus == 8 else ("128", "1056508072Ki")
    conditions = [
        {"type": t, "status": "False", "lastHeartbeatTime": T0, "lastTransitionTime": T0, "reason": r, "message": m}
        for t, r, m in (
            ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        )
    ]
    conditions.append(
        {
            "type": "Ready",
            "status": "True" if ready else "Unknown",
            "lastHeartbeatTime": T0,
            "lastTransitionTime": T0,
            "reason": "KubeletReady" if ready else "NodeStatusUnknown",
            "message": "kubelet is posting ready status" if ready else "Kubelet stopped posting node status.",
        }
    )
    spec: dict[str, Any] = {
        "podCIDR": "10.244.0.0/24",
        "podCIDRs": ["10.244.0.0/24"],
        "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
    }
    spec["taints"] += taints or []
    if not ready:
        spec["taints"].append({"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule", "timeAdded": T0})
    if unschedulable:
        spec["unschedulable"] = True
        spec["taints"].append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule", "timeAdded": T0})
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": uid("node", name),
            "resourceVersion": "51234",
            "creationTimestamp": T0,
            "labels": labels,
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": spec,
        "status": {
            "capacity": {
                "cpu": cpu,
                "ephemeral-storage": "1844284980Ki",
                "hugepages-1Gi": "0",
                "hugepages-2Mi": "0",
                "memory": mem,
                "nvidia.com/gpu": str(gpus),
                "pods": "110",
            },
            "allocatable": {
                "cpu": str(int(cpu) - 2),
                "ephemeral-storage": "1699703513229",
                "hugepages-1Gi": "0",
                "hugepages-2Mi": "0",
                "memory": f"{int(mem[:-2]) - 4 * 2**20}Ki",
                "nvidia.com/gpu": str(alloc_gpus),
                "pods": "110",
            },
            "conditions": conditions,
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}, {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "architecture": "amd64",
                "containerRuntimeVersion": "containerd://1.7.20",
                "kernelVersion": "5.15.0-119-generic",
                "kubeProxyVersion": "v1.31.2",
                "kubeletVersion": "v1.31.2",
                "operatingSystem": "linux",
                "osImage": "Ubuntu 22.04.4 LTS",
                "machineID": uid("machine", name).replace("-", ""),
                "systemUUID": uid("system", name),
                "bootID": uid("boot", name),
            },
        },
    }


def build() -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    for name, value in PRIORITIES.items():
        pc = kubectl(["create", "priorityclass", name, f"--value={value}", "--dry-run=client", "-o", "json"])
        pc["metadata"].update({"uid": uid("pc", name), "creationTimestamp": T0})
        items.append(pc)
    h100 = ("NVIDIA-H100-80GB-HBM3", 81559, "hopper", "9.0")
    nvl = ("NVIDIA-H100-NVL", 95830, "hopper", "9.0")
    nodes = [gpu_node(f"dgx-a{i:02d}", h100[0], 8, 8, *h100[1:], leaf_group="su1") for i in range(1, 5)]
    nodes += [gpu_node(f"dgx-b{i:02d}", h100[0], 8, 8, *h100[1:], leaf_group="su2") for i in range(1, 5)]
    nodes[2] = gpu_node("dgx-a03", h100[0], 8, 7, *h100[1:], leaf_group="su1")  # one GPU failed health checks
    nodes.append(gpu_node("dgx-c01", h100[0], 8, 8, *h100[1:], leaf_group="su3", unschedulable=True))
    nodes.append(gpu_node("dgx-c02", h100[0], 8, 8, *h100[1:], leaf_group="su3", ready=False))
    nodes.append(
        gpu_node(
            "dgx-c03",
            h100[0],
            8,
            8,
            *h100[1:],
            leaf_group="su3",
            taints=[{"key": "gpufleet.io/maintenance", "value": "true", "effect": "NoSchedule"}],
        )
    )
    nodes += [gpu_node(f"nvl-{i:02d}", nvl[0], 4, 4, *nvl[1:], leaf_group="pcie") for i in range(1, 3)]
    items += nodes

    gpu_patch = {"spec": {"template": {"spec": {"schedulerName": "gpufleet", "tolerations": [GPU_TOLERATION]}}}}
    image = "nvcr.io/nvidia/pytorch:24.05-py3"
    pods: list[dict[str, Any]] = []
    # Running work placed earlier: low-priority batch pods that preemption may evict, and an inference service.
    batch = template(
        "job",
        "sweep",
        image,
        "nvidia.com/gpu=4,cpu=32,memory=256Gi",
        "cpu=16,memory=128Gi",
        {
            "spec": {
                "template": {
                    "metadata": {"annotations": {"gpufleet.io/runtime-estimate": "6h"}},
                    "spec": {
                        "schedulerName": "gpufleet",
                        "priorityClassName": "batch-low",
                        "tolerations": [GPU_TOLERATION],
                    },
                }
            }
        },
    )
    for i, node in enumerate(["dgx-a01", "dgx-a02", "dgx-b01", "dgx-b02"]):
        pods.append(pod_from(batch, f"sweep-{i}-x7k2p", "research", node, {"job-name": "sweep"}))
    serve = template(
        "deployment",
        "llm-serve",
        "nvcr.io/nvidia/tritonserver:24.05-py3",
        "nvidia.com/gpu=1,cpu=8,memory=64Gi",
        "cpu=4,memory=32Gi",
        gpu_patch,
    )
    for i, node in enumerate(["nvl-01", "nvl-01", "dgx-a03"]):
        pods.append(pod_from(serve, f"llm-serve-7d9f8-{i}q", "serving", node, {"app": "llm-serve"}))
    # Pending for gpufleet: a 4-pod x 8-GPU training gang (PodGroup minMember 4), a 2-GPU fine-tune that belongs in
    # an NVLink pair, inference replicas, an impossible 16-GPU pod, one pinned to absent hardware, one high-priority.
    train = template(
        "job",
        "llama-pretrain",
        image,
        "nvidia.com/gpu=8,cpu=200,memory=1800Gi",
        "cpu=96,memory=1Ti",
        {
            "spec": {
                "template": {
                    "metadata": {"labels": {"scheduling.x-k8s.io/pod-group": "llama-pretrain"}},
                    "spec": {
                        "schedulerName": "gpufleet",
                        "priorityClassName": "training",
                        "tolerations": [GPU_TOLERATION],
                    },
                }
            }
        },
    )
    for i in range(4):
        pods.append(pod_from(train, f"llama-pretrain-{i}-r8d5c", "research", None, {"job-name": "llama-pretrain"}))
    finetune = template(
        "job",
        "ft-lora",
        image,
        "nvidia.com/gpu=2,cpu=32,memory=256Gi",
        None,
        {
            "spec": {
                "template": {
                    "metadata": {"annotations": {"gpufleet.io/runtime-estimate": "2h"}},
                    "spec": {
                        "schedulerName": "gpufleet",
                        "tolerations": [GPU_TOLERATION],
                        "affinity": {
                            "nodeAffinity": {
                                "requiredDuringSchedulingIgnoredDuringExecution": {
                                    "nodeSelectorTerms": [
                                        {
                                            "matchExpressions": [
                                                {
                                                    "key": "nvidia.com/gpu.product",
                                                    "operator": "In",
                                                    "values": ["NVIDIA-H100-NVL"],
                                                },
                                                {"key": "nvidia.com/gpu.memory", "operator": "Gt", "values": ["90000"]},
                                            ]
                                        }
                                    ]
                                }
                            }
                        },
                    },
                }
            }
        },
    )
    pods.append(pod_from(finetune, "ft-lora-5n2xw", "research", None, {"job-name": "ft-lora"}))
    for i in range(2):
        pods.append(pod_from(serve, f"llm-serve-7d9f8-p{i}z", "serving", None, {"app": "llm-serve"}))
    huge = template("job", "too-big", image, "nvidia.com/gpu=16", None, gpu_patch)
    pods.append(pod_from(huge, "too-big-9m4tq", "research", None, {"job-name": "too-big"}))
    b200 = template(
        "job",
        "needs-b200",
        image,
        "nvidia.com/gpu=8",
        None,
        {
            "spec": {
                "template": {
                    "spec": {
                        "schedulerName": "gpufleet",
                        "tolerations": [GPU_TOLERATION],
                        "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-B200"},
                    }
                }
            }
        },
    )
    pods.append(pod_from(b200, "needs-b200-k2w9d", "research", None, {"job-name": "needs-b200"}))
    urgent = template(
        "job",
        "eval-urgent",
        image,
        "nvidia.com/gpu=8,cpu=64,memory=512Gi",
        None,
        {
            "spec": {
                "template": {
                    "spec": {
                        "schedulerName": "gpufleet",
                        "priorityClassName": "training-high",
                        "tolerations": [GPU_TOLERATION],
                    }
                }
            }
        },
    )
    pods.append(pod_from(urgent, "eval-urgent-h3s8v", "research", None, {"job-name": "eval-urgent"}))
    items += pods
    items.append(
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {
                "name": "llama-pretrain",
                "namespace": "research",
                "uid": uid("pg", "llama-pretrain"),
                "creationTimestamp": T0,
            },
            "spec": {"minMember": 4, "scheduleTimeoutSeconds": 600},
            "status": {"phase": "Pending"},
        }
    )
    return {"apiVersion": "v1", "kind": "List", "items": items, "metadata": {"resourceVersion": ""}}


if __name__ == "__main__":
    with tempfile.NamedTemporaryFile("w", suffix=".kubeconfig", delete=False) as f:
        f.write(KUBECONFIG)
    ENV = {**os.environ, "KUBECONFIG": f.name}
    try:
        OUT.write_text(json.dumps(build(), indent=4) + "\n")
    finally:
        os.unlink(f.name)
