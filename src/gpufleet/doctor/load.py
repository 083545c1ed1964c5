"""Read what the doctor is given: files, directories (recursively: .yaml, .yml, .json, and .toml and .conf for the
container runtimes' configs) or `-` for standard input; multi-document YAML, Helm-rendered output, `kubectl get ...
-o json` lists, `kubectl version -o json`, containerd's and CRI-O's TOML and Docker's daemon.json (each kept whole, as
text, for the runtime rules; other programs' TOML is passed over).

Nothing here raises on bad input: a file that is binary, not YAML, an unrendered Helm template or past the size
limits becomes a finding and the rest is still read. Documents are split on their `---` lines before parsing, so
one broken document loses nothing else and every object knows the line it starts on."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufleet import yaml_input
from gpufleet.doctor.findings import Finding
from gpufleet.doctor.runtime_config import engine_of, is_runtime_json
from gpufleet.errors import ManifestError, UserError
from gpufleet.model import Severity

SUFFIXES = (".yaml", ".yml", ".json", ".toml", ".conf")
RUNTIME_SUFFIXES = (".toml", ".conf")
RUNTIME_CONFIG = "runtimeConfig"  # the key of a runtime config's document: {engine, text}
MAX_JSON_BYTES = yaml_input.MAX_CAPTURE_BYTES  # `kubectl get pods -A -o json` of a large cluster
_SEPARATOR = re.compile(r"^---(?:\s|$)")
# What only a Helm template (not a Prometheus or Alertmanager template in a string) contains.
_HELM = re.compile(r"\{\{-|-\}\}|\{\{\s*(?:\.Values|\.Release|\.Chart|\.Capabilities|include\s|template\s|toYaml\s)")


@dataclass(frozen=True, slots=True)
class Document:
    """One parsed document: a Kubernetes object, a list item, or a non-Kubernetes config the rules read."""

    file: str
    line: int  # 1-based line the document starts on; 0 for an item of a JSON list
    data: dict[str, Any]


@dataclass(slots=True)
class Loaded:
    documents: list[Document] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    files: int = 0


def input_files(paths: Iterable[str]) -> list[str]:
    """The files to read, in a stable order: named files as given, directories walked (hidden ones skipped)."""
    out: list[str] = []
    for raw in paths:
        if raw == "-":
            out.append("-")
            continue
        path = Path(raw)
        if path.is_dir():
            found = sorted(
                p
                for p in path.rglob("*")
                if p.suffix.lower() in SUFFIXES
                and p.is_file()
                and not any(part.startswith(".") for part in p.relative_to(path).parts)
            )
            out.extend(str(p) for p in found)
        elif path.exists():
            out.append(raw)
        else:
            raise UserError(f"{raw}: no such file or directory", fix="give manifest files or directories to check")
    return out


def load(paths: Iterable[str], on_file: Callable[[str], None] | None = None) -> Loaded:
    loaded = Loaded()
    for name in input_files(paths):
        loaded.files += 1
        _load_file(name, loaded)
        if on_file is not None:
            on_file(name)
    return loaded


def _problem(loaded: Loaded, rule: str, severity: Severity, file: str, line: int, message: str, fix: str) -> None:
    loaded.findings.append(Finding(rule, severity, file, "", message, fix, line))


def _load_file(name: str, loaded: Loaded) -> None:
    try:
        raw = sys.stdin.buffer.read() if name == "-" else Path(name).read_bytes()
    except OSError as exc:
        _problem(loaded, "GF092", Severity.critical, name, 0, f"cannot read: {exc.strerror}", "check the path")
        return
    label = "<stdin>" if name == "-" else name
    if b"\x00" in raw[:8192]:
        _problem(loaded, "GF092", Severity.info, label, 0, "binary file: skipped", "give YAML or JSON manifests")
        return
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        msg = f"not UTF-8 text (byte {exc.start}): skipped"
        _problem(loaded, "GF092", Severity.critical, label, 0, msg, "save the manifest as UTF-8")
        return
    if label.lower().endswith(RUNTIME_SUFFIXES) or is_runtime_json(label.replace("\\", "/")):
        engine = engine_of(label, text)
        if engine is not None:
            loaded.documents.append(Document(label, 1, {RUNTIME_CONFIG: {"engine": engine, "text": text}}))
            return
        if label.lower().endswith(RUNTIME_SUFFIXES):
            return  # another program's TOML or .conf (pyproject.toml in a repository): not the doctor's to read
    looks_json = label.lower().endswith(".json") or text.lstrip().startswith(("{", "["))
    if looks_json and _load_json(text, label, loaded):
        return
    for start, chunk in _chunks(text):
        _load_yaml_chunk(chunk, label, start, loaded)


def _load_json(text: str, label: str, loaded: Loaded) -> bool:
    """True when `text` was JSON (read or reported); False to read it as YAML instead."""
    if len(text) > MAX_JSON_BYTES:
        msg = f"larger than {MAX_JSON_BYTES >> 20} MiB: skipped"
        _problem(loaded, "GF092", Severity.critical, label, 0, msg, "split the capture (e.g. one namespace per file)")
        return True
    try:
        data = yaml_input.load_json(text, label, capture=True)
    except ManifestError as exc:
        syntax = re.search(r"not valid JSON at line (\d+)", exc.message)
        if syntax is None or label.lower().endswith(".json"):
            line = int(syntax.group(1)) if syntax else 0
            detail = exc.message.removeprefix(f"{label}: ")
            fix = "fix the JSON, or capture it again" if syntax else exc.fix or "capture it again"
            _problem(loaded, "GF092", Severity.critical, label, line, detail, fix)
            return True
        return False  # YAML flow style, perhaps
    _add(data, label, 1, loaded)
    return True


def _chunks(text: str) -> Iterator[tuple[int, str]]:
    """(1-based start line, text) of each `---`-separated document."""
    lines = text.splitlines(keepends=True)
    start, buf = 1, list[str]()
    for number, line in enumerate(lines, 1):
        if _SEPARATOR.match(line):
            if buf:
                yield start, "".join(buf)
            start, buf = number, [line[3:].lstrip() if line[3:].strip() else ""]
            continue
        buf.append(line)
    if buf:
        yield start, "".join(buf)


def _load_yaml_chunk(chunk: str, label: str, start: int, loaded: Loaded) -> None:
    if not chunk.strip() or all(not ln.strip() or ln.lstrip().startswith("#") for ln in chunk.splitlines()):
        return
    if _HELM.search(chunk):
        _problem(
            loaded,
            "GF091",
            Severity.warning,
            label,
            start,
            "an unrendered Helm template: it cannot be checked as it is",
            "render it first (`helm template RELEASE CHART -f values.yaml | gpufleet doctor -`)",
        )
        return
    try:
        docs = _parse(chunk, label)
    except ManifestError as exc:
        line = start
        found = re.search(r"at line (\d+)", exc.message)
        if found:
            line = start + int(found.group(1)) - 1
            exc_message = exc.message.replace(found.group(0), f"at line {line}")
        else:
            exc_message = exc.message
        detail = exc_message.split(": ", 1)[1] if exc_message.startswith(f"{label}: ") else exc_message
        _problem(loaded, "GF092", Severity.critical, label, line, detail, exc.fix or "fix the YAML syntax")
        return
    for doc in docs:
        _add(doc, label, start, loaded)


def _parse(chunk: str, label: str) -> list[Any]:
    # libyaml's reader when built; with anchors, the bounded reader that counts the aliases' expansion
    return yaml_input.load_documents(chunk, label, capture=True)


def _add(data: Any, label: str, line: int, loaded: Loaded) -> None:
    if data is None:
        return
    if isinstance(data, list) and data and all(isinstance(item, dict) for item in data):  # a bare array of objects
        for item in data:
            _add(item, label, 0, loaded)
        return
    if not isinstance(data, dict):
        msg = f"a YAML {type(data).__name__}, not a Kubernetes object or a known config: skipped"
        _problem(loaded, "GF090", Severity.info, label, line, msg, "give Kubernetes manifests or captures")
        return
    if isinstance(data.get("kind"), str) and data["kind"].endswith("List") and isinstance(data.get("items"), list):
        for item in data["items"]:
            if isinstance(item, dict):
                loaded.documents.append(Document(label, 0 if label.endswith(".json") else line, item))
        return
    loaded.documents.append(Document(label, line, data))
