"""What the AMD and Gaudi tools print in a value's place, read once for all of their parsers.

amd-smi, rocm-smi and hl-smi print numbers with a unit glued on or spaced off (`234 W`, `737.0W`, `67.0°C`,
`768MiB`, `16GT/s`, `x16`, `(1700Mhz)`), `N/A` (also `N/A mV`: some amd-smi releases append the unit to it), and
amd-smi's JSON wraps them as `{"value": x, "unit": "W"}` or the bare string "N/A". Every reader here returns None
for a value that is not there, never zero.

The indented `KEY: value` reports of amd-smi (text mode) and hl-smi -q are read by `indented_tree` into nested
dicts, so one mapping serves a tool's text and JSON forms alike.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpufleet.catalog.gpus import GpuModelSpec, load_gpu_models, model_for_product_name
from gpufleet.errors import ParseError

NOT_AVAILABLE = {"", "n/a", "na", "none", "unknown", "unsupported", "not supported", "-", "--"}
_NUMBER = re.compile(r"^\(?\s*[xX]?(?P<num>[-+]?\d+(?:\.\d+)?)\s*(?P<unit>[^\d\s()][^()]*?)?\s*\)?$")
_HEX = re.compile(r"^0[xX][0-9a-fA-F]+$")
# bytes per unit, for the memory units these tools print (amd-smi's "MB" is MiB: bytes // 2**20)
_BYTES = {
    "b": 1,
    "kb": 2**10,
    "kib": 2**10,
    "mb": 2**20,
    "mib": 2**20,
    "gb": 2**30,
    "gib": 2**30,
    "tb": 2**40,
}
MAX_PROBLEMS = 50


def missing(text: object) -> bool:
    """A printed value that means "nothing here" (N/A, empty, N/A followed by a unit)."""
    if text is None:
        return True
    word = " ".join(str(text).split()).lower()
    return word in NOT_AVAILABLE or word.startswith("n/a ")


def split_number(text: object) -> tuple[float, str] | None:
    """`234 W` -> (234.0, "W"); `67.0°C` -> (67.0, "°C"); `(1700Mhz)` -> (1700.0, "Mhz"); `x16` -> (16.0, "");
    None for N/A and for text that is not a number with an optional unit."""
    if isinstance(text, bool):
        return None
    if isinstance(text, int | float):
        return float(text), ""
    if missing(text):
        return None
    if _HEX.match(str(text).strip()):
        return float(int(str(text).strip(), 16)), ""
    match = _NUMBER.match(str(text).strip())
    if match is None:
        return None
    return float(match.group("num")), (match.group("unit") or "").strip()


def number(value: object) -> float | None:
    """A reading from any of the shapes above: a JSON `{"value", "unit"}`, a bare number or printed text."""
    if isinstance(value, Mapping):
        return number(value.get("value"))
    found = split_number(value)
    return None if found is None else found[0]


def unit_of(value: object) -> str:
    if isinstance(value, Mapping):
        return str(value.get("unit") or "")
    found = split_number(value)
    return "" if found is None else found[1]


def to_mib(value: object, default_unit: str = "MiB") -> float | None:
    """A memory size in MiB from `{"value": 8176, "unit": "MB"}`, `768MiB`, `98304 MB`, `512Mib`, `32768`."""
    amount = number(value)
    if amount is None:
        return None
    unit = (unit_of(value) or default_unit).lower()
    scale = _BYTES.get(unit)
    if scale is None:
        return None
    return amount * scale / 2**20


def integer(value: object) -> int | None:
    found = number(value)
    return None if found is None else int(found)


def text_of(value: object) -> str | None:
    """A printed string, None when it stands for no value."""
    if value is None or isinstance(value, Mapping | list):
        return None
    text = str(value).strip()
    return None if missing(text) else text


def find(tree: Mapping[str, Any], *paths: str) -> Any:
    """The first of `paths` ("power.socket_power") present in `tree`, keys compared case-insensitively."""
    for path in paths:
        node: Any = tree
        for part in path.split("."):
            if not isinstance(node, Mapping):
                node = None
                break
            node = _get(node, part)
        if node is not None:
            return node
    return None


def _get(node: Mapping[str, Any], key: str) -> Any:
    if key in node:
        return node[key]
    lowered = key.lower()
    for name, value in node.items():
        if str(name).lower() == lowered:
            return value
    return None


def catalog_model(name: str | None, device_id: str | int | None = None) -> GpuModelSpec | None:
    """The catalog model a printed product name stands for, else the one whose PCI device id matches."""
    if name:
        found = model_for_product_name(name)
        if found is not None:
            return found
    if device_id is None:
        return None
    try:
        wanted = int(str(device_id), 16) if isinstance(device_id, str) else int(device_id)
    except ValueError:
        return None
    for spec in load_gpu_models().values():
        if spec.pci_device_id and int(spec.pci_device_id, 16) == wanted & 0xFFFF:
            return spec
    return None


def partition_mode(compute: str | None, memory: str | None) -> str:
    """`CPX` and `NPS4` -> "CPX_NPS4", as device plugins and labels name a mode; "" when neither is known."""
    parts = [p.upper() for p in (compute, memory) if p and not missing(p)]
    return "_".join(parts)


@dataclass(frozen=True)
class Line:
    number: int
    indent: int
    key: str
    value: str | None  # None: a heading whose children follow


class _Node:
    __slots__ = ("children", "indent", "key", "value")

    def __init__(self, key: str, value: str | None, indent: int) -> None:
        self.key, self.value, self.indent = key, value, indent
        self.children: dict[str, _Node] = {}

    def plain(self) -> Any:
        if not self.children:
            return self.value
        out: dict[str, Any] = {k: c.plain() for k, c in self.children.items()}
        if self.value is not None:
            out.setdefault("", self.value)
        return out


def indented_tree(
    text: str, source: str, *, separator: str = ":", skip: tuple[str, ...] = (), fix: str
) -> list[tuple[Line, dict[str, Any]]]:
    """Top-level `KEY: value` lines, each with the nested dict of the lines indented under it.

    `separator` splits a key from its value: ":" for amd-smi (a heading ends with it), " : " for hl-smi (whose
    headings carry none, and whose PCI addresses hold colons). A line that carries no separator continues a list
    the printer wrapped (`[N/A, N/A,`), or with " : " is a heading; with ":" it is an error. A `: value` line gives
    the value of the heading just above it (hl-smi prints `Fan Speed` that way). Keys stay as printed; a repeated
    key keeps its last value. Lines starting with one of `skip` (log lines mixed into the output) are ignored.
    """
    roots: list[tuple[Line, _Node]] = []
    stack: list[_Node] = []
    previous: _Node | None = None
    for number_, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not stripped or stripped.startswith(skip) or set(stripped) <= {"=", "-"}:
            continue
        if previous is not None and _open_list(previous.value):
            previous.value = f"{previous.value} {stripped}"
            continue
        indent = len(raw) - len(raw.lstrip())
        if stripped.startswith(":"):
            if stack and stack[-1].value is None and not stack[-1].children:
                stack[-1].value = stripped[1:].strip() or None
                continue
            raise ParseError(f"{source}:{number_}: a value with no key above it: {stripped[:70]!r}", fix=fix)
        key, sep, value = stripped.partition(separator)
        if not sep:
            if separator == ":":
                raise ParseError(f"{source}:{number_}: not a `KEY: value` line: {stripped[:70]!r}", fix=fix)
            key, value = stripped, ""
        node = _Node(key.strip(), value.strip() or None, indent)
        while stack and stack[-1].indent >= indent:
            stack.pop()
        if stack:
            stack[-1].children[node.key] = node
        else:
            roots.append((Line(number_, indent, node.key, node.value), node))
        stack.append(node)
        previous = node
    return [(line, {k: c.plain() for k, c in node.children.items()}) for line, node in roots]


def _open_list(value: object) -> bool:
    return isinstance(value, str) and value.count("[") > value.count("]")


def load_json(text: str, source: str, fix: str) -> Any:
    """JSON a tool printed, or one ParseError (bad syntax, or nesting deeper than any real report)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ParseError(f"{source}: not valid JSON: {exc.msg} at line {exc.lineno}", fix=fix) from None
    except RecursionError:
        raise ParseError(f"{source}: JSON nested deeper than any SMI report", fix=fix) from None


def add_problem(problems: list[str], text: str) -> None:
    if len(problems) < MAX_PROBLEMS:
        problems.append(text)
