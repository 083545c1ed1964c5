"""DCGM detectors: what the agent's DCGM source read from the host engine (in the frame, as its series), judged by
health/dcgm_health.py, the judgement `gpufleet triage` gives a `dcgmi health` report.

- `dcgm-health`: each open incident of DCGM's health watches (gpufleet_dcgm_health_incident{system, code}) that
  judge_incident rates a warning or a failure is a condition (lasting): reported when it starts, confirmed while
  DCGM keeps reporting it. An incident of the watch's own failure says nothing of the GPU and is not one.
- `dcgm-policy`: each policy violation DCGM called back for (gpufleet_dcgm_policy_violations_total{condition}
  grown since the last collection) is a finding, once (judge_violation).

A GPU is named by the UUID on the series, as the frame's entities carry it.
"""

from __future__ import annotations

from gpufleet.health.dcgm_health import (
    HEALTH_INCIDENT_SERIES,
    POLICY_VIOLATIONS_SERIES,
    IncidentVerdict,
    judge_incident,
    judge_violation,
)
from gpufleet.health.detectors.base import NodeSetup, node_detector
from gpufleet.health.detectors.seen import NodeSeen
from gpufleet.model import Entity, EntityKind
from gpufleet.model.observe import Finding
from gpufleet.telemetry.frame import MetricFrame

SOURCE = "dcgm"


def _series(frame: MetricFrame, name: str) -> list[tuple[dict[str, str], float]]:
    return [(dict(labels), value) for (series, labels), value in frame.gauges.items() if series == name]


def _finding(
    now: float, frame: MetricFrame, labels: dict[str, str], verdict: IncidentVerdict, evidence: str
) -> Finding:
    entity = next((e for e in frame.entities if e.uuid == labels.get("UUID") and e.gpu_instance_id is None), None)
    node = entity.hostname if entity is not None else ""
    gpu = entity.gpu if entity is not None else int(labels.get("gpu", "0"))
    return Finding(
        time=now,
        cause=verdict.cause,
        entity=Entity(EntityKind.gpu, node, gpu),
        severity=verdict.severity,
        summary=f"{node}/gpu{gpu}: {verdict.summary}",
        evidence=f"{evidence}; what to do: {verdict.fix}"[:16_384],
        source=SOURCE,
    )


def _evidence(name: str, labels: dict[str, str], value: float) -> str:
    pairs = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{name}{{{pairs}}} {value:g}"


@node_detector("dcgm-health", needs=("frame",))
class DcgmHealthDetector:
    @classmethod
    def build(cls, setup: NodeSetup) -> DcgmHealthDetector:
        return cls()

    def detect(self, now: float, seen: NodeSeen) -> list[Finding]:
        frame = seen.frame
        assert frame is not None
        out: list[Finding] = []
        for labels, health in _series(frame, HEALTH_INCIDENT_SERIES):
            verdict = judge_incident(labels.get("system", ""), health, labels.get("code", ""))
            if verdict is not None:
                out.append(_finding(now, frame, labels, verdict, _evidence(HEALTH_INCIDENT_SERIES, labels, health)))
        return out


@node_detector("dcgm-policy", needs=("frame",), lasting=False)
class DcgmPolicyDetector:
    """Violations are counted by the source; a count that grew since the last collection is new violations."""

    def __init__(self) -> None:
        self._counts: dict[tuple[tuple[str, str], ...], float] = {}

    @classmethod
    def build(cls, setup: NodeSetup) -> DcgmPolicyDetector:
        return cls()

    def detect(self, now: float, seen: NodeSeen) -> list[Finding]:
        frame = seen.frame
        assert frame is not None
        out: list[Finding] = []
        for labels, count in _series(frame, POLICY_VIOLATIONS_SERIES):
            key = tuple(sorted(labels.items()))
            new = count - self._counts.get(key, 0.0)
            self._counts[key] = count
            verdict = judge_violation(labels.get("condition", ""), new)
            if verdict is not None:
                out.append(_finding(now, frame, labels, verdict, _evidence(POLICY_VIOLATIONS_SERIES, labels, count)))
        return out
