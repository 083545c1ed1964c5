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
from typing import Any

from gpufleet.doctor.facts import Version
from gpufleet.doctor.findings import Finding, Severity
from gpufleet.doctor.objects import K8sObject
from gpufleet.errors import DependencyMissingError

DEFAULT_VERSION: Version = (1, 33)
MAX_ERRORS_PER_OBJECT = 5
_UNEXPECTED = re.compile(r"\('([^']+)' (?:was|were) unexpected\)")


def _package() -> Any:
    try:
        import jsonschema
        import kubernetes_validate.utils
        import referencing
    except ImportError as exc:
        raise DependencyMissingError(
            "schema validation needs kubernetes-validate", fix="pip install kubernetes-validate (or --no-schema)"
        ) from exc
    return kubernetes_validate.utils, jsonschema, referencing


def schema_version(wanted: Version | None) -> str:
    """The schema set to use: the newest one not newer than `wanted` (the oldest there is for older clusters)."""
    utils, _, _ = _package()
    available = sorted({tuple(int(p) for p in v.split(".")[:2]) for v in utils.all_versions()})
    target = tuple((wanted or DEFAULT_VERSION)[:2])
    usable = [v for v in available if v <= target] or available[:1]
    return f"{usable[-1][0]}.{usable[-1][1]}.0"


def _schema_file(version: str, kind: str, api_version: str) -> str:
    api = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    return f"kubernetes-json-schema/v{version}-local-strict/{kind.lower()}-{api}.json"


@cache
def _validator(version: str, kind: str, api_version: str) -> Any | None:
    _, jsonschema, referencing = _package()
    root = resources.files("kubernetes_validate")
    path = root.joinpath(_schema_file(version, kind, api_version))
    if not path.is_file():
        return None
    schema = json.loads(path.read_text(encoding="utf-8"))
    defs = _definitions(version)
    registry = referencing.Resource.from_contents(defs) @ (
        referencing.Resource.from_contents(schema) @ referencing.Registry()
    )
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


@cache
def _definitions(version: str) -> Any:
    root = resources.files("kubernetes_validate")
    text = root.joinpath(f"kubernetes-json-schema/v{version}-local-strict/_definitions.json").read_text("utf-8")
    return json.loads(text)


def has_schema(obj: K8sObject, version: str) -> bool:
    return _validator(version, obj.kind, obj.api_version) is not None


@cache
def _builtin_kinds(version: str) -> frozenset[str]:
    folder = resources.files("kubernetes_validate").joinpath(f"kubernetes-json-schema/v{version}-local-strict")
    return frozenset(entry.name.split("-", 1)[0] for entry in folder.iterdir() if entry.name.endswith(".json"))


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
                Severity.error,
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
                Severity.error,
                obj.doc.file,
                obj.ref,
                f"{more} more schema error(s)",
                "fix the ones above first",
                obj.doc.line,
            )
        )
    return out
