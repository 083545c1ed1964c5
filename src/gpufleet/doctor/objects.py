"""Kubernetes objects as the rules see them, and the pod templates inside every kind of workload that carries
one (core workloads, Jobs and CronJobs, and the training and serving operators' kinds)."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from gpufleet.catalog.vendors import gpu_resources
from gpufleet.doctor.accelerators import MIG_PREFIX, is_accelerator
from gpufleet.doctor.load import Document

GPU_RESOURCES = tuple(sorted(gpu_resources()))  # every vendor's whole device: nvidia.com/gpu, amd.com/gpu, ...
MIG_RESOURCE_PREFIX = MIG_PREFIX


@dataclass(frozen=True, slots=True)
class K8sObject:
    doc: Document

    @property
    def data(self) -> dict[str, Any]:
        return self.doc.data

    @property
    def kind(self) -> str:
        return str(self.data.get("kind") or "")

    @property
    def api_version(self) -> str:
        return str(self.data.get("apiVersion") or "")

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def metadata(self) -> dict[str, Any]:
        meta = self.data.get("metadata")
        return meta if isinstance(meta, dict) else {}

    @property
    def name(self) -> str:
        return str(self.metadata.get("name") or self.metadata.get("generateName") or "")

    @property
    def namespace(self) -> str:
        return str(self.metadata.get("namespace") or "")

    @property
    def labels(self) -> dict[str, str]:
        return mapping(self.metadata.get("labels"))

    @property
    def annotations(self) -> dict[str, str]:
        return mapping(self.metadata.get("annotations"))

    @property
    def spec(self) -> dict[str, Any]:
        spec = self.data.get("spec")
        return spec if isinstance(spec, dict) else {}

    @property
    def is_live(self) -> bool:
        """Read back from a cluster (`kubectl get -o json|yaml`), not a manifest to apply."""
        meta = self.metadata  # `kubectl create --dry-run=client -o yaml` writes creationTimestamp: null and status: {}
        return bool(
            self.data.get("status") or meta.get("uid") or meta.get("creationTimestamp") or meta.get("resourceVersion")
        )

    @property
    def ref(self) -> str:
        """Kind/namespace/name, as findings name objects (Kind/name for cluster-scoped ones)."""
        return "/".join(p for p in (self.kind, self.namespace, self.name) if p)


def mapping(value: Any) -> dict[str, str]:
    return {str(k): "" if v is None else str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def selector_matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether a Kubernetes label selector (matchLabels, and matchExpressions with In, NotIn, Exists and
    DoesNotExist) selects an object with `labels`. An empty selector selects everything; a malformed one (an
    unknown operator, a field of the wrong type) selects nothing, as the API server would refuse it. A null
    selector means different things to different APIs: the caller decides."""
    if not isinstance(selector, dict):
        return False
    match_labels, expressions = selector.get("matchLabels"), selector.get("matchExpressions")
    if not isinstance(match_labels, dict | None) or not isinstance(expressions, list | None):
        return False
    for key, value in (match_labels or {}).items():
        if labels.get(str(key)) != ("" if value is None else str(value)):
            return False
    for expression in expressions or []:
        if not isinstance(expression, dict):
            return False
        key, operator, values = str(expression.get("key", "")), expression.get("operator"), expression.get("values")
        wanted = {"" if v is None else str(v) for v in values} if isinstance(values, list) else set()
        if operator == "In":
            ok = key in labels and labels[key] in wanted
        elif operator == "NotIn":
            ok = key not in labels or labels[key] not in wanted
        elif operator == "Exists":
            ok = key in labels
        elif operator == "DoesNotExist":
            ok = key not in labels
        else:
            return False
        if not ok:
            return False
    return True


@dataclass(frozen=True, slots=True)
class PodTemplate:
    """A pod spec found in an object, where it was found, and the labels its pods get."""

    obj: K8sObject
    path: str  # e.g. spec.template.spec
    spec: dict[str, Any]
    labels: dict[str, str]
    annotations: dict[str, str]
    replicas: int  # pods this template makes at most (1 when the kind does not say)

    def containers(self, init: bool = True) -> Iterator[dict[str, Any]]:
        keys = ("initContainers", "containers") if init else ("containers",)
        for key in keys:
            for c in as_list(self.spec.get(key)):
                if isinstance(c, dict):
                    yield c

    def gpu_request(self) -> float:
        """GPUs (or MIG slices) the pod asks for: the largest of its init containers' and the sum of its containers'
        limits (requests when a limit is missing), as the scheduler counts them."""
        regular = sum(container_gpus(c) for c in self.containers(init=False))
        inits = [c for c in as_list(self.spec.get("initContainers")) if isinstance(c, dict)]
        init = max((container_gpus(c) for c in inits), default=0.0)
        return max(regular, init)

    def env(self) -> dict[str, str]:
        """Every container's plain `env` values, merged (NCCL settings are the same for all ranks' containers)."""
        out: dict[str, str] = {}
        for c in self.containers():
            for item in as_list(c.get("env")):
                if isinstance(item, dict) and "name" in item and "value" in item:
                    out[str(item["name"])] = "" if item["value"] is None else str(item["value"])
        return out


def container_env(container: dict[str, Any]) -> dict[str, str]:
    """A container's plain env values (valueFrom ones cannot be known from a manifest)."""
    out: dict[str, str] = {}
    for item in as_list(container.get("env")):
        if isinstance(item, dict) and "name" in item and "value" in item:
            out[str(item["name"])] = "" if item["value"] is None else str(item["value"])
    return out


def privileged(container: dict[str, Any]) -> bool:
    return as_dict(container.get("securityContext")).get("privileged") is True


def host_mounts(template: PodTemplate, container: dict[str, Any]) -> dict[str, str]:
    """Where a container mounts host paths: normalised mountPath -> hostPath path (subPath appended)."""
    host = {
        str(v["name"]): str(as_dict(v.get("hostPath")).get("path") or "")
        for v in as_list(template.spec.get("volumes"))
        if isinstance(v, dict) and v.get("name") and isinstance(v.get("hostPath"), dict)
    }
    out = {}
    for mount in map(as_dict, as_list(container.get("volumeMounts"))):
        source = host.get(str(mount.get("name", "")))
        if source and mount.get("mountPath"):
            sub = str(mount.get("subPath") or "")
            out[posixpath.normpath(str(mount["mountPath"]))] = posixpath.normpath(posixpath.join(source, sub))
    return out


def host_path_reaches(mounts: dict[str, str], path: str) -> str | None:
    """The host path seen at `path` inside the container through a hostPath mount at or above it, or None."""
    path = posixpath.normpath(path)
    for mount_path in sorted(mounts, key=len, reverse=True):
        if path == mount_path or path.startswith(mount_path.rstrip("/") + "/"):
            return posixpath.normpath(posixpath.join(mounts[mount_path], posixpath.relpath(path, mount_path)))
    return None


def resources(container: dict[str, Any], section: str) -> dict[str, Any]:
    return as_dict(as_dict(container.get("resources")).get(section))


def gpu_resource_names(container: dict[str, Any]) -> set[str]:
    """The accelerator resources a container names: any vendor's whole devices, NVIDIA's MIG slices and shared
    replicas (<resource>.shared), AMD's partitions (amd.com/cpx_nps4)."""
    names: set[str] = set()
    for section in ("limits", "requests"):
        names.update(name for name in resources(container, section) if is_accelerator(name))
    return names


def container_accelerators(container: dict[str, Any]) -> dict[str, float]:
    """Accelerator resource -> how many the container gets (its limit, else its request), for positive amounts."""
    out = {}
    for name in gpu_resource_names(container):
        limit = resources(container, "limits").get(name)
        amount = quantity(limit if limit is not None else resources(container, "requests").get(name))
        if amount > 0:
            out[name] = amount
    return out


def quantity(value: Any) -> float:
    """A resource quantity as a number ("2" -> 2, 1 -> 1, "500m" -> 0.5, "1Gi" -> 1073741824); 0 when it cannot be
    read."""
    if isinstance(value, bool):
        return 0.0
    if isinstance(value, int | float):
        return float(value)
    exact = exact_quantity(value)
    return float(exact) if exact is not None else 0.0


def container_gpus(container: dict[str, Any]) -> float:
    total = 0.0
    for name in gpu_resource_names(container):
        limit = resources(container, "limits").get(name)
        total += quantity(limit if limit is not None else resources(container, "requests").get(name))
    return total


def _replicas(value: Any, default: int = 1) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else default


def pod_templates(obj: K8sObject) -> list[PodTemplate]:
    """The pod specs `obj` carries (none for kinds without pods)."""
    kind, spec = obj.kind, obj.spec
    found: list[tuple[str, Any, int]] = []
    if kind == "Pod":
        return [PodTemplate(obj, "spec", spec, obj.labels, obj.annotations, 1)] if spec else []
    if kind in ("Deployment", "StatefulSet", "ReplicaSet", "ReplicationController"):
        found.append(("spec.template", spec.get("template"), _replicas(spec.get("replicas"))))
    elif kind == "DaemonSet":
        found.append(("spec.template", spec.get("template"), 1))
    elif kind == "Job":
        found.append(("spec.template", spec.get("template"), _replicas(spec.get("parallelism"))))
    elif kind == "CronJob":
        job = as_dict(as_dict(spec.get("jobTemplate")).get("spec"))
        found.append(("spec.jobTemplate.spec.template", job.get("template"), _replicas(job.get("parallelism"))))
    elif kind == "PodTemplate":
        found.append(("template", obj.data.get("template"), 1))
    elif kind in ("PyTorchJob", "TFJob", "MPIJob", "XGBoostJob", "PaddleJob", "JAXJob"):
        # Kubeflow training operator: spec.<framework>ReplicaSpecs.<Role>.template
        for key, specs in spec.items():
            if key.endswith("ReplicaSpecs") and isinstance(specs, dict):
                for role, rs in specs.items():
                    rs = as_dict(rs)
                    found.append((f"spec.{key}.{role}.template", rs.get("template"), _replicas(rs.get("replicas"))))
    elif kind == "TrainJob":  # Kubeflow Trainer v2: the runtime holds the pod spec; only overrides here
        pass
    elif kind == "JobSet":
        for i, rj in enumerate(as_list(spec.get("replicatedJobs"))):
            rj = as_dict(rj)
            job = as_dict(as_dict(rj.get("template")).get("spec"))
            n = _replicas(rj.get("replicas")) * _replicas(job.get("parallelism"))
            found.append((f"spec.replicatedJobs[{i}].template.spec.template", job.get("template"), n))
    elif kind == "LeaderWorkerSet":
        lwt = as_dict(spec.get("leaderWorkerTemplate"))
        size = _replicas(lwt.get("size"))
        found.append(("spec.leaderWorkerTemplate.leaderTemplate", lwt.get("leaderTemplate"), 1))
        found.append(("spec.leaderWorkerTemplate.workerTemplate", lwt.get("workerTemplate"), max(size - 1, 1)))
    elif kind in ("RayCluster", "RayJob", "RayService"):
        cluster = spec
        if kind == "RayJob":
            cluster = as_dict(spec.get("rayClusterSpec"))
        elif kind == "RayService":
            cluster = as_dict(spec.get("rayClusterConfig"))
        prefix = {"RayJob": "spec.rayClusterSpec", "RayService": "spec.rayClusterConfig"}.get(kind, "spec")
        head = as_dict(cluster.get("headGroupSpec"))
        found.append((f"{prefix}.headGroupSpec.template", head.get("template"), 1))
        for i, group in enumerate(as_list(cluster.get("workerGroupSpecs"))):
            group = as_dict(group)
            n = _replicas(group.get("maxReplicas"), _replicas(group.get("replicas")))
            found.append((f"{prefix}.workerGroupSpecs[{i}].template", group.get("template"), n))
    out = []
    for path, template, replicas in found:
        template = as_dict(template)
        pod_spec = template.get("spec")
        if isinstance(pod_spec, dict):
            meta = as_dict(template.get("metadata"))
            labels, annotations = mapping(meta.get("labels")), mapping(meta.get("annotations"))
            out.append(PodTemplate(obj, f"{path}.spec", pod_spec, labels, annotations, replicas))
    return out


_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:[eE]([+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?$")
_QUANTITY_SUFFIX = {
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "k": Decimal(10**3), "M": Decimal(10**6),
    "G": Decimal(10**9), "T": Decimal(10**12), "P": Decimal(10**15), "E": Decimal(10**18), "Ki": Decimal(2**10),
    "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40), "Pi": Decimal(2**50), "Ei": Decimal(2**60),
}  # fmt: skip


def exact_quantity(value: Any) -> Decimal | None:
    """A Kubernetes quantity exactly ("500m" -> 0.5, "1Gi" -> 1073741824, "1e3" -> 1000, 0.5 -> 0.5); None when it
    is not one."""
    if isinstance(value, bool) or value is None:
        return None
    found = _QUANTITY.match(str(value).strip())
    if not found:
        return None
    number, exponent, suffix = found.groups()
    try:
        out = Decimal(number)
    except InvalidOperation:
        return None
    if exponent:
        out = out.scaleb(int(exponent))
    return out * _QUANTITY_SUFFIX[suffix] if suffix else out


def tolerates(toleration: dict[str, Any], taint: dict[str, Any]) -> bool:
    """Whether a toleration tolerates a taint, as Kubernetes matches them (core/v1 Toleration.ToleratesTaint): an
    empty effect matches every effect, an empty key (with Exists) every key; Equal (the default) compares values,
    Exists ignores them, Lt and Gt compare them as integers (taint value < or > the toleration's)."""
    effect, key = str(toleration.get("effect") or ""), str(toleration.get("key") or "")
    if effect and effect != str(taint.get("effect") or ""):
        return False
    if key and key != str(taint.get("key") or ""):
        return False
    operator = str(toleration.get("operator") or "Equal")
    mine, theirs = str(toleration.get("value") or ""), str(taint.get("value") or "")
    if operator == "Equal":
        return mine == theirs
    if operator == "Exists":
        return True
    if operator in ("Lt", "Gt") and re.fullmatch(r"-?\d+", mine) and re.fullmatch(r"-?\d+", theirs):
        return int(theirs) < int(mine) if operator == "Lt" else int(theirs) > int(mine)
    return False


def _requirement_holds(requirement: Any, values_of: dict[str, str]) -> bool:
    if not isinstance(requirement, dict):
        return False
    key, operator = str(requirement.get("key", "")), requirement.get("operator")
    wanted = [str(v) for v in as_list(requirement.get("values"))]
    have = values_of.get(key)
    if operator == "In":
        return have is not None and have in wanted
    if operator == "NotIn":
        return have is None or have not in wanted
    if operator == "Exists":
        return have is not None
    if operator == "DoesNotExist":
        return have is None
    integers = have is not None and len(wanted) == 1 and all(re.fullmatch(r"-?\d+", v) for v in (have, *wanted))
    if operator in ("Gt", "Lt") and integers and have is not None:
        return int(have) > int(wanted[0]) if operator == "Gt" else int(have) < int(wanted[0])
    return False


def node_selection_matches(spec: dict[str, Any], node_name: str, node_labels: dict[str, str]) -> bool:
    """Whether a pod spec's nodeName, nodeSelector and required node affinity admit a node: the nodeSelector's
    labels all, and one of the required nodeSelectorTerms (each term's matchExpressions on labels and matchFields
    on metadata.name all; an empty term matches nothing)."""
    if spec.get("nodeName") and str(spec["nodeName"]) != node_name:
        return False
    for key, value in as_dict(spec.get("nodeSelector")).items():
        if node_labels.get(str(key)) != ("" if value is None else str(value)):
            return False
    required = as_dict(
        as_dict(as_dict(spec.get("affinity")).get("nodeAffinity")).get("requiredDuringSchedulingIgnoredDuringExecution")
    )
    if not required:
        return True
    fields = {"metadata.name": node_name}
    for term in map(as_dict, as_list(required.get("nodeSelectorTerms"))):
        on_labels, on_fields = as_list(term.get("matchExpressions")), as_list(term.get("matchFields"))
        if not on_labels and not on_fields:
            continue
        if all(_requirement_holds(r, node_labels) for r in on_labels) and all(
            _requirement_holds(r, fields) for r in on_fields
        ):
            return True
    return False
