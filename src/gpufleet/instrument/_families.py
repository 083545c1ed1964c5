"""Metric families shared per registry, and gauges that appear only once they hold a value.

Families are created once per registry and reused, so a second `TrainingMetrics` for another job (or the same
object built again, as a notebook cell run twice does) binds its own children instead of failing on a duplicate
name.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from typing import TypeVar

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

Family = TypeVar("Family", Counter, Gauge, Histogram)

_lock = threading.Lock()
_by_registry: weakref.WeakKeyDictionary[CollectorRegistry, dict[str, Counter | Gauge | Histogram]] = (
    weakref.WeakKeyDictionary()
)


def registry_or_default(registry: CollectorRegistry | None) -> CollectorRegistry:
    return REGISTRY if registry is None else registry


def family(
    registry: CollectorRegistry,
    kind: type[Family],
    name: str,
    documentation: str,
    labelnames: Sequence[str],
    buckets: Sequence[float] | None = None,
) -> Family:
    """The family `name` of `registry`, created at its first use. Asking again with other labels is an error that
    says which, rather than two families fighting over one name."""
    with _lock:
        known = _by_registry.setdefault(registry, {})
        found = known.get(name)
        if found is None:
            if buckets is None:
                found = kind(name, documentation, labelnames, registry=registry)
            else:
                found = kind(name, documentation, labelnames, registry=registry, buckets=buckets)  # type: ignore[call-arg]
            known[name] = found
    if not isinstance(found, kind) or tuple(found._labelnames) != tuple(labelnames):
        raise ValueError(
            f"{name} is already registered with labels {list(found._labelnames)}; this one asks for"
            f" {list(labelnames)} (use one registry per label set)"
        )
    return found


class LazyGauge:
    """One labelled gauge child, bound at its first value. A gauge bound earlier would export 0 until then: a loss
    of 0, or a last step in 1970 that a stall detector would read as a hung job."""

    __slots__ = ("_child", "_family", "_labels")

    def __init__(self, family: Gauge, *labels: str) -> None:
        self._family = family
        self._labels = labels
        self._child: Gauge | None = None

    def set(self, value: float) -> None:
        child = self._child
        if child is None:
            child = self._child = self._family.labels(*self._labels)
        child.set(value)


class LazyCounter:
    """One labelled counter child, bound at its first increment: for counts a job may never keep (tokens, in a
    job without them), which would otherwise claim 0."""

    __slots__ = ("_child", "_family", "_labels")

    def __init__(self, family: Counter, *labels: str) -> None:
        self._family = family
        self._labels = labels
        self._child: Counter | None = None

    def inc(self, amount: float) -> None:
        child = self._child
        if child is None:
            child = self._child = self._family.labels(*self._labels)
        child.inc(amount)
