"""Helpers for the instrumentation tests: a scrape read back through prometheus-client's own parser, a clock the
tests move by hand, and torch as a requirement (skipped without it, failed under CI=true)."""

from __future__ import annotations

import importlib.util
import socket
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import IN_CI

Labels = frozenset[tuple[str, str]]


@dataclass
class Scrape:
    """One exposition, parsed: family types by name, and every sample by (name, labels)."""

    text: str
    types: dict[str, str] = field(default_factory=dict)
    samples: dict[tuple[str, Labels], float] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> Scrape:
        scrape = cls(text)
        for family in text_string_to_metric_families(text):
            scrape.types[family.name] = family.type
            for s in family.samples:
                scrape.samples[(s.name, frozenset(s.labels.items()))] = s.value
        return scrape

    def value(self, name: str, **labels: str) -> float | None:
        return self.samples.get((name, frozenset(labels.items())))

    def names(self) -> set[str]:
        return {name for name, _ in self.samples}

    def label_sets(self, name: str) -> list[dict[str, str]]:
        return [dict(labels) for n, labels in self.samples if n == name]


def scrape(registry: CollectorRegistry) -> Scrape:
    return Scrape.parse(generate_latest(registry).decode())


class Clock:
    """perf_counter and time for a module under test, moved by `advance`."""

    def __init__(self, start: float = 1000.0, wall: float = 1_750_000_000.0) -> None:
        self.now, self.wall = start, wall

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.wall += seconds

    def install(self, monkeypatch: pytest.MonkeyPatch, module: object) -> Clock:
        clock = SimpleNamespace(
            perf_counter=lambda: self.now, time=lambda: self.wall, time_ns=lambda: int(self.wall * 1e9)
        )
        monkeypatch.setattr(module, "time", clock)
        return self


def require_torch() -> None:
    if importlib.util.find_spec("torch") is None:
        msg = "needs torch (pip install torch==2.13.0, in the dev extra)"
        if IN_CI:
            pytest.fail(msg)
        pytest.skip(msg)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
