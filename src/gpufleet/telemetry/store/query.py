"""The query interface shared by the embedded store and the remote (Prometheus / VictoriaMetrics) backend.

A query names one metric and label matchers (a PromQL vector selector), and asks for the latest value
(instant),
values on a time grid (range: start, end, step), or either of those aggregated by labels
(sum/avg/max/min/count by).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

import numpy as np

from gpufleet.errors import ParseError

AggOp = Literal["sum", "avg", "max", "min", "count"]
AGG_OPS: tuple[str, ...] = ("sum", "avg", "max", "min", "count")
_OPS = ("=~", "!~", "!=", "=")
_SELECTOR = re.compile(r"^\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(?:\{(.*)\})?\s*$", re.S)
_MATCHER = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')


@dataclass(frozen=True, slots=True)
class Selector:
    """`name{label="v", other=~"re"}`: one metric and its label matchers."""

    name: str
    matchers: tuple[tuple[str, str, str], ...] = ()  # (label, op, value), op one of = != =~ !~

    @classmethod
    def of(cls, name: str, **labels: str) -> Selector:
        return cls(name, tuple((k, "=", v) for k, v in labels.items()))

    @classmethod
    def parse(cls, text: str) -> Selector:
        match = _SELECTOR.match(text)
        if not match:
            raise ParseError(f"not a metric selector: {text!r}", fix='write it as name{label="value"}')
        body = match.group(2) or ""
        matchers = []
        pos = 0
        while pos < len(body.strip()):
            m = _MATCHER.match(body, pos)
            if not m:
                raise ParseError(f"bad label matcher in {text!r} near {body[pos:]!r}", fix='use label="value"')
            value = m.group(3).replace('\\"', '"').replace("\\\\", "\\")
            matchers.append((m.group(1), m.group(2), value))
            pos = m.end()
        return cls(match.group(1), tuple(matchers))

    def promql(self) -> str:
        if not self.matchers:
            return self.name
        inner = ",".join(
            f'{k}{op}"{v.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
            for k, op, v in self.matchers
        )
        return f"{self.name}{{{inner}}}"

    def matches(self, labels: Mapping[str, str]) -> bool:
        for key, op, value in self.matchers:
            have = labels.get(key, "")
            if op == "=" and have != value:
                return False
            if op == "!=" and have == value:
                return False
            if op == "=~" and not re.fullmatch(value, have):
                return False
            if op == "!~" and re.fullmatch(value, have):
                return False
        return True


@dataclass(slots=True)
class InstantSample:
    labels: dict[str, str]
    timestamp: float
    value: float


@dataclass(slots=True)
class RangeSeries:
    labels: dict[str, str]
    timestamps: np.ndarray
    values: np.ndarray = field(repr=False)


class MetricStore(Protocol):
    """One query interface over the embedded store and a remote Prometheus/VictoriaMetrics."""

    def instant(self, selector: Selector | str, at: float | None = None) -> list[InstantSample]: ...

    def range(self, selector: Selector | str, start: float, end: float, step: float) -> list[RangeSeries]: ...

    def aggregate_instant(
        self, op: AggOp, selector: Selector | str, by: Sequence[str], at: float | None = None
    ) -> list[InstantSample]: ...

    def aggregate_range(
        self, op: AggOp, selector: Selector | str, by: Sequence[str], start: float, end: float, step: float
    ) -> list[RangeSeries]: ...


def as_selector(selector: Selector | str) -> Selector:
    return selector if isinstance(selector, Selector) else Selector.parse(selector)


def check_op(op: str) -> None:
    if op not in AGG_OPS:
        raise ParseError(f"unknown aggregation {op!r}", fix=f"use one of {', '.join(AGG_OPS)}")


def aggregation_promql(op: str, selector: Selector, by: Sequence[str]) -> str:
    check_op(op)
    return f"{op} by ({', '.join(by)}) ({selector.promql()})"


def aggregate_matrix(op: str, matrix: np.ndarray) -> np.ndarray:
    """Aggregate rows of a (series, points) matrix point by point, ignoring NaN; all-NaN columns stay NaN."""
    check_op(op)
    present = ~np.isnan(matrix)
    count = present.sum(axis=0).astype(np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        if op == "count":
            out = count
        elif op == "sum":
            out = np.nansum(matrix, axis=0)
        elif op == "avg":
            out = np.nanmean(matrix, axis=0)
        elif op == "max":
            out = np.nanmax(matrix, axis=0)
        else:
            out = np.nanmin(matrix, axis=0)
    return np.where(count > 0, out, np.nan)


def group_key(labels: Mapping[str, str], by: Sequence[str]) -> tuple[str, ...]:
    return tuple(labels.get(k, "") for k in by)


def aggregate_series(op: str, series: Sequence[RangeSeries], by: Sequence[str]) -> list[RangeSeries]:
    """Aggregate range series that share one time grid, grouped by the `by` labels."""
    groups: dict[tuple[str, ...], list[RangeSeries]] = {}
    for s in series:
        groups.setdefault(group_key(s.labels, by), []).append(s)
    out = []
    for key, members in groups.items():
        matrix = np.vstack([m.values for m in members])
        values = aggregate_matrix(op, matrix)
        keep = ~np.isnan(values)
        labels = {k: v for k, v in zip(by, key, strict=True) if v}
        out.append(RangeSeries(labels, members[0].timestamps[keep], values[keep]))
    return out
