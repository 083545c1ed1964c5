"""Shared manifest machinery: camelCase fields, forbidden extras, durations, and readable validation errors."""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError
from pydantic.alias_generators import to_camel

from gpufleet import yaml_input
from gpufleet.errors import ManifestError

API_VERSION = "gpufleet.io/v1"

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(value: Any) -> float:
    """'24h', '2h30m', '1.5s', '250ms' or a number of seconds -> seconds."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        if value < 0:
            raise ValueError("a duration cannot be negative")
        return float(value)
    if not isinstance(value, str):
        raise ValueError(f"expected a duration like '30s', '5m' or '24h', got {value!r}")
    text = value.strip().replace(" ", "")
    pos, total = 0, 0.0
    for match in _DURATION.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise ValueError(f"expected a duration like '30s', '5m', '2h30m' or '24h', got {value!r}")
    return total


def format_duration(seconds: float) -> str:
    seconds = float(seconds)
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            count = int(seconds // size)
            parts.append(f"{count}{unit}")
            seconds -= count * size
    if seconds or not parts:
        parts.append(f"{seconds:g}s")
    return "".join(parts)


Duration = Annotated[float, BeforeValidator(parse_duration)]


class Manifest(BaseModel):
    """Base of every manifest model: YAML keys are camelCase, unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, alias_generator=to_camel)


class Metadata(Manifest):
    name: str
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}


M = TypeVar("M", bound=BaseModel)


def _allowed_fields(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str] | None:
    """Walk `loc` through the model's fields to find the allowed keys where an unknown key was found."""
    current: Any = model
    for part in loc[:-1]:
        if isinstance(part, int) or current is None:
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        field = next(
            (f for name, f in current.model_fields.items() if part in (name, f.alias)),
            None,
        )
        if field is None:
            return None
        current = _inner_model(field.annotation)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return [f.alias or name for name, f in current.model_fields.items()]
    return None


def _inner_model(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _inner_model(arg)
        if found is not None:
            return found
    return None


def _loc_text(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def explain_validation(path: str, model: type[BaseModel], exc: ValidationError) -> ManifestError:
    """Turn pydantic's error list into one ManifestError naming the file, the field and what is allowed."""
    lines = []
    fix = None
    for err in exc.errors()[:5]:
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        where = _loc_text(loc) or "(document)"
        if err["type"] == "extra_forbidden":
            allowed = _allowed_fields(model, loc) or []
            close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            lines.append(f"unknown field {where!r}{hint}")
            fix = f"allowed fields here: {', '.join(allowed)}" if allowed else fix
        elif err["type"] == "missing":
            lines.append(f"missing required field {where!r}")
        else:
            lines.append(f"{where}: {err['msg']}")
    more = len(exc.errors()) - len(lines)
    if more > 0:
        lines.append(f"and {more} more")
    return ManifestError(path, "; ".join(lines), fix=fix or "correct the field and run `gpufleet validate FILE`")


def read_yaml_documents(path: Path) -> list[dict[str, Any]]:
    docs = [d for d in yaml_input.load_file_documents(path) if d is not None]
    for doc in docs:
        if not isinstance(doc, dict):
            raise ManifestError(str(path), f"expected a mapping with apiVersion and kind, got {type(doc).__name__}")
    if not docs:
        raise ManifestError(str(path), "the file is empty", fix="write a manifest with apiVersion and kind")
    return docs


def validate_as(path: str, model: type[M], doc: dict[str, Any]) -> M:
    try:
        return model.model_validate(doc)
    except ValidationError as exc:
        raise explain_validation(path, model, exc) from None
