"""The remote backend: remote-write frames to Prometheus or VictoriaMetrics, read back with PromQL over HTTP.

Prometheus takes remote write at /api/v1/write when started with --web.enable-remote-write-receiver;
VictoriaMetrics takes it at /api/v1/write (and text exposition at /api/v1/import/prometheus). Both answer
/api/v1/query and /api/v1/query_range.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import httpx
import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from gpufleet.errors import BackendError
from gpufleet.telemetry.exposition.config import ExpositionConfig
from gpufleet.telemetry.frame import MetricFrame
from gpufleet.telemetry.store.frame_series import FrameSeries
from gpufleet.telemetry.store.query import (
    AggOp,
    InstantSample,
    RangeSeries,
    Selector,
    aggregation_promql,
    as_selector,
)
from gpufleet.telemetry.store.remote_write import HEADERS, encode_write_request, snappy_compress


def _seconds(timestamp: float) -> str:
    """Millisecond text rounded like sample timestamps, so a query at a write's time sees that write."""
    return f"{round(timestamp * 1000) / 1000:.3f}"


class RemoteConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str  # base URL, e.g. http://127.0.0.1:8428 (VictoriaMetrics) or http://127.0.0.1:9090 (Prometheus)
    write_path: str = "/api/v1/write"
    timeout_s: float = Field(10.0, gt=0)
    batch_series: int = Field(5000, gt=0)  # series per remote-write request
    query_params: dict[str, str] = Field(default_factory=dict)  # e.g. {"nocache": "1"} for VictoriaMetrics


class RemoteStore:
    """MetricStore over HTTP. Writes are remote-write protobuf; reads are PromQL."""

    def __init__(
        self,
        config: RemoteConfig | str,
        exposition: ExpositionConfig | None = None,
        client: httpx.Client | None = None,
    ) -> None:
        self.config = RemoteConfig(url=config) if isinstance(config, str) else config
        self.base = self.config.url.rstrip("/")
        self.client = client or httpx.Client(timeout=self.config.timeout_s)
        self.frames = FrameSeries(exposition)

    def close(self) -> None:
        self.client.close()

    # -- writing ---------------------------------------------------------------------------------------------
    def write_series(self, series: Sequence[tuple[Mapping[str, str], Sequence[tuple[float, int]]]]) -> None:
        """Send (labels, [(value, timestamp_ms), ...]) series, in batches."""
        step = self.config.batch_series
        for i in range(0, len(series), step):
            body = snappy_compress(encode_write_request(series[i : i + step]))
            self._post(self.config.write_path, body)

    def write(self, labels: Mapping[str, str], timestamp: float, value: float, kind: str = "gauge") -> None:
        self.write_series([(labels, [(float(value), round(timestamp * 1000))])])

    def ingest(self, frame: MetricFrame, timestamp: float | None = None) -> int:
        ts_ms = round((frame.timestamp if timestamp is None else timestamp) * 1000)
        series = [(labels, [(value, ts_ms)]) for labels, value in self.frames.all_samples(frame)]
        self.write_series(series)
        return len(series)

    def flush(self) -> None:
        """Writes are sent as they come; nothing is buffered."""

    def _post(self, path: str, body: bytes) -> None:
        try:
            resp = self.client.post(self.base + path, content=body, headers=HEADERS)
        except httpx.HTTPError as exc:
            raise BackendError(
                f"remote write to {self.base}{path} failed: {exc}", fix="check that the metrics backend is up"
            ) from exc
        if resp.status_code >= 300:
            hint = " (Prometheus needs --web.enable-remote-write-receiver)" if resp.status_code == 404 else ""
            raise BackendError(
                f"remote write to {self.base}{path} answered {resp.status_code}: {resp.text[:200]}{hint}"
            )

    # -- PromQL ----------------------------------------------------------------------------------------------
    def _get(self, path: str, params: dict[str, Any]) -> dict[str, Any]:
        params = {**self.config.query_params, **params}
        try:
            resp = self.client.get(self.base + path, params=params)
        except httpx.HTTPError as exc:
            raise BackendError(f"PromQL query to {self.base} failed: {exc}", fix="check the backend URL") from exc
        try:
            data = resp.json()
        except ValueError as exc:
            raise BackendError(f"{self.base}{path} answered {resp.status_code} with non-JSON") from exc
        if data.get("status") != "success":
            raise BackendError(f"PromQL query failed: {data.get('errorType')}: {data.get('error')}")
        return dict(data["data"])

    def query(self, promql: str, at: float | None = None) -> list[InstantSample]:
        params: dict[str, Any] = {"query": promql}
        if at is not None:
            params["time"] = _seconds(at)
        data = self._get("/api/v1/query", params)
        if data["resultType"] == "scalar":
            ts, value = data["result"]
            return [InstantSample({}, float(ts), float(value))]
        return [InstantSample(dict(r["metric"]), float(r["value"][0]), float(r["value"][1])) for r in data["result"]]

    def query_range(self, promql: str, start: float, end: float, step: float) -> list[RangeSeries]:
        data = self._get(
            "/api/v1/query_range",
            {"query": promql, "start": _seconds(start), "end": _seconds(end), "step": step},
        )
        out = []
        for r in data["result"]:
            points = r["values"]
            out.append(
                RangeSeries(
                    dict(r["metric"]),
                    np.array([float(p[0]) for p in points]),
                    np.array([float(p[1]) for p in points]),
                )
            )
        return out

    def instant(self, selector: Selector | str, at: float | None = None) -> list[InstantSample]:
        return self.query(as_selector(selector).promql(), at)

    def range(self, selector: Selector | str, start: float, end: float, step: float) -> list[RangeSeries]:
        return self.query_range(as_selector(selector).promql(), start, end, step)

    def aggregate_instant(
        self, op: AggOp, selector: Selector | str, by: Sequence[str], at: float | None = None
    ) -> list[InstantSample]:
        return self.query(aggregation_promql(op, as_selector(selector), by), at)

    def aggregate_range(
        self, op: AggOp, selector: Selector | str, by: Sequence[str], start: float, end: float, step: float
    ) -> list[RangeSeries]:
        return self.query_range(aggregation_promql(op, as_selector(selector), by), start, end, step)
