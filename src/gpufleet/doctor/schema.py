"""Validation against the real Kubernetes OpenAPI schemas (the strict JSON schemas kubernetes-validate ships: an
unknown field is an error, as `kubectl apply --validate=strict` makes it). One validator per kind and version is
built once and reused, and every error is reported, with its field path and, for a misspelt field, the field
that was meant."""

from __future__ import annotations

import difflib
import json
import re
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any

from gpufleet.doctor.facts import Version
from gpufleet.doctor.findings import Finding
from gpufleet.doctor.objects import K8sObject
from gpufleet.errors import DependencyMissingError
from gpufleet.model import Severity

DEFAULT_VERSION: Version = (1, 33)
MAX_ERRORS_PER_OBJECT = 5
_UNEXPECTED = re.compile(r"\('([^']+)' (?:was|were) unexpected\)")


def available() -> bool:
    """Whether the Kubernetes schemas (the deploy extra's kubernetes-validate) are installed."""
    try:
        _package()
    except DependencyMissingError:
        return False
    return True


def _package() -> Any:
    try:
        import jsonschema
        import kubernetes_validate.utils
        import referencing
    except ImportError as exc:
        raise DependencyMissingError(
            "schema validation needs kubernetes-validate", fix="pip install 'gpufleet[deploy]' (or --no-schema)"
        ) from exc
    return kubernetes_validate.utils, jsonschema, referencing


def schema_version(wanted: Version | None) -> str:
    """The schema set to use: the newest one not newer than `wanted` (the oldest there is for older clusters)."""
    utils, _, _ = _package()
    available = sorted({tuple(int(p) for p in v.split(".")[:2]) for v in utils.all_versions()})
    target = tuple((wanted or DEFAULT_VERSION)[:2])
    usable = [v for v in available if v <= target] or available[:1]
    return f"{usable[-1][0]}.{usable[-1][1]}.0"


def _schema_name(version: str, kind: str, api_version: str) -> str | None:
    """The schema file for a kind and apiVersion, looked up among the files the schema set holds (None when it has
    none): an object's kind and apiVersion never build a path, so `kind: ../../x` names nothing."""
    api = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    name = f"{kind.lower()}-{api}.json"
    return name if name in _schema_names(version) else None


def _folder(version: str) -> Traversable:
    """The folder of Kubernetes `version`'s strict schemas in kubernetes-validate."""
    return resources.files("kubernetes_validate").joinpath(f"kubernetes-json-schema/v{version}-local-strict")


@cache
def _schema_names(version: str) -> frozenset[str]:
    """The schema files of Kubernetes `version`: one per served kind and apiVersion."""
    _package()  # says what to install when the schemas are missing
    return frozenset(e.name for e in _folder(version).iterdir() if e.name.endswith(".json") and e.name[0] != "_")


def _validator(version: str, kind: str, api_version: str) -> Any | None:
    name = _schema_name(version, kind, api_version)
    return _validator_for(version, name) if name is not None else None


@cache
def _validator_for(version: str, name: str) -> Any:
    _, jsonschema, referencing = _package()
    schema = json.loads(_folder(version).joinpath(name).read_text(encoding="utf-8"))
    defs = _definitions(version)
    registry = referencing.Resource.from_contents(defs) @ (
        referencing.Resource.from_contents(schema) @ referencing.Registry()
    )
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


@cache
def _definitions(version: str) -> Any:
    return json.loads(_folder(version).joinpath("_definitions.json").read_text("utf-8"))


def has_schema(obj: K8sObject, version: str) -> bool:
    return _validator(version, obj.kind, obj.api_version) is not None


@cache
def _builtin_kinds(version: str) -> frozenset[str]:
    return frozenset(name.split("-", 1)[0] for name in _schema_names(version))


def is_builtin_kind(kind: str, version: str) -> bool:
    """True when Kubernetes `version` serves `kind` under some apiVersion (lists excluded)."""
    return kind.lower() in _builtin_kinds(version) and not kind.endswith("List")


def field_path(parts: Any) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(the object)"


def _readable(error: Any) -> tuple[str, str]:
    """(message, fix) for one jsonschema error."""
    where = field_path(error.absolute_path)
    if error.validator == "additionalProperties":
        names = _UNEXPECTED.findall(error.message) or [error.message]
        unknown = names[0].split("', '")
        allowed = sorted((error.schema.get("properties") or {}).keys())
        hints = []
        for name in unknown:
            close = difflib.get_close_matches(name, allowed, n=1, cutoff=0.6)
            hints.append(f"{name!r} -> {close[0]!r}" if close else f"remove {name!r}")
        fields = ", ".join(repr(n) for n in unknown)
        return f"{where}: unknown field {fields}", f"fix the field name ({'; '.join(hints)})"
    if error.validator == "required":
        return f"{where}: {error.message}", "add the required field"
    if error.validator == "type":
        return f"{where}: {error.message}", f"give {where} as {error.validator_value}"
    return f"{where}: {error.message}", "see `kubectl explain` for the field"


def validate(obj: K8sObject, version: str) -> list[Finding]:
    """Schema errors of `obj` (none when its kind has no schema: custom resources are the rules' job)."""
    validator = _validator(version, obj.kind, obj.api_version)
    if validator is None:
        return []
    errors = sorted(validator.iter_errors(obj.data), key=lambda e: list(map(str, e.absolute_path)))
    out = []
    for error in errors[:MAX_ERRORS_PER_OBJECT]:
        message, fix = _readable(error)
        out.append(
            Finding(
                "GF000",
                Severity.critical,
                obj.doc.file,
                obj.ref,
                f"not valid for Kubernetes {version.rsplit('.', 1)[0]}: {message}",
                fix,
                obj.doc.line,
            )
        )
    if len(errors) > MAX_ERRORS_PER_OBJECT:
        more = len(errors) - MAX_ERRORS_PER_OBJECT
        out.append(
            Finding(
                "GF000",
                Severity.critical,
                obj.doc.file,
                obj.ref,
                f"{more} more schema error(s)",
                "fix the ones above first",
                obj.doc.line,
            )
        )
    return out
