"""Application faults in a scenario: what the manifest accepts, what it refuses with a clear error, and the built-in
app-layer scenario played through the twin's source, each fault showing in the series it should change."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from gpufleet.errors import ManifestError
from gpufleet.instrument import names
from gpufleet.model import InferenceService
from gpufleet.sim.faults import expand_campaign
from gpufleet.sim.scenario import build_twin
from gpufleet.sim.source import TwinSource
from gpufleet.spec.scenario_spec import CampaignSpec, FaultType
from gpufleet.telemetry.frame import Histogram, MetricFrame
from tests.sim.apptwin import Window, app_twin, counter, job_value, series_of

APP_LAYER = Path(__file__).parents[2] / "src/gpufleet/examples/scenarios/app-layer.yaml"


def _scenario(tmp_path: Path, fault: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(
        f"""apiVersion: gpufleet.io/v1
kind: Scenario
metadata: {{name: s}}
spec:
  cluster:
    nodePools: [{{name: n, count: 3, gpu: {{model: h100-sxm, count: 8}}, nics: {{count: 2}}}}]
  duration: 1h
  workload:
    trainingJobs: [{{name: train, nodes: 2, evalEvery: 10, checkpointEvery: 50, sequenceLength: 2048}}]
    inference: [{{name: chat, gpus: 2, version: v2, tokensPerRequest: 32, capacityPerGpu: 100}}]
  faults:
    - {fault}
"""
    )
    return path


@pytest.mark.parametrize(
    ("fault", "said"),
    [
        ("{at: 5m, type: loss-nan}", "fault 'loss-nan' needs `job`"),
        ("{at: 5m, type: slow-input, node: n-000}", "fault 'slow-input' needs `job`"),
        ("{at: 5m, type: slo-breach}", "fault 'slo-breach' needs `service`"),
        ("{at: 5m, type: service-down, job: train}", "fault 'service-down' needs `service`"),
        ("{at: 5m, type: error-burst, service: chat, factor: 3}", "fraction of requests that fail"),
        ("{at: 5m, type: traffic-ramp, service: chat, factor: 0.5}", "a `factor` above 1"),
        ("{at: 5m, type: slo-breach, service: chatt}", "no inference service named 'chatt'"),
        ("{at: 5m, type: loss-plateau, job: trian}", "no training job named 'trian'"),
        ("{at: 5m, type: loss-stall, job: train, servce: chat}", "unknown field"),
    ],
)
def test_an_application_fault_without_its_target_is_a_clear_manifest_error(
    tmp_path: Path, fault: str, said: str
) -> None:
    with pytest.raises(ManifestError, match=said.replace("(", r"\(").replace(")", r"\)")):
        build_twin(_scenario(tmp_path, fault))


def test_the_workload_fields_reach_the_twin(tmp_path: Path) -> None:
    twin, _ = build_twin(_scenario(tmp_path, "{at: 5m, type: slo-breach, service: chat, factor: 8, duration: 10m}"))
    job, svc = twin.cluster.job("train"), twin.services[0].service
    assert (job.eval_every, job.checkpoint_every, job.sequence_length) == (10, 50, 2048)
    assert (svc.version, svc.tokens_per_request, svc.capacity_per_gpu) == ("v2", 32.0, 100.0)
    (injected,) = twin.injected
    assert injected.service == "chat" and injected.target == "service/chat" and injected.factor == 8


def test_a_campaign_takes_application_faults_by_name_each_on_its_own_workload() -> None:
    twin = app_twin(nodes=6)
    services = [InferenceService(f"svc-{k}", "n-005", (k,)) for k in range(4)]
    spec = CampaignSpec(seed=2, per_type=1, types=[FaultType.loss_nan, FaultType.slo_breach, FaultType.service_down])
    faults = expand_campaign(spec, twin.cluster, twin.cluster.jobs, 7200, 0, services)
    by_type = {f.type: f for f in faults}
    assert by_type[FaultType.loss_nan].job == "job" and by_type[FaultType.loss_nan].rank is None
    targets = [by_type[t].service for t in (FaultType.slo_breach, FaultType.service_down)]
    assert all(targets) and len(set(targets)) == 2
    with pytest.raises(ManifestError, match="2 service faults need as many inference services"):
        expand_campaign(spec, twin.cluster, twin.cluster.jobs, 7200, 0, services[:1])


def _read(frame: MetricFrame, name: str, job: str) -> float:
    return job_value(frame, name, job)


@pytest.fixture(scope="module")
def played() -> dict[int, MetricFrame]:
    """The app-layer scenario, its series collected by the whole-cluster source at chosen minutes."""
    twin, duration = build_twin(APP_LAYER)
    source = TwinSource(twin)
    frame = source.new_frame()
    keep = {19, 20, 29, 30, 39, 40, 44, 49, 53, 55, 59, 66, 69, 75, 79, 84, 95, 99, 114, 119}
    out: dict[int, MetricFrame] = {}
    for minute in range(1, int(duration // 60)):
        twin.run(60)
        if minute in keep:
            frame.clear_values()
            source.collect(frame)
            out[minute] = snapshot = source.new_frame()  # the series as they were then
            snapshot.gauges.update(frame.gauges)
            for key, h in frame.histograms.items():
                snapshot.histograms[key] = Histogram(h.bounds, h.bucket_counts.copy(), h.sum, h.count)
    return out


def test_the_app_layer_scenario_shows_each_training_fault(played: dict[int, MetricFrame]) -> None:
    loss, val = names.TRAINING_LOSS, names.TRAINING_VALIDATION_LOSS
    rate, grad = names.TRAINING_SAMPLES_PER_SECOND, names.TRAINING_GRADIENT_NORM
    # llm-1b: falling, then a plateau 40m-80m (flat), then a stall 90m-115m (one value)
    assert _read(played[39], loss, "llm-1b") < 0.95 * _read(played[20], loss, "llm-1b")
    assert _read(played[79], loss, "llm-1b") == pytest.approx(_read(played[40], loss, "llm-1b"), rel=0.06)
    assert _read(played[114], loss, "llm-1b") == _read(played[95], loss, "llm-1b") != _read(played[119], loss, "llm-1b")
    # divergence from 30m on llm-sft: validation up, training down
    assert _read(played[59], val, "llm-sft") > 1.25 * _read(played[29], val, "llm-sft")
    assert _read(played[59], loss, "llm-sft") < _read(played[29], loss, "llm-sft")
    # vision-train: the gradient explodes at 50m, then NaN from 60m
    assert _read(played[55], grad, "vision-train") > 100 > _read(played[49], grad, "vision-train")
    assert math.isnan(_read(played[66], loss, "vision-train")) and math.isnan(_read(played[66], grad, "vision-train"))
    # slow input on code-train 40m-70m; straggler on moe-train 25m-55m; a hot GPU on rl-train from 45m
    for job, healthy, sick in (("code-train", 39, 66), ("moe-train", 20, 53), ("rl-train", 44, 75)):
        assert _read(played[sick], rate, job) < 0.9 * _read(played[healthy], rate, job), job
    assert _read(played[95], rate, "code-train") == pytest.approx(_read(played[39], rate, "code-train"), rel=0.02)
    # checkpoint failures on llm-pretrain 70m-100m
    ok, failed = names.TRAINING_CHECKPOINTS, names.CHECKPOINT_FAILURE
    assert played[69].gauges[(ok, (("job", "llm-pretrain"), ("result", failed)))] == 0
    assert played[99].gauges[(ok, (("job", "llm-pretrain"), ("result", failed)))] >= 2


def test_the_app_layer_scenario_shows_each_service_fault(played: dict[int, MetricFrame]) -> None:
    def p99(service: str, start: int, end: int) -> float:
        return Window(played[start], service).quantile(played[end], service, 0.99)

    assert p99("chat-api", 19, 29) < 0.5 < 2.0 < p99("chat-api", 30, 49)  # slo-breach 30m-50m
    assert counter(played[49], names.INFERENCE_ERRORS, "chat-api") == 0
    queue = names.INFERENCE_QUEUE_DEPTH
    assert counter(played[39], queue, "embed-api") == 0 < counter(played[66], queue, "embed-api")  # the ramp
    assert counter(played[84], queue, "embed-api") == 0  # ramp over, queue drained
    errors = names.INFERENCE_ERRORS
    burst = counter(played[59], errors, "rerank-api") - counter(played[49], errors, "rerank-api")
    assert counter(played[49], errors, "rerank-api") == 0 < burst  # error-burst 50m-60m
    assert series_of(played[75], "model", "summarize-api") == set()  # down 70m-85m
    assert series_of(played[95], "model", "summarize-api")
    durations = [h for (name, _), h in played[119].histograms.items() if name == names.INFERENCE_REQUEST_DURATION]
    assert len(durations) == 4 and all(h.bounds == names.REQUEST_DURATION_BUCKETS for h in durations)
