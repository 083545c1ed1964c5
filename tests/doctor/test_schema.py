"""The schema of an object is looked up among the files the schema set holds, by kind and apiVersion; neither ever
builds a path, so a crafted kind cannot load a file from elsewhere."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.doctor import schema
from gpufleet.doctor.load import Document
from gpufleet.doctor.objects import K8sObject

VERSION = "1.33.0"
CRAFTED = [
    ("../../outside", "v1"),
    ("../../../outside", "v1"),
    ("Pod/../../../outside", "v1"),
    ("Pod", "../../../outside/v1"),
    ("/tmp/outside", "v1"),
    ("pod-v1.json/..", "v1"),
]


def _obj(kind: str, api_version: str) -> K8sObject:
    data = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}}
    return K8sObject(Document("crafted.yaml", 1, data))


@pytest.fixture
def schema_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A schema set with one kind, and a schema file outside it that refuses every object: loading it would show."""
    folder = tmp_path / "pkg" / "kubernetes-json-schema" / f"v{VERSION}-local-strict"
    folder.mkdir(parents=True)
    draft = "https://json-schema.org/draft/2020-12/schema"
    (folder / "_definitions.json").write_text(json.dumps({"$schema": draft, "$id": "_definitions.json", "$defs": {}}))
    pod = {"$schema": draft, "$id": "pod-v1.json", "type": "object", "required": ["spec"]}
    (folder / "pod-v1.json").write_text(json.dumps(pod))
    for outside in (tmp_path / "outside-v1.json", tmp_path / "pkg" / "outside-v1.json"):
        outside.write_text(json.dumps({"$schema": draft, "$id": outside.name, "not": {}}))
    monkeypatch.setattr(schema, "_folder", lambda version: folder)
    for cached in (schema._schema_names, schema._validator_for, schema._definitions, schema._builtin_kinds):
        cached.cache_clear()
    yield folder
    for cached in (schema._schema_names, schema._validator_for, schema._definitions, schema._builtin_kinds):
        cached.cache_clear()


@pytest.mark.parametrize(("kind", "api_version"), CRAFTED)
def test_a_crafted_kind_or_api_version_names_no_schema(schema_tree: Path, kind: str, api_version: str) -> None:
    obj = _obj(kind, api_version)
    assert schema._schema_name(VERSION, kind, api_version) is None
    assert not schema.has_schema(obj, VERSION) and schema.validate(obj, VERSION) == []
    assert schema.is_builtin_kind(kind, VERSION) is (kind == "Pod")  # a Pod under a crafted apiVersion is still a Pod


def test_a_listed_kind_is_validated_against_its_own_schema(schema_tree: Path) -> None:
    pod = _obj("Pod", "v1")
    assert schema._schema_name(VERSION, "Pod", "v1") == "pod-v1.json" and schema.has_schema(pod, VERSION)
    [finding] = schema.validate(pod, VERSION)
    assert "'spec' is a required property" in finding.message


@pytest.mark.parametrize(("kind", "api_version"), CRAFTED)
def test_the_real_schema_set_has_no_schema_for_a_crafted_kind(kind: str, api_version: str) -> None:
    pytest.importorskip("kubernetes_validate")
    version = schema.schema_version(None)
    assert schema._schema_name(version, kind, api_version) is None
    assert schema._schema_name(version, "Deployment", "apps/v1") == "deployment-apps-v1.json"
