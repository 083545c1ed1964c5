"""The application layer benchmark.

Instrumentation overhead: what gpufleet.instrument costs the code it measures, per observation (one gauge set,
counter increment or histogram observation), next to plain prometheus-client code making the same observations on
children bound beforehand, the least any instrumentation can cost, in the same run:
- a training step: the whole `with metrics.step(...)` block with an input wait, loss, gradient norm and learning
  rate set (13 observations);
- an inference request with its first token and N more (7 + 2N observations);
- the ASGI middleware around a streamed response of N chunks, against the bare app.
Medians over repeats. Target: < 5 us per observation.

Run: python bench/app_layer.py [--quick] [--tokens N]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from rich.console import Console
from rich.table import Table

from gpufleet.instrument import InferenceMetrics, MetricsMiddleware, TrainingMetrics, names

TARGET_US = 5.0
STEP_OBSERVATIONS = (
    13  # compute, data wait, duration, step, steps, samples, samples/s, tokens, tokens/s, 3 values, time
)


@dataclass(frozen=True)
class Row:
    measure: str
    value: str
    peer: str
    ratio: float | None
    target: str
    ok: bool | None


def per_call_us(fn: Callable[[], object], calls: int, repeats: int) -> float:
    """The median over `repeats` of the mean time of one call, in microseconds."""
    times = []
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(times)


# --- training ---------------------------------------------------------------------------------------------------


def instrumented_step(registry: CollectorRegistry) -> Callable[[], None]:
    metrics = TrainingMetrics("bench", rank=0, world_size=8, registry=registry)

    def step() -> None:
        with metrics.step(samples=256, tokens=256 * 2048) as s:
            with metrics.data_wait():
                pass
            s.loss = 2.5
            s.grad_norm = 0.8
            s.learning_rate = 3e-4

    return step


def plain_step(registry: CollectorRegistry) -> Callable[[], None]:
    """The same observations written by hand with prometheus-client, children bound once."""
    job, rank = ("job",), ("job", "rank")

    def gauge(name: str, labels: tuple[str, ...] = job) -> Gauge:
        return Gauge(name, name, labels, registry=registry).labels("bench", *(["0"] if len(labels) == 2 else []))

    def counter(name: str) -> Counter:
        return Counter(name, name, job, registry=registry).labels("bench")

    compute, wait = gauge(names.TRAINING_RANK_COMPUTE, rank), gauge(names.TRAINING_RANK_DATA_WAIT, rank)
    duration, step_no, loss = (
        gauge(names.TRAINING_STEP_DURATION),
        gauge(names.TRAINING_STEP),
        gauge(names.TRAINING_LOSS),
    )
    grad, lr, last = (
        gauge(names.TRAINING_GRADIENT_NORM),
        gauge(names.TRAINING_LEARNING_RATE),
        gauge(names.TRAINING_LAST_STEP),
    )
    samples_rate, tokens_rate = gauge(names.TRAINING_SAMPLES_PER_SECOND), gauge(names.TRAINING_TOKENS_PER_SECOND)
    steps, samples, tokens = (
        counter(names.TRAINING_STEPS),
        counter(names.TRAINING_SAMPLES),
        counter(names.TRAINING_TOKENS),
    )
    number = [0]

    def step() -> None:
        start = time.perf_counter()
        wait_start = time.perf_counter()
        waited = time.perf_counter() - wait_start
        elapsed = time.perf_counter() - start
        number[0] += 1
        compute.set(elapsed - waited)
        wait.set(waited)
        duration.set(elapsed)
        step_no.set(number[0])
        steps.inc()
        samples.inc(256)
        samples_rate.set(256 / elapsed)
        tokens.inc(256 * 2048)
        tokens_rate.set(256 * 2048 / elapsed)
        loss.set(2.5)
        grad.set(0.8)
        lr.set(3e-4)
        last.set(time.time())

    return step


# --- inference --------------------------------------------------------------------------------------------------


def instrumented_request(registry: CollectorRegistry, tokens: int) -> Callable[[], None]:
    metrics = InferenceMetrics("bench", "1", registry=registry)

    def request() -> None:
        with metrics.request() as r:
            r.first_token()
            for _ in range(tokens):
                r.token()

    return request


def plain_request(registry: CollectorRegistry, tokens: int) -> Callable[[], None]:
    labels = ("model", "version")

    def histogram(name: str, buckets: tuple[float, ...]) -> Histogram:
        return Histogram(name, name, labels, registry=registry, buckets=buckets).labels("bench", "1")

    duration = histogram(names.INFERENCE_REQUEST_DURATION, names.REQUEST_DURATION_BUCKETS)
    ttft = histogram(names.INFERENCE_TIME_TO_FIRST_TOKEN, names.TIME_TO_FIRST_TOKEN_BUCKETS)
    itl = histogram(names.INFERENCE_INTER_TOKEN_LATENCY, names.INTER_TOKEN_LATENCY_BUCKETS)
    ok = Counter(names.INFERENCE_REQUESTS, "r", (*labels, "outcome"), registry=registry).labels("bench", "1", "ok")
    generated = Counter(names.INFERENCE_GENERATED_TOKENS, "t", labels, registry=registry).labels("bench", "1")
    in_flight = Gauge(names.INFERENCE_IN_FLIGHT, "f", labels, registry=registry).labels("bench", "1")

    def request() -> None:
        start = time.perf_counter()
        in_flight.inc()
        last = time.perf_counter()
        ttft.observe(last - start)
        generated.inc(1)
        for _ in range(tokens):
            now = time.perf_counter()
            itl.observe(now - last)
            generated.inc(1)
            last = now
        in_flight.dec()
        duration.observe(time.perf_counter() - start)
        ok.inc()

    return request


def streamed_app(chunks: int) -> Any:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for _ in range(chunks):
            await send({"type": "http.response.body", "body": b"tok ", "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    return app


def asgi_requests(app: Any, requests: int) -> Callable[[], None]:
    """`requests` calls of `app` in one event loop run, so the loop's own start is not counted per request."""
    scope = {"type": "http", "path": "/v1/generate", "headers": []}

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    async def send(message: Any) -> None:
        return None

    async def many() -> None:
        for _ in range(requests):
            await app(scope, receive, send)

    return lambda: asyncio.run(many())


# --- sections ---------------------------------------------------------------------------------------------------


def overhead_rows(quick: bool = False, tokens: int = 64) -> list[Row]:
    """Instrumentation overhead, per observation, against plain prometheus-client in the same run."""
    calls, repeats = (2_000, 5) if quick else (20_000, 9)
    rows = []

    ours = per_call_us(instrumented_step(CollectorRegistry()), calls, repeats)
    plain = per_call_us(plain_step(CollectorRegistry()), calls, repeats)
    rows.append(_row(f"training step ({STEP_OBSERVATIONS} observations)", ours, plain, STEP_OBSERVATIONS))

    observations = 7 + 2 * tokens
    request_calls = max(calls // tokens, 50)
    ours = per_call_us(instrumented_request(CollectorRegistry(), tokens), request_calls, repeats)
    plain = per_call_us(plain_request(CollectorRegistry(), tokens), request_calls, repeats)
    rows.append(
        _row(f"inference request, 1 + {tokens} tokens ({observations} observations)", ours, plain, observations)
    )

    per_run = max(request_calls // 10, 10)
    bare = per_call_us(asgi_requests(streamed_app(tokens + 1), per_run), 10, repeats) / per_run
    wrapped_app = MetricsMiddleware(streamed_app(tokens + 1), InferenceMetrics("bench", "1", CollectorRegistry()))
    wrapped = per_call_us(asgi_requests(wrapped_app, per_run), 10, repeats) / per_run
    extra = (wrapped - bare) / observations
    rows.append(
        Row(
            f"ASGI middleware, streamed response of {tokens + 1} chunks",
            f"+{extra:.2f} us/obs (+{wrapped - bare:.0f} us/request)",
            f"bare app: {bare:.0f} us/request",
            wrapped / bare,
            f"< {TARGET_US:g} us/obs",
            extra < TARGET_US,
        )
    )
    return rows


def _row(measure: str, ours_us: float, plain_us: float, observations: int) -> Row:
    per_obs = ours_us / observations
    return Row(
        measure,
        f"{per_obs:.2f} us/obs ({ours_us:.1f} us)",
        f"prometheus-client: {plain_us / observations:.2f} us/obs ({plain_us:.1f} us)",
        ours_us / plain_us,
        f"< {TARGET_US:g} us/obs",
        per_obs < TARGET_US,
    )


def section_table(title: str, rows: list[Row]) -> Table:
    table = Table(title=title, header_style="bold")
    for col in ("measure", "gpufleet", "peer / baseline", "ratio", "target", "verdict"):
        table.add_column(col)
    for r in rows:
        verdict = "" if r.ok is None else ("[green]meets[/green]" if r.ok else "[red]short[/red]")
        table.add_row(r.measure, r.value, r.peer, "" if r.ratio is None else f"{r.ratio:.2f}x", r.target, verdict)
    return table


def detection_rows() -> list[Row]:
    """gpufleet's incident for each case against the first 15 s evaluation at which promtool says the rule fires."""
    from app_detection import detection

    rows = []
    for case in detection():
        ours = case.gpufleet_s
        peer = case.prometheus_s
        rows.append(
            Row(
                case.what,
                "not detected" if ours is None else f"{ours / 60:.1f} min",
                f"{case.alert}: " + ("did not fire" if peer is None else f"{peer / 60:.1f} min"),
                None if ours is None or peer is None or ours == 0 else peer / ours,
                "faster than the rule",
                None if ours is None else (peer is None or ours <= peer),
            )
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer calls and repeats (smoke run)")
    parser.add_argument("--tokens", type=int, default=64, help="tokens after the first, per inference request")
    parser.add_argument("--no-detection", action="store_true", help="skip the detection-latency section (2 min)")
    args = parser.parse_args()
    console = Console(width=170)
    sections = [("Instrumentation overhead (medians)", overhead_rows(args.quick, args.tokens))]
    if not args.no_detection:
        sections.append(
            ("Detection latency: the twin through the door vs Prometheus rules at a 15 s scrape", detection_rows())
        )
    for title, rows in sections:
        console.print(section_table(title, rows))


if __name__ == "__main__":
    main()
