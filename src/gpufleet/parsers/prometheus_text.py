"""The Prometheus text exposition format (version 0.0.4), read one line at a time.

    # HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).
    # TYPE DCGM_FI_DEV_GPU_TEMP gauge
    DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-…",modelName="NVIDIA A30"} 35

A sample is `name{label="value",...} value [timestamp]`: the label set is optional, label values escape `\\`, `\"`
and `\n`, blanks and tabs may separate the tokens (and follow `{` and `,`), a trailing comma before `}` is allowed,
the value is a float or `NaN`, `+Inf`, `-Inf`, and the timestamp is an integer of milliseconds. `# HELP` and
`# TYPE` lines name a family; any other `#` line is a comment. A line that breaks these rules is reported, never
raised, so one bad line does not hide the rest of a scrape.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

MAX_LABELS = 128  # more than any exporter sets on one series; past it the line is refused
MAX_LABEL_VALUE = 4096
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_FLOAT = re.compile(r"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[Ii]nf(?:inity)?|NaN|nan)")
_INT = re.compile(r"-?\d{1,19}")
_META = re.compile(r"#\s+(HELP|TYPE)\s+([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\s+(.*))?$")
_TYPES = frozenset({"counter", "gauge", "histogram", "summary", "untyped"})


@dataclass(frozen=True, slots=True)
class Sample:
    name: str
    labels: tuple[tuple[str, str], ...]
    value: float
    value_text: str  # as written: a large integer keeps its exact digits here
    timestamp_ms: int | None
    line: int
    text: str

    def label(self, name: str, default: str = "") -> str:
        for key, value in self.labels:
            if key == name:
                return value
        return default

    @property
    def label_map(self) -> dict[str, str]:
        return dict(self.labels)


@dataclass(frozen=True, slots=True)
class Metadata:
    kind: str  # HELP or TYPE
    name: str
    text: str  # the help text, or the type
    line: int


@dataclass(frozen=True, slots=True)
class BadLine:
    line: int
    text: str
    reason: str


Item = Sample | Metadata | BadLine


def _skip_blanks(text: str, at: int) -> int:
    while at < len(text) and text[at] in " \t":
        at += 1
    return at


def _unescape(raw: str) -> str:
    if "\\" not in raw:
        return raw
    out: list[str] = []
    chars = iter(raw)
    for ch in chars:
        if ch != "\\":
            out.append(ch)
            continue
        nxt = next(chars, "")
        out.append({"n": "\n", "\\": "\\", '"': '"'}.get(nxt, "\\" + nxt))
    return "".join(out)


def _labels(text: str, at: int) -> tuple[tuple[tuple[str, str], ...], int] | str:
    """Labels from just after `{`: the pairs and the index after `}`, or why they cannot be read."""
    pairs: list[tuple[str, str]] = []
    while True:
        at = _skip_blanks(text, at)
        if at < len(text) and text[at] == "}":
            return tuple(pairs), at + 1
        name = _LABEL_NAME.match(text, at)
        if name is None:
            return "bad label name"
        at = _skip_blanks(text, name.end())
        if at >= len(text) or text[at] != "=":
            return f"label {name.group()} has no '='"
        at = _skip_blanks(text, at + 1)
        if at >= len(text) or text[at] != '"':
            return f"label {name.group()} has no quoted value"
        end = at + 1
        while end < len(text) and text[end] != '"':
            end += 2 if text[end] == "\\" else 1
        if end >= len(text):
            return f"label {name.group()} has an unterminated value"
        raw = text[at + 1 : end]
        if len(raw) > MAX_LABEL_VALUE:
            return f"label {name.group()} is longer than {MAX_LABEL_VALUE} characters"
        pairs.append((name.group(), _unescape(raw)))
        if len(pairs) > MAX_LABELS:
            return f"more than {MAX_LABELS} labels"
        at = _skip_blanks(text, end + 1)
        if at < len(text) and text[at] == ",":
            at += 1
        elif at >= len(text) or text[at] != "}":
            return "labels are not separated by ','"


def parse_line(text: str, line: int) -> Item | None:
    """One line of a scrape: a sample, a HELP/TYPE line, a bad line, or None (blank, or a comment)."""
    stripped = text.strip()
    if not stripped:
        return None
    if stripped.startswith("#"):
        meta = _META.match(stripped)
        if meta is None:
            return None
        kind, name, rest = meta.group(1), meta.group(2), (meta.group(3) or "").strip()
        if kind == "TYPE" and rest not in _TYPES:
            return BadLine(line, text, f"unknown metric type {rest[:40]!r}")
        return Metadata(kind, name, _unescape(rest) if kind == "HELP" else rest, line)
    at = _skip_blanks(text, 0)
    name = _NAME.match(text, at)
    if name is None:
        return BadLine(line, text, "does not start with a metric name")
    at = _skip_blanks(text, name.end())
    labels: tuple[tuple[str, str], ...] = ()
    if at < len(text) and text[at] == "{":
        read = _labels(text, at + 1)
        if isinstance(read, str):
            return BadLine(line, text, read)
        labels, at = read
    tokens = text[at:].split()
    if not tokens:
        return BadLine(line, text, "no value")
    if len(tokens) > 2:
        return BadLine(line, text, "more than a value and a timestamp after the labels")
    if _FLOAT.fullmatch(tokens[0]) is None:
        return BadLine(line, text, f"value {tokens[0][:40]!r} is not a number")
    value = float(tokens[0])  # a huge exponent gives inf, never an error
    timestamp = None
    if len(tokens) == 2:
        if _INT.fullmatch(tokens[1]) is None:
            return BadLine(line, text, f"timestamp {tokens[1][:40]!r} is not an integer")
        timestamp = int(tokens[1])
    return Sample(name.group(), labels, value, tokens[0], timestamp, line, text)


def parse_lines(lines: Iterable[str]) -> Iterator[Item]:
    """Every sample, HELP/TYPE line and bad line of a scrape, in order, holding one line at a time."""
    for number, text in enumerate(lines, start=1):
        item = parse_line(text.rstrip("\r\n"), number)
        if item is not None:
            yield item


def exact_int(sample: Sample) -> int | None:
    """The value as an exact integer when it is written as one (float loses the low digits of a 64-bit
    counter), or when it is a finite whole float; None otherwise."""
    text = sample.value_text.lstrip("+")
    if re.fullmatch(r"-?\d{1,30}", text):
        return int(text)
    if math.isfinite(sample.value) and sample.value == int(sample.value) and abs(sample.value) < 2**63:
        return int(sample.value)
    return None
