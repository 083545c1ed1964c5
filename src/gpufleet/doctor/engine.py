"""One doctor run: read the inputs, sort Kubernetes objects from the configs and captures, gather the cluster's
facts, validate against the schemas, run every rule. A rule that fails on odd input is reported, never fatal:
the other rules' findings still come out."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from itertools import repeat
from pathlib import Path

from gpufleet.doctor import schema
from gpufleet.doctor.catalog import rule_catalog
from gpufleet.doctor.facts import ClusterFacts, Version, gather, merge_cluster_facts, parse_version, read_cluster_facts
from gpufleet.doctor.findings import Finding, label, ordered
from gpufleet.doctor.load import Document, Loaded, input_files, load
from gpufleet.doctor.objects import K8sObject, pod_templates
from gpufleet.doctor.rules import registered
from gpufleet.doctor.rules.base import Context
from gpufleet.model import Severity

PARALLEL_FROM_FILES = 1000  # fewer files are read faster than worker processes start
# Custom resources the doctor reads for facts or pod templates (rules add the kinds they read).
KNOWN_KINDS = {
    "PyTorchJob", "TFJob", "MPIJob", "XGBoostJob", "PaddleJob", "JAXJob", "TrainJob", "JobSet", "LeaderWorkerSet",
    "RayCluster", "RayJob", "RayService", "KubeletConfiguration",
}  # fmt: skip


def config_kind(data: dict[str, object]) -> str | None:
    """The kind of a non-Kubernetes document the doctor reads, or None."""
    if isinstance(data.get("runtimeConfig"), dict):
        return "runtime-config"  # containerd, CRI-O or Docker (load.py keeps its text)
    if isinstance(data.get("fabricSettings"), list):
        return "fabric-settings"  # `gpufleet fabric settings -o json`
    if "serverVersion" in data or "clientVersion" in data:
        return "kubectl-version"
    if "mig-configs" in data:
        return "mig-parted-config"
    if "version" in data and any(k in data for k in ("sharing", "flags", "resources")):
        return "device-plugin-config"
    if isinstance(data.get("groups"), list):
        return "prometheus-rules"
    if isinstance(data.get("kubeletconfig"), dict):
        return "kubelet-configz"  # `kubectl get --raw /api/v1/nodes/NODE/proxy/configz`
    return None


@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)
    files: int = 0
    objects: int = 0
    schema_version: str = ""
    facts: ClusterFacts = field(default_factory=ClusterFacts)

    @property
    def errors(self) -> int:
        return sum(1 for f in self.findings if f.severity is Severity.critical)

    def counts(self) -> dict[str, int]:
        """Findings by the doctor's word for their severity: error, warning, info."""
        return {label(s): sum(1 for f in self.findings if f.severity is s) for s in Severity}


def known_kinds() -> set[str]:
    return KNOWN_KINDS | {kind for r in registered().values() for kind in r.reads}


def is_object(data: dict[str, object]) -> bool:
    return isinstance(data.get("apiVersion"), str) and isinstance(data.get("kind"), str)


def schema_findings(objects: Iterable[K8sObject], version: str, known: set[str]) -> list[Finding]:
    """GF000 for what the Kubernetes schemas refuse; GF090 for kinds neither the schemas nor the rules know."""
    findings = []
    for obj in objects:
        if obj.is_live:
            continue  # captured from a cluster: the API server accepted it already
        if schema.has_schema(obj, version):
            findings.extend(schema.validate(obj, version))
        elif schema.is_builtin_kind(obj.kind, version):
            findings.append(
                Finding(
                    "GF000",
                    Severity.critical,
                    obj.doc.file,
                    obj.ref,
                    f"Kubernetes {version.rsplit('.', 1)[0]} does not serve {obj.kind} as {obj.api_version}",
                    f"use the apiVersion `kubectl api-resources` lists for {obj.kind}",
                    obj.doc.line,
                )
            )
        elif obj.kind not in known and not pod_templates(obj):
            findings.append(
                Finding(
                    "GF090",
                    Severity.info,
                    obj.doc.file,
                    obj.ref,
                    f"kind {obj.kind} ({obj.api_version}) has no schema here and no rules: not checked",
                    "nothing to do if it is a custom resource; check its apiVersion and kind otherwise",
                    obj.doc.line,
                )
            )
    return findings


def _read_and_validate(files: list[str], version: str) -> tuple[Loaded, list[Finding]]:
    """One worker's share: read the files and validate their objects against `version`'s schemas ("" skips it)."""
    loaded = load(files)
    if not version:
        return loaded, []
    objects = [K8sObject(d) for d in loaded.documents if is_object(d.data)]
    return loaded, schema_findings(objects, version, known_kinds())


def _workers(files: int) -> int:
    if files < PARALLEL_FROM_FILES or "fork" not in multiprocessing.get_all_start_methods():
        return 1
    return max(1, min(os.cpu_count() or 1, files // (PARALLEL_FROM_FILES // 2)))


def _read_all(files: list[str], version: str, on_file: Callable[[str], None] | None) -> tuple[Loaded, list[Finding]]:
    """Read and validate, on every core for a large repository (parsing YAML is most of a run's time)."""
    workers = 1 if "-" in files else _workers(len(files))  # standard input is read once, here
    if workers == 1:
        loaded = load(files, on_file)
        objects = [K8sObject(d) for d in loaded.documents if is_object(d.data)]
        return loaded, schema_findings(objects, version, known_kinds()) if version else []
    size = max(1, len(files) // (workers * 8))  # small shares: the progress bar moves and the cores stay even
    shares = [files[i : i + size] for i in range(0, len(files), size)]
    merged, findings = Loaded(), []
    # fork: the workers start with the schemas' module state and the rules already imported
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        for share, (loaded, found) in zip(shares, pool.map(_read_and_validate, shares, repeat(version)), strict=True):
            merged.documents.extend(loaded.documents)
            merged.findings.extend(loaded.findings)
            merged.files += loaded.files
            findings.extend(found)
            if on_file is not None:
                for name in share:
                    on_file(name)
    return merged, findings


def run(
    paths: Iterable[str],
    *,
    cluster_facts: Path | None = None,
    kube_version: Version | None = None,
    check_schema: bool = True,
    on_file: Callable[[str], None] | None = None,
) -> Report:
    files = input_files(paths)
    given = read_cluster_facts(cluster_facts) if cluster_facts is not None else None
    # The version known before anything is read (a capture in the input may still name another).
    known_before = kube_version or (parse_version(given.kubernetes_version) if given else None)
    guess = schema.schema_version(known_before) if check_schema else ""
    loaded, checked = _read_all(files, guess, on_file)
    findings = list(loaded.findings)
    objects: list[K8sObject] = []
    configs: list[Document] = []
    unknown: list[Document] = []
    for doc in loaded.documents:
        if is_object(doc.data):
            objects.append(K8sObject(doc))
        elif config_kind(doc.data):
            configs.append(doc)
        else:
            unknown.append(doc)
    facts = gather(configs, objects)
    if given is not None:
        merge_cluster_facts(given, str(cluster_facts), facts)
    if kube_version is not None:
        facts.kubernetes_version, facts.kubernetes_source = kube_version, "--kube-version"
    rules = registered()
    version = schema.schema_version(facts.kubernetes_version) if check_schema else ""
    if version != guess:  # a capture in the input named the cluster's version: validate against that one
        checked = schema_findings(objects, version, known_kinds())
    findings.extend(checked)
    for doc in unknown:
        findings.append(
            Finding(
                "GF090",
                Severity.info,
                doc.file,
                "",
                "not a Kubernetes object (no apiVersion and kind) or a config the doctor reads: skipped",
                "give Kubernetes manifests, kubectl captures, device-plugin or mig-parted configs",
                doc.line,
            )
        )
    catalog = rule_catalog()
    ctx = Context(objects, facts, configs)
    for rule_id, entry in rules.items():
        info = catalog[rule_id]
        try:
            hits = list(entry.check(ctx))
        except Exception as exc:  # a rule tripping on odd input must not hide the others' findings
            findings.append(
                Finding(
                    rule_id,
                    Severity.info,
                    "",
                    "",
                    f"the rule could not run on this input ({type(exc).__name__}: {exc})",
                    "report it with the input that caused it",
                )
            )
            continue
        for hit in hits:
            on = hit.obj
            findings.append(
                Finding(
                    rule_id,
                    hit.severity or info.severity,
                    on.doc.file if on is not None else hit.file,
                    on.ref if on is not None else hit.object_ref,
                    hit.message,
                    hit.fix,
                    on.doc.line if on is not None else hit.line,
                )
            )
    return Report(ordered(findings), loaded.files, len(objects), version, facts)
