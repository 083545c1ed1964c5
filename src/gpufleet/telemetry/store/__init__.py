"""Metric stores behind one query interface: the embedded store (default) and a remote
Prometheus/VictoriaMetrics."""

from __future__ import annotations

from pathlib import Path

from gpufleet.telemetry.exposition.config import ExpositionConfig
from gpufleet.telemetry.store.embedded import EmbeddedStore, StoreConfig
from gpufleet.telemetry.store.frame_series import FrameSeries
from gpufleet.telemetry.store.query import (
    AggOp,
    InstantSample,
    MetricStore,
    RangeSeries,
    Selector,
)
from gpufleet.telemetry.store.remote import RemoteConfig, RemoteStore


def open_store(target: str | Path | None, exposition: ExpositionConfig | None = None) -> EmbeddedStore | RemoteStore:
    """An http(s) URL opens the remote backend; a directory (or None, in memory) the embedded store."""
    if isinstance(target, str) and target.startswith(("http://", "https://")):
        return RemoteStore(target, exposition)
    return EmbeddedStore(Path(target) if target is not None else None, exposition=exposition)


__all__ = [
    "AggOp",
    "EmbeddedStore",
    "FrameSeries",
    "InstantSample",
    "MetricStore",
    "RangeSeries",
    "RemoteConfig",
    "RemoteStore",
    "Selector",
    "StoreConfig",
    "open_store",
]
