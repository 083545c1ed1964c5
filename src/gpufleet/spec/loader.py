"""Load manifests from files: dispatch on `kind`, validate, and explain every mistake."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel

from gpufleet.errors import ManifestError
from gpufleet.spec.base import API_VERSION, read_yaml_documents, validate_as
from gpufleet.spec.cluster_spec import ClusterBody, ClusterManifest
from gpufleet.spec.scenario_spec import ScenarioManifest

# Other parts register their kinds here (a scheduler policy, a remediation config, ...).
KINDS: dict[str, type[BaseModel]] = {
    "Cluster": ClusterManifest,
    "Scenario": ScenarioManifest,
}


def register_kind(kind: str, model: type[BaseModel]) -> None:
    KINDS[kind] = model


def _model_for(path: str, doc: dict[str, Any]) -> type[BaseModel]:
    api = doc.get("apiVersion")
    kind = doc.get("kind")
    if kind is None:
        raise ManifestError(path, "missing `kind`", fix=f"add one of: kind: {', '.join(sorted(KINDS))}")
    if kind not in KINDS:
        raise ManifestError(path, f"unknown kind {kind!r}", fix=f"use one of: {', '.join(sorted(KINDS))}")
    if api != API_VERSION:
        raise ManifestError(path, f"apiVersion is {api!r}", fix=f"use apiVersion: {API_VERSION}")
    return KINDS[kind]


def load_manifests(path: Path) -> list[BaseModel]:
    """Every document of a (possibly multi-document) YAML file, validated against its kind."""
    docs = read_yaml_documents(path)
    return [validate_as(str(path), _model_for(str(path), doc), doc) for doc in docs]


def load_one(path: Path, model: type[Any]) -> Any:
    docs = load_manifests(path)
    found = [d for d in docs if isinstance(d, model)]
    if len(found) != 1:
        kind = model.model_fields["kind"].annotation.__args__[0]
        raise ManifestError(str(path), f"expected exactly one `kind: {kind}` document, found {len(found)}")
    return found[0]


def load_cluster(path: Path) -> ClusterManifest:
    return load_one(Path(path), ClusterManifest)  # type: ignore[no-any-return,unused-ignore]


def load_scenario(path: Path) -> tuple[ScenarioManifest, str, ClusterBody]:
    """The scenario, plus the name and body of the cluster it runs on (resolving a relative path)."""
    path = Path(path)
    scenario: ScenarioManifest = load_one(path, ScenarioManifest)
    if isinstance(scenario.spec.cluster, str):
        cluster_path = (path.parent / scenario.spec.cluster).resolve()
        if not cluster_path.exists():
            raise ManifestError(
                str(path),
                f"spec.cluster points at {scenario.spec.cluster!r}, which does not exist",
                fix="give a path relative to the scenario file, or an inline cluster spec",
            )
        cluster = load_cluster(cluster_path)
        return scenario, cluster.metadata.name, cluster.spec
    return scenario, scenario.metadata.name, scenario.spec.cluster
