"""Application metrics for training and serving code: what the model and its users see, beside what the GPUs do.
It needs prometheus-client and nothing else (no numpy, no torch at import); the gpufleet agent scrapes the series.

Training, on every rank:

    from prometheus_client import start_http_server
    from gpufleet.instrument import TrainingMetrics, monitored_barrier

    metrics = TrainingMetrics("llm-pretrain", rank=rank, world_size=world_size)
    start_http_server(9400 + local_rank)
    for x, y in loader:
        with metrics.step(samples=global_batch) as step:
            loss = train_step(x, y)
            step.loss = loss.item()
            step.learning_rate = scheduler.get_last_lr()[0]
        if step.number % 1000 == 0:
            with metrics.checkpoint():
                save(model)
            monitored_barrier(store, name="checkpoint", timeout=300, metrics=metrics)

Serving:

    from gpufleet.instrument import InferenceMetrics, MetricsMiddleware

    app = MetricsMiddleware(app, InferenceMetrics("llama-3-8b", version="v2"), metrics_path="/metrics")

With an OpenTelemetry SDK configured, served requests are also spans with exemplars on the latency histograms
(`gpufleet.instrument.tracing`; OpenTelemetry is never imported by the library itself).

Names, labels and buckets are those of `gpufleet.instrument.names`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpufleet.instrument.asgi import MetricsMiddleware, request_handle
    from gpufleet.instrument.barrier import BarrierTimeout, monitored_barrier
    from gpufleet.instrument.inference import InferenceMetrics, Request
    from gpufleet.instrument.training import Step, TrainingMetrics

# Loaded at first use: the agent and the rules read `names` alone, where prometheus-client may not be installed.
_WHERE = {
    "BarrierTimeout": "barrier",
    "InferenceMetrics": "inference",
    "MetricsMiddleware": "asgi",
    "Request": "inference",
    "Step": "training",
    "TrainingMetrics": "training",
    "monitored_barrier": "barrier",
    "request_handle": "asgi",
}
__all__ = [
    "BarrierTimeout",
    "InferenceMetrics",
    "MetricsMiddleware",
    "Request",
    "Step",
    "TrainingMetrics",
    "monitored_barrier",
    "request_handle",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
