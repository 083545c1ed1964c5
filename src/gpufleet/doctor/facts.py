"""What the doctor knows about the cluster the manifests go to: nodes (from `kubectl get nodes -o json`), the
Kubernetes version (`kubectl version -o json`, else the kubelets'), the GPU Operator's version (its Deployment or
pods, or its chart's labels), feature gates (KubeletConfiguration objects, kube-apiserver static pods), and a
cluster-facts file for what no capture shows (host facts such as a loaded nouveau module). Every fact keeps the
file it came from, so a finding about it names that file."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpufleet import yaml_input
from gpufleet.catalog.vendors import gpu_resources, load_vendors
from gpufleet.doctor.accelerators import is_amd_partition
from gpufleet.doctor.load import Document
from gpufleet.doctor.objects import K8sObject, as_dict, as_list, pod_templates, quantity
from gpufleet.errors import ManifestError

Version = tuple[int, ...]
_VERSION = re.compile(r"v?(\d+(?:\.\d+)*)")
_OPERATOR_IMAGE = re.compile(r"/gpu-operator(?:-[a-z]+)?:v?(\d+\.\d+\.\d+)")
_OPERATOR_CHART = re.compile(r"^gpu-operator-v?(\d+\.\d+\.\d+)")
# AMD's operator is also an image named gpu-operator (docker.io/rocm/gpu-operator:v1.3.1): not NVIDIA's releases
_OTHER_OPERATOR = re.compile(r"(^|/)(rocm|amd[a-z0-9-]*)/gpu-operator[:@]")


def parse_version(text: str | None) -> Version | None:
    """(1, 33, 2) from "v1.33.2", "1.33.2-eks-1234", "containerd://1.7.27" or "570.133.20"."""
    if not text:
        return None
    found = _VERSION.search(str(text).rpartition("://")[2])
    return tuple(int(p) for p in found.group(1).split(".")) if found else None


def show(version: Version) -> str:
    return ".".join(str(p) for p in version)


class HostFacts(BaseModel):
    """Facts about one node that no Kubernetes object shows (`gpufleet doctor --host-facts` prints this host's)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    driver_version: str | None = Field(None, alias="driverVersion")
    kernel: str | None = None
    kernel_headers: bool | None = Field(None, alias="kernelHeaders")
    nouveau_loaded: bool | None = Field(None, alias="nouveauLoaded")
    nouveau_blacklisted: bool | None = Field(None, alias="nouveauBlacklisted")
    container_runtime: str | None = Field(None, alias="containerRuntime")
    gpu_numa_nodes: dict[int, int] | None = Field(
        None, alias="gpuNumaNodes", description="GPU index -> the NUMA node of its PCIe root (sysfs numa_node)"
    )
    runtime_configs: dict[str, str] | None = Field(
        None,
        alias="runtimeConfigs",
        description="path -> text of the container runtimes' config files (containerd's config.toml and the "
        "drop-ins it imports or holds in conf.d, CRI-O's crio.conf and crio.conf.d, Docker's daemon.json)",
    )
    runtime_config_modified: dict[str, float] | None = Field(
        None, alias="runtimeConfigModified", description="path -> when the file was last written (Unix seconds)"
    )
    runtime_started: dict[str, float] | None = Field(
        None, alias="runtimeStarted", description="containerd, crio, dockerd -> when its process started (Unix seconds)"
    )
    container_packages: dict[str, str] | None = Field(
        None,
        alias="containerPackages",
        description="installed NVIDIA container packages (nvidia-container-toolkit, nvidia-docker2, ...) -> version",
    )

    @property
    def gpus_per_numa_node(self) -> int | None:
        """The most GPUs one NUMA node holds, when the GPUs' NUMA nodes are known."""
        if not self.gpu_numa_nodes:
            return None
        counts: dict[int, int] = {}
        for numa in self.gpu_numa_nodes.values():
            counts[numa] = counts.get(numa, 0) + 1
        return max(counts.values())


class ClusterFactsFile(BaseModel):
    """The --cluster-facts file."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    kubernetes_version: str | None = Field(None, alias="kubernetesVersion")
    gpu_operator_version: str | None = Field(None, alias="gpuOperatorVersion")
    container_runtime: str | None = Field(None, alias="containerRuntime")
    feature_gates: dict[str, dict[str, bool]] = Field(default_factory=dict, alias="featureGates")
    nodes: dict[str, HostFacts] = Field(default_factory=dict)


@dataclass(slots=True)
class NodeFacts:
    name: str
    source: str
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[dict[str, Any]] = field(default_factory=list)
    capacity: dict[str, float] = field(default_factory=dict)
    allocatable: dict[str, float] = field(default_factory=dict)
    kubelet_version: str | None = None
    container_runtime: str | None = None  # containerd://1.7.27, cri-o://1.31.1
    kernel: str | None = None
    os_image: str | None = None
    host: HostFacts | None = None
    host_source: str = ""

    @property
    def gpus(self) -> float:
        """Whole devices of any vendor in capacity, else AMD partitions (a node in mixed naming), else GPU Feature
        Discovery's count."""
        whole = max((v for k, v in self.capacity.items() if k in gpu_resources()), default=0.0)
        partitions = sum(v for k, v in self.capacity.items() if is_amd_partition(k))
        return whole or partitions or quantity(self.labels.get("nvidia.com/gpu.count", 0))

    @property
    def is_gpu_node(self) -> bool:
        return self.gpus > 0 or self.labels.get("nvidia.com/gpu.present") == "true"

    @property
    def gpu_product(self) -> str | None:
        """The product its vendor's feature discovery labels (nvidia.com/gpu.product, amd.com/gpu.product-name,
        habana.ai/device.type)."""
        return next(
            (self.labels[v.product_label] for v in load_vendors().values() if self.labels.get(v.product_label)), None
        )

    @property
    def driver_version(self) -> str | None:
        """The NVIDIA driver, from the host facts or GPU Feature Discovery's labels."""
        if self.host and self.host.driver_version:
            return self.host.driver_version
        labels = self.labels
        full = labels.get("nvidia.com/cuda.driver-version.full")
        if full:
            return full
        parts = [labels.get(f"nvidia.com/cuda.driver.{p}") for p in ("major", "minor", "rev")]
        if parts[0] and parts[1]:
            return ".".join(p for p in parts if p)
        return None

    @property
    def runtime(self) -> str | None:
        return (self.host.container_runtime if self.host and self.host.container_runtime else None) or (
            self.container_runtime
        )


@dataclass(slots=True)
class ClusterFacts:
    nodes: dict[str, NodeFacts] = field(default_factory=dict)
    kubernetes_version: Version | None = None
    kubernetes_source: str = ""
    gpu_operator_version: Version | None = None
    gpu_operator_source: str = ""
    gpu_operator_ref: str = ""  # the object it was read from (Kind/namespace/name); "" from the facts file
    container_runtime: str | None = None  # the cluster-wide default from the facts file
    runtime_source: str = ""
    # component (kubelet, apiserver) -> gate -> on; with the file that set it
    feature_gates: dict[str, dict[str, bool]] = field(default_factory=dict)
    gate_sources: dict[str, str] = field(default_factory=dict)
    # admission plugins a kube-apiserver static pod in the input enables (--enable minus --disable), and its file
    admission_plugins: set[str] = field(default_factory=set)
    admission_source: str = ""

    @property
    def gpu_nodes(self) -> list[NodeFacts]:
        return [n for n in self.nodes.values() if n.is_gpu_node]

    def runtimes(self) -> dict[str, list[NodeFacts]]:
        """Container runtime name (containerd, cri-o) -> the nodes running it."""
        out: dict[str, list[NodeFacts]] = {}
        for node in self.nodes.values():
            runtime = node.runtime or self.container_runtime
            if runtime:
                out.setdefault(runtime.partition("://")[0].lower(), []).append(node)
        return out


def node_facts(obj: K8sObject) -> NodeFacts:
    status = as_dict(obj.data.get("status"))
    info = as_dict(status.get("nodeInfo"))
    return NodeFacts(
        name=obj.name,
        source=obj.doc.file,
        labels=obj.labels,
        taints=[t for t in as_list(obj.spec.get("taints")) if isinstance(t, dict)],
        capacity={k: quantity(v) for k, v in as_dict(status.get("capacity")).items()},
        allocatable={k: quantity(v) for k, v in as_dict(status.get("allocatable")).items()},
        kubelet_version=info.get("kubeletVersion"),
        container_runtime=info.get("containerRuntimeVersion"),
        kernel=info.get("kernelVersion"),
        os_image=info.get("osImage"),
    )


def flag_values(args: list[str], flag: str) -> list[str]:
    """Every value of `flag` in a command line, written `--flag=value` or `--flag value`."""
    out = []
    for i, arg in enumerate(args):
        if arg.startswith(flag + "="):
            out.append(arg[len(flag) + 1 :])
        elif arg == flag and i + 1 < len(args):
            out.append(args[i + 1])
    return out


def _names(text: str) -> set[str]:
    return {p.strip() for p in text.split(",") if p.strip()}


def _gates(text: str) -> dict[str, bool]:
    out = {}
    for part in text.split(","):
        name, _, value = part.partition("=")
        if name.strip() and value.strip().lower() in ("true", "false"):
            out[name.strip()] = value.strip().lower() == "true"
    return out


def _operator_version(obj: K8sObject) -> str | None:
    chart = obj.labels.get("helm.sh/chart", "")
    found = _OPERATOR_CHART.match(chart)
    if found:
        return found.group(1)
    for template in pod_templates(obj):
        for c in template.containers():
            image = str(c.get("image", ""))
            match = _OPERATOR_IMAGE.search(image) if not _OTHER_OPERATOR.search(image.lower()) else None
            if match and (c.get("name") == "gpu-operator" or "gpu-operator:" in str(c.get("image"))):
                return match.group(1)
    return None


def gather(documents: list[Document], objects: list[K8sObject]) -> ClusterFacts:
    facts = ClusterFacts()
    kubelet_versions: list[tuple[Version, str]] = []
    for doc in documents:
        server = doc.data.get("serverVersion")
        if isinstance(server, dict) and facts.kubernetes_version is None:
            facts.kubernetes_version = parse_version(server.get("gitVersion")) or parse_version(
                f"{server.get('major', '')}.{str(server.get('minor', '')).rstrip('+')}"
            )
            facts.kubernetes_source = doc.file
    for obj in objects:
        if obj.kind == "Node":
            node = node_facts(obj)
            facts.nodes[node.name] = node
            version = parse_version(node.kubelet_version)
            if version:
                kubelet_versions.append((version, obj.doc.file))
        elif obj.kind == "KubeletConfiguration":
            for gate, on in as_dict(obj.data.get("featureGates")).items():
                facts.feature_gates.setdefault("kubelet", {})[str(gate)] = bool(on)
                facts.gate_sources["kubelet"] = obj.doc.file
        if facts.gpu_operator_version is None and obj.kind in ("Deployment", "Pod", "ReplicaSet"):
            operator = _operator_version(obj)
            if operator:
                facts.gpu_operator_version = parse_version(operator)
                facts.gpu_operator_source = obj.doc.file
                facts.gpu_operator_ref = obj.ref
        if obj.kind == "Pod" and obj.name.startswith("kube-apiserver"):
            for template in pod_templates(obj):
                for c in template.containers():
                    args = [str(a) for a in [*as_list(c.get("command")), *as_list(c.get("args"))]]
                    for value in flag_values(args, "--feature-gates"):
                        facts.feature_gates.setdefault("apiserver", {}).update(_gates(value))
                        facts.gate_sources["apiserver"] = obj.doc.file
                    enabled = {p for v in flag_values(args, "--enable-admission-plugins") for p in _names(v)}
                    disabled = {p for v in flag_values(args, "--disable-admission-plugins") for p in _names(v)}
                    if enabled - disabled:
                        facts.admission_plugins |= enabled - disabled
                        facts.admission_source = obj.doc.file
    if facts.kubernetes_version is None and kubelet_versions:
        # The control plane is at least as new as its kubelets; the newest kubelet is the best floor we have.
        facts.kubernetes_version, facts.kubernetes_source = max(kubelet_versions)
    return facts


def read_cluster_facts(path: Path) -> ClusterFactsFile:
    """A --cluster-facts file, validated."""
    name = str(path)
    raw = yaml_input.load_file(path) or {}
    if not isinstance(raw, dict):
        raise ManifestError(name, "not a mapping", fix="see `gpufleet doctor --help` for the cluster-facts format")
    try:
        given = ClusterFactsFile.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ManifestError(
            name, f"{where}: {first['msg']}", fix="see `gpufleet doctor --help` for the cluster-facts format"
        ) from None
    return given


def merge_cluster_facts(given: ClusterFactsFile, name: str, facts: ClusterFacts) -> None:
    """Merge the cluster-facts file `name` into `facts` (the file wins: it is what the operator says)."""
    if given.kubernetes_version:
        facts.kubernetes_version, facts.kubernetes_source = parse_version(given.kubernetes_version), name
    if given.gpu_operator_version:
        facts.gpu_operator_version, facts.gpu_operator_source = parse_version(given.gpu_operator_version), name
        facts.gpu_operator_ref = ""
    if given.container_runtime:
        facts.container_runtime, facts.runtime_source = given.container_runtime, name
    for component, gates in given.feature_gates.items():
        facts.feature_gates.setdefault(component.lower(), {}).update(gates)
        facts.gate_sources[component.lower()] = name
    for node_name, host in given.nodes.items():
        node = facts.nodes.get(node_name)
        if node is None:
            node = facts.nodes[node_name] = NodeFacts(name=node_name, source=name)
        node.host, node.host_source = host, name
