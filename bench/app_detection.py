"""Detection latency of the application layer: the twin's app-layer scenario through the one door into a control
plane in process, against the equivalent Prometheus rules evaluated by the real promtool on the same series
scraped every 15 s.

For each case, gpufleet's latency is the time from the fault's start to the moment the control plane's incident
book first says it (checked every 15 s of twin time); Prometheus' is the first 15 s evaluation at which promtool
reports the rule firing (its `for:` included), on the twin's series sampled at the 15 s scrape.
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpufleet.health.xid_policy import xid_ratings  # noqa: E402
from gpufleet.model import Incident, RootCause  # noqa: E402
from gpufleet.sim.runner import run_headless  # noqa: E402
from gpufleet.sim.scenario import build_twin  # noqa: E402
from gpufleet.telemetry.monitoring import alert_rules as rules  # noqa: E402
from gpufleet.telemetry.monitoring import slo_rules as slo  # noqa: E402
from gpufleet.telemetry.monitoring.objectives import ServiceObjectives, SloConfig  # noqa: E402
from tests.twins import door  # noqa: E402

SCENARIO = ROOT / "src/gpufleet/examples/scenarios/app-layer.yaml"
SCRAPE_S = 15.0
Book = Callable[[], list[Incident]]


@dataclass
class Case:
    what: str
    fault_s: float  # the fault's start, twin seconds
    said: Callable[[list[Incident]], bool]  # the incident book says it
    alert: str  # the Prometheus rule that says it
    labels: dict[str, str]  # its firing series' labels
    series: Callable[[str, dict[str, str]], bool]  # which exported series the rule reads
    gpufleet_s: float | None = None
    prometheus_s: float | None = None
    rows: dict[tuple[str, tuple[tuple[str, str], ...]], list[float]] = field(default_factory=dict)


def _job_series(job: str) -> Callable[[str, dict[str, str]], bool]:
    return lambda name, labels: name.startswith("training_") and labels.get("job") == job and "rank" not in labels


def _service_series(model: str) -> Callable[[str, dict[str, str]], bool]:
    return lambda name, labels: name.startswith("gpufleet_inference_") and labels.get("model") == model


def _incident(cause: RootCause, entity: str, after_s: float, epoch: float) -> Callable[[list[Incident]], bool]:
    return lambda book: any(
        i.cause is cause and str(i.entity) == entity and i.first_seen - epoch >= after_s for i in book
    )


def _effect(entity: str, words: str) -> Callable[[list[Incident]], bool]:
    return lambda book: any(str(i.entity) == entity and any(words in e for e in i.effects) for i in book)


def cases(epoch: float) -> list[Case]:
    return [
        Case(
            "loss stall (llm-1b's loss frozen)",
            90 * 60,
            _incident(RootCause.loss_plateau, "job/llm-1b", 90 * 60, epoch),
            "TrainingLossPlateau",
            {"job": "llm-1b"},
            _job_series("llm-1b"),
        ),
        Case(
            "throughput drop (rl-train, its GPU throttles)",
            45 * 60,
            _effect("gpu/dgx-006/3", "rl-train's samples/s fell"),
            "TrainingThroughputDrop",
            {"job": "rl-train"},
            _job_series("rl-train"),
        ),
        Case(
            "SLO breach (chat-api p99 over 0.5 s)",
            30 * 60,
            _incident(RootCause.slo_latency, "service/chat-api", 30 * 60, epoch),
            "InferenceLatencyP99High",
            {"model": "chat-api"},
            _service_series("chat-api"),
        ),
    ]


def run_twin(progress: Callable[[float], None] | None = None) -> tuple[list[Case], float]:
    """The scenario through the door; each case's series sampled at the scrape and its detection time."""
    twin, duration = build_twin(SCENARIO)
    plane, fleet = door(twin)
    todo = cases(twin.epoch)
    end = max(c.fault_s for c in todo) + 40 * 60
    samples = 0

    def before_step() -> None:
        nonlocal samples
        t = twin.time
        if t % SCRAPE_S >= twin.tick:
            return
        book = list(plane.book.incidents.values())  # type: ignore[attr-defined]
        frame = fleet.frame  # type: ignore[attr-defined]
        for case in todo:
            if case.gpufleet_s is None and t >= case.fault_s and case.said(book):
                case.gpufleet_s = t - case.fault_s
            for (name, labels), value in frame.gauges.items():
                if case.series(name, dict(labels)):
                    case.rows.setdefault((name, labels), [math.nan] * samples).append(value)
            for (name, labels), hist in frame.histograms.items():
                if case.series(name, dict(labels)):
                    for bound, count in zip(hist.bounds, hist.bucket_counts.tolist(), strict=True):
                        key = (f"{name}_bucket", (*labels, ("le", repr(float(bound)))))
                        case.rows.setdefault(key, [math.nan] * samples).append(float(count))
                    for key, value in (
                        ((f"{name}_bucket", (*labels, ("le", "+Inf"))), float(hist.count)),
                        ((f"{name}_count", labels), float(hist.count)),
                        ((f"{name}_sum", labels), hist.sum),
                    ):
                        case.rows.setdefault(key, [math.nan] * samples).append(value)
            for row in case.rows.values():  # a series gone this scrape: no sample (stale), not zero
                if len(row) <= samples:
                    row.append(math.nan)
        samples += 1

    run_headless(twin, fleet, plane.ingest, plane.tick, min(end, duration), progress, before_step)  # type: ignore[arg-type, attr-defined]
    return todo, min(end, duration)


def _values(row: list[float]) -> str:
    out = []
    for v in row:
        if math.isnan(v):
            out.append("_")
        elif math.isinf(v):
            out.append("Inf" if v > 0 else "-Inf")
        else:
            out.append(repr(float(v)))
    return " ".join(out)


def _series(name: str, labels: tuple[tuple[str, str], ...]) -> str:
    body = ",".join(f'{k}="{v}"' for k, v in labels)
    return f"{name}{{{body}}}"


def prometheus_latency(found: list[Case], span_s: float, promtool: str) -> None:
    """Each case's rule evaluated by promtool at every 15 s over the case's own scraped series."""
    config = SloConfig(services=[ServiceObjectives(model="chat-api", p99_s=0.5)])  # the service's declared p99
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "rules.yml").write_text(rules.dump(rules.rule_groups(xids=xid_ratings())))
        (folder / "slo.yml").write_text(rules.dump(slo.rule_groups(config)))
        for case in found:
            start = int(case.fault_s // SCRAPE_S)
            times = range(start, int(span_s // SCRAPE_S))
            test: dict[str, Any] = {
                "rule_files": ["rules.yml", "slo.yml"],
                "evaluation_interval": f"{int(SCRAPE_S)}s",
                "tests": [
                    {
                        "interval": f"{int(SCRAPE_S)}s",
                        "input_series": [
                            {"series": _series(name, labels), "values": _values(row)}
                            for (name, labels), row in case.rows.items()
                        ],
                        "alert_rule_test": [
                            {"eval_time": f"{k * int(SCRAPE_S)}s", "alertname": case.alert, "exp_alerts": []}
                            for k in times
                        ],
                    }
                ],
            }
            path = folder / "test.yml"
            path.write_text(yaml.safe_dump(test, sort_keys=False, width=1 << 30))
            out = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, cwd=folder)
            case.prometheus_s = _first_firing(out.stdout + out.stderr, case, case.fault_s)


_FAILED = re.compile(r"alertname: (\S+), time: ([0-9hms.]+),\s+exp:\[\],\s+got:\[(.*?)\n\s*\]", re.DOTALL)


def _first_firing(text: str, case: Case, fault_s: float) -> float | None:
    firsts = []
    for alert, when, got in _FAILED.findall(text):
        if alert == case.alert and all(f'{k}="{v}"' in got for k, v in case.labels.items()):
            firsts.append(_seconds(when))
    return min(firsts) - fault_s if firsts else None


def _seconds(text: str) -> float:
    total = 0.0
    for amount, unit in re.findall(r"([0-9.]+)([hms])", text):
        total += float(amount) * {"h": 3600, "m": 60, "s": 1}[unit]
    return total


def detection(progress: Callable[[float], None] | None = None) -> list[Case]:
    found, span = run_twin(progress)
    promtool = shutil.which("promtool")
    if promtool is not None:
        prometheus_latency(found, span, promtool)
    return found
