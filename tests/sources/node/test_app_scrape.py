"""Application /metrics into the frame: prometheus-client's own exposition read back (histograms folded from their
buckets), only the application families kept, a cap on series, and a target that stops answering goes stale."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import numpy as np
import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from gpufleet.agent.services import ServiceWindows
from gpufleet.instrument import names
from gpufleet.sources.node.app_scrape import AppMetricsSource, AppScrape, read_app_metrics
from gpufleet.telemetry.frame import MetricFrame


def _registry() -> CollectorRegistry:
    reg = CollectorRegistry()
    hist = Histogram(
        names.INFERENCE_REQUEST_DURATION,
        "request duration",
        ["model", "version"],
        buckets=names.REQUEST_DURATION_BUCKETS,
        registry=reg,
    )
    child = hist.labels("chat", "v2")
    for value in [0.04] * 90 + [2.5] * 10:
        child.observe(value)
    Counter(names.INFERENCE_ERRORS, "errors", ["model", "version"], registry=reg).labels("chat", "v2").inc(3)
    Gauge(names.INFERENCE_QUEUE_DEPTH, "queue", ["model", "version"], registry=reg).labels("chat", "v2").set(7)
    Gauge(names.TRAINING_LOSS, "loss", ["job"], registry=reg).labels("llm").set(float("nan"))
    Gauge("process_open_fds", "not ours", registry=reg).set(12)
    return reg


def test_prometheus_client_exposition_reads_back() -> None:
    text = generate_latest(_registry()).decode()
    series = read_app_metrics(text.splitlines())
    key = (names.INFERENCE_REQUEST_DURATION, (("model", "chat"), ("version", "v2")))
    hist = series.histograms[key]
    assert hist.bounds == tuple(names.REQUEST_DURATION_BUCKETS)
    assert hist.count == 100 and hist.sum == pytest.approx(0.04 * 90 + 2.5 * 10)
    assert hist.bucket_counts[list(hist.bounds).index(2.0)] == 90
    assert series.gauges[(names.INFERENCE_ERRORS + "", (("model", "chat"), ("version", "v2")))] == 3
    assert np.isnan(series.gauges[(names.TRAINING_LOSS, (("job", "llm"),))])
    assert not any(name.startswith("process_") for name, _ in series.gauges)


def test_a_scraped_service_becomes_a_fact_with_its_histogram() -> None:
    frame = MetricFrame(entities=())
    source = AppMetricsSource(_StaticScrape(generate_latest(_registry()).decode()))
    source.collect(frame)
    (fact,) = ServiceWindows().facts(frame, 100.0)
    assert (fact.service, fact.version, fact.errors, fact.queue_depth) == ("chat", "v2", 3, 7.0)
    assert fact.latency is not None and fact.latency.count == 100 and fact.problems == []


def test_broken_buckets_are_said_and_skipped() -> None:
    text = "\n".join(
        [
            f"# TYPE {names.INFERENCE_REQUEST_DURATION} histogram",
            f'{names.INFERENCE_REQUEST_DURATION}_bucket{{model="m",le="0.1"}} 50',
            f'{names.INFERENCE_REQUEST_DURATION}_bucket{{model="m",le="0.5"}} 20',  # falls: not cumulative
            f'{names.INFERENCE_REQUEST_DURATION}_bucket{{model="m",le="+Inf"}} 60',
            f'{names.INFERENCE_REQUEST_DURATION}_count{{model="m"}} 60',
            "garbage line {{{",
        ]
    )
    frame = MetricFrame(entities=())
    AppMetricsSource(_StaticScrape(text)).collect(frame)
    (fact,) = ServiceWindows().facts(frame, 1.0)
    assert fact.latency is None and fact.p99_s is None
    assert "cumulative bucket counts fall" in fact.problems[0]


def test_series_over_the_cap_are_dropped_and_counted() -> None:
    lines = [f'training_loss{{job="j{i}"}} 1' for i in range(10)]
    series = read_app_metrics(lines, max_series=4)
    assert len(series.gauges) == 4 and series.dropped == 6


class _StaticScrape(AppScrape):
    def __init__(self, text: str) -> None:
        super().__init__([])
        self.latest = {"static": read_app_metrics(text.splitlines())}


@pytest.fixture
def server() -> Iterator[tuple[str, dict[str, bytes]]]:
    body = {"text": generate_latest(_registry())}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if not body["text"]:
                self.send_error(503)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body["text"])

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/metrics", body
    finally:
        httpd.shutdown()


def test_a_target_that_stops_answering_goes_stale(server: tuple[str, dict[str, bytes]]) -> None:
    url, body = server
    scrape = AppScrape([url])
    source = AppMetricsSource(scrape)
    frame = MetricFrame(entities=())
    with httpx.Client() as client:
        scrape.refresh(client)
        source.collect(frame)
        assert any(name == names.INFERENCE_REQUEST_DURATION for name, _ in frame.histograms)
        body["text"] = b""  # the server now answers 503
        scrape.refresh(client)
    source.collect(frame)
    assert scrape.failing and not frame.histograms and not frame.gauges  # stale: gone, not zero
