"""Small twins whose workloads report their application series, and reading those series back from a frame."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from gpufleet.instrument import names
from gpufleet.model import InferenceService, TrainingJob
from gpufleet.sim.faults import InjectedFault
from gpufleet.sim.source import TwinSource
from gpufleet.sim.twin import Twin
from gpufleet.spec.builder import build_cluster
from gpufleet.spec.cluster_spec import ClusterBody
from gpufleet.spec.scenario_spec import FaultType
from gpufleet.telemetry.frame import Histogram, MetricFrame, label_items
from gpufleet.telemetry.quantile import histogram_quantile

EPOCH = 1_800_000_000.0  # not the twin's default, so a timestamp on the default cannot pass


def app_twin(
    faults: list[InjectedFault] | None = None,
    *,
    nodes: int = 3,
    seed: int = 1,
    services: list[InferenceService] | None = None,
    **job: object,
) -> Twin:
    """`nodes` nodes of 8 H100s; a 2-node job `job` (a 1B model, about 1.2 s a step, evaluated every 20 steps,
    checkpointed every 100; `job` overrides its fields) and `services` on the last node."""
    body = ClusterBody.model_validate(
        {
            "nodePools": [
                {"name": "n", "count": nodes, "gpu": {"model": "h100-sxm", "count": 8}, "nics": {"count": 8}}
            ],
            "fabric": {"leafRadix": 16},
        }
    )
    cluster = build_cluster("app", body)
    fields: dict[str, object] = {
        "model_params_b": 1.0,
        "tokens_per_step": 1_048_576,
        "sequence_length": 2048,
        "eval_every": 20,
        "checkpoint_every": 100,
        "warmup_steps": 50,
        **job,
    }
    train = TrainingJob(name="job", nodes=["n-000", "n-001"], gpus_per_node=8, **fields)  # type: ignore[arg-type]
    return Twin(cluster, seed=seed, jobs=[train], services=services or [], faults=faults, epoch=EPOCH)


def fault(kind: FaultType, at: float, **kw: object) -> InjectedFault:
    return InjectedFault(0, kind, at, **kw)  # type: ignore[arg-type]


def collect(twin: Twin, node: str | None = None, source: TwinSource | None = None) -> MetricFrame:
    source = source or TwinSource(twin, node)
    frame = source.new_frame()
    source.collect(frame)
    return frame


def gauge(frame: MetricFrame, name: str, **labels: str) -> float | None:
    return frame.gauges.get((name, label_items(labels)))


def job_value(frame: MetricFrame, name: str, job: str = "job") -> float:
    value = gauge(frame, name, job=job)
    assert value is not None, f"{name} not exported for {job}"
    return value


def series_of(frame: MetricFrame, label: str, value: str) -> set[str]:
    """Names of every gauge and histogram carrying `label=value`."""
    out = {name for (name, items), _ in frame.gauges.items() if (label, value) in items}
    return out | {name for (name, items) in frame.histograms if (label, value) in items}


def service_histogram(frame: MetricFrame, service: str, name: str = names.INFERENCE_REQUEST_DURATION) -> Histogram:
    for (metric, items), hist in frame.histograms.items():
        if metric == name and dict(items).get("model") == service:
            return hist
    raise AssertionError(f"no {name} for {service}")


class Window:
    """A service's histogram read twice, as a rate window: the requests between two readings and their p99."""

    def __init__(self, frame: MetricFrame, service: str, name: str = names.INFERENCE_REQUEST_DURATION) -> None:
        hist = service_histogram(frame, service, name)
        self.bounds, self.start, self.count = hist.bounds, hist.bucket_counts.copy(), hist.count

    def quantile(
        self, frame: MetricFrame, service: str, q: float, name: str = names.INFERENCE_REQUEST_DURATION
    ) -> float:
        hist = service_histogram(frame, service, name)
        return histogram_quantile(q, self.bounds, hist.bucket_counts - self.start, hist.count - self.count)


def counter(frame: MetricFrame, name: str, service: str, **labels: str) -> float:
    for (metric, items), value in frame.gauges.items():
        got = dict(items)
        if metric == name and got.get("model") == service and all(got.get(k) == v for k, v in labels.items()):
            return value
    raise AssertionError(f"no {name} for {service} {labels}")


def rank_series(frame: MetricFrame, name: str, job: str = "job") -> dict[int, float]:
    out = {}
    for (metric, items), value in frame.gauges.items():
        labels: Mapping[str, str] = dict(items)
        if metric == name and labels.get("job") == job:
            out[int(labels["rank"])] = value
    return out


def ranks_util(twin: Twin, job: int = 0) -> np.ndarray:
    return twin.gpus.util[twin.training.ranks_of(job)]
