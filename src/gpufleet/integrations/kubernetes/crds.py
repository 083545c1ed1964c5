"""Objects of other projects' custom resources, checked as the API server checks them on create, against the CRDs
of their released versions vendored in data/crds/ (with their sources in data/crds/SOURCES.md).

Three checks, each one the API server makes:
- the version's structural schema (openAPIV3Schema), strict as `kubectl apply --validate=strict` is: an unknown
  field is an error, not silently pruned;
- metadata against Kubernetes' ObjectMeta (kubernetes-validate's schema), the name a DNS subdomain (a custom
  resource's name is a path segment), label keys and values as Kubernetes allows them;
- the schema's `x-kubernetes-validations` CEL rules, evaluated with cel-python. Transition rules (those reading
  `oldSelf`) apply only to updates, and a created object has no old self: they are skipped, as on create.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib import resources
from typing import Any

import yaml

from gpufleet.errors import DependencyMissingError, UserError


@dataclass(frozen=True, slots=True)
class VendoredCrd:
    file: str  # under data/crds/
    release: str  # the project and release it was taken from


CRDS: dict[tuple[str, str], VendoredCrd] = {
    ("kueue.x-k8s.io", "Topology"): VendoredCrd("kueue.x-k8s.io_topologies.yaml", "Kueue v0.19.2"),
    ("kueue.x-k8s.io", "ResourceFlavor"): VendoredCrd("kueue.x-k8s.io_resourceflavors.yaml", "Kueue v0.19.2"),
    ("topology.volcano.sh", "HyperNode"): VendoredCrd("topology.volcano.sh_hypernodes.yaml", "Volcano v1.15.1"),
    ("kai.scheduler", "Topology"): VendoredCrd("kai.scheduler_topologies.yaml", "KAI Scheduler v0.13.0"),
}
# ObjectMeta's schema from kubernetes-validate, for gpufleet's default Kubernetes version (gpufleet.doctor.schema).
_SCHEMA_VERSION = "1.33.0"
_OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def crd_text(file: str) -> str:
    return resources.files("gpufleet.integrations.kubernetes").joinpath("data", "crds", file).read_text("utf-8")


@cache
def crd(file: str) -> dict[str, Any]:
    """The CustomResourceDefinition in `file` (the vendored header is comments, so YAML skips it)."""
    docs = [d for d in yaml.safe_load_all(crd_text(file)) if d]
    return dict(docs[0])


def _vendored(api_version: str, kind: str) -> VendoredCrd:
    group = api_version.rpartition("/")[0]
    found = CRDS.get((group, kind))
    if found is None:
        known = ", ".join(f"{k} ({g})" for g, k in CRDS)
        raise UserError(f"no vendored CRD for {kind} in {api_version}", fix=f"gpufleet checks {known}")
    return found


def crd_schema(api_version: str, kind: str) -> dict[str, Any]:
    """The openAPIV3Schema of `kind` at `api_version`'s version, as the vendored CRD has it."""
    definition = crd(_vendored(api_version, kind).file)
    version = api_version.rpartition("/")[2]
    for served in definition["spec"]["versions"]:
        if served["name"] == version and served.get("served", True):
            return dict(served["schema"]["openAPIV3Schema"])
    names = [v["name"] for v in definition["spec"]["versions"]]
    raise UserError(
        f"{definition['metadata']['name']} serves no version {version!r}", fix=f"use one of {', '.join(names)}"
    )


def strict_schema(schema: Any) -> Any:
    """The structural schema with unknown fields refused, as the API server's strict field validation does."""
    if isinstance(schema, list):
        return [strict_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict_schema(v) for k, v in schema.items() if k != "properties" and not k.startswith("x-kubernetes-")}
    if "properties" in schema:
        out["properties"] = {field: strict_schema(sub) for field, sub in schema["properties"].items()}
        open_ended = "additionalProperties" in schema or schema.get("x-kubernetes-preserve-unknown-fields")
        if not open_ended:
            out["additionalProperties"] = False
    return out


@cache
def _definitions() -> dict[str, Any]:
    """kubernetes-validate's strict definitions (ObjectMeta among them)."""
    try:
        root = resources.files("kubernetes_validate")
    except ModuleNotFoundError:
        raise DependencyMissingError(
            "checking custom resources needs kubernetes-validate", fix="pip install 'gpufleet[deploy]'"
        ) from None
    folder = root.joinpath("kubernetes-json-schema", f"v{_SCHEMA_VERSION}-local-strict")
    return dict(json.loads(folder.joinpath("_definitions.json").read_text("utf-8")))


@cache
def _validator(api_version: str, kind: str) -> Any:
    definitions = _definitions()  # first: says which package is missing
    import jsonschema
    import referencing

    schema = strict_schema(crd_schema(api_version, kind))
    schema["properties"]["metadata"] = {"$ref": f"{definitions['$id']}#/$defs/{_OBJECT_META}"}
    registry = referencing.Resource.from_contents(definitions) @ referencing.Registry()
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


def _allowed_at(schema: dict[str, Any], path: list[Any]) -> list[str]:
    node: Any = schema
    if path[:1] == ["metadata"]:
        node, path = _definitions()["$defs"][_OBJECT_META], path[1:]
    for part in path:
        node = node.get("items", {}) if isinstance(part, int) else node.get("properties", {}).get(part, {})
    return sorted(node.get("properties", {}))


def _schema_problems(obj: dict[str, Any], api_version: str, kind: str) -> list[str]:
    out = []
    for error in sorted(_validator(api_version, kind).iter_errors(obj), key=lambda e: list(e.absolute_path)):
        path = list(error.absolute_path)
        where = ".".join(str(p) for p in path) or "(object)"
        unexpected = re.findall(r"'([^']+)' (?:was|were) unexpected", error.message)
        if error.validator == "additionalProperties" and unexpected:
            for field in re.findall(r"'([^']+)'", unexpected[0]) or unexpected:
                close = difflib.get_close_matches(field, _allowed_at(crd_schema(api_version, kind), path), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                out.append(f"unknown field {'.'.join([*map(str, path), field])!r}{hint}")
        else:
            out.append(f"{where}: {error.message}")
    return out


def _label_key_problem(key: str) -> str | None:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return f"label key {key!r}: the prefix must be a DNS subdomain"
    if len(name) > 63 or not _LABEL_NAME.match(name):
        return f"label key {key!r}: the name must be at most 63 of [-A-Za-z0-9_.], starting and ending alphanumeric"
    return None


def _metadata_problems(obj: dict[str, Any]) -> list[str]:
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        return []  # the schema says so
    out = []
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        out.append("metadata.name: a name is required")
    elif len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        out.append(f"metadata.name: {name!r} is not a DNS subdomain (lowercase a-z, 0-9, '-' and '.', 253 at most)")
    for key, value in (metadata.get("labels") or {}).items():
        problem = _label_key_problem(str(key))
        if problem:
            out.append(f"metadata.labels: {problem}")
        if isinstance(value, str) and (len(value) > 63 or not _LABEL_VALUE.match(value)):
            out.append(f"metadata.labels.{key}: {value!r} is not a valid label value")
    return out


@cache
def _cel_program(rule: str) -> Any:
    import celpy

    env = celpy.Environment()
    return env.program(env.compile(rule))


@cache
def _presence_fields(rule: str) -> frozenset[str] | None:
    """The fields of `self` a rule reads, where it reads `self` only as `has(self.field)` (whether each is set);
    None for any other rule."""
    fields = re.findall(r"\bhas\(\s*self\.(\w+)\s*\)", rule)
    if not fields or len(fields) != len(re.findall(r"\bself\b", rule)):
        return None
    return frozenset(fields)


@lru_cache(maxsize=4096)
def _cel_result(rule: str, value: str) -> Any:
    """The rule's result for `value` (JSON text, so that it can be cached); an evaluation error as the result."""
    import celpy

    try:
        return _cel_program(rule).evaluate({"self": celpy.json_to_cel(json.loads(value))})
    except Exception as exc:  # an evaluation error fails the rule on the API server too
        return exc


def _evaluate(rule: str, value: Any) -> Any:
    fields = _presence_fields(rule) if isinstance(value, dict) else None
    if fields is not None:
        # Only which fields are set can change the result: evaluated once per combination (a HyperNode's
        # thousands of Node members share one), on a stand-in with those fields set.
        value = {field: {} for field in sorted(fields) if field in value}
    return _cel_result(rule, json.dumps(value, sort_keys=True))


def _cel_problems(schema: Any, value: Any, path: list[str]) -> list[str]:
    """Every CEL rule of `schema` (and of its parts, where `value` has them) that `value` breaks."""
    if not isinstance(schema, dict) or value is None:
        return []
    import celpy

    out = []
    where = ".".join(path) or "(object)"
    for validation in schema.get("x-kubernetes-validations") or []:
        rule = validation["rule"]
        if re.search(r"\boldSelf\b", rule):
            continue  # a transition rule: it applies to updates only
        result = _evaluate(rule, value)
        if isinstance(result, Exception):
            out.append(f"{where}: {validation.get('message', rule)} (the rule could not be evaluated: {result})")
        elif result is not True and not (isinstance(result, celpy.celtypes.BoolType) and bool(result)):
            out.append(f"{where}: {validation.get('message') or f'failed rule: {rule}'}")
    if isinstance(value, dict):
        for field, sub in (schema.get("properties") or {}).items():
            if field in value:
                out.extend(_cel_problems(sub, value[field], [*path, field]))
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict) and "properties" not in schema:
            for key, sub_value in value.items():
                out.extend(_cel_problems(extra, sub_value, [*path, str(key)]))
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            out.extend(_cel_problems(schema["items"], item, [*path, str(i)]))
    return out


def problems(obj: dict[str, Any]) -> list[str]:
    """Every way `obj` breaks its CRD (found by apiVersion and kind) or the API server's metadata rules, each
    naming its field."""
    api_version, kind = str(obj.get("apiVersion", "")), str(obj.get("kind", ""))
    schema = crd_schema(api_version, kind)
    out = _schema_problems(obj, api_version, kind) + _metadata_problems(obj)
    if not out:  # the CEL rules assume the schema holds (as the API server evaluates them only then)
        out = _cel_problems(schema, obj, [])
    return out


def check(obj: dict[str, Any]) -> None:
    """Raise a UserError naming the first problem `obj` has (and how many more)."""
    found = problems(obj)
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        kind, name = obj.get("kind", "?"), (obj.get("metadata") or {}).get("name", "?")
        release = _vendored(str(obj.get("apiVersion", "")), str(kind)).release
        raise UserError(
            f"{kind} {name} is invalid: {found[0]}{more}",
            fix=f"correct it against the {kind} schema of {obj.get('apiVersion')} ({release})",
        )
