"""BMC detectors: a node's fans, power supplies and chassis temperatures as its BMC reports them, judged by
health/bmc.py.

- `bmc-sensors`: each sensor the judgement finds faulty is a condition (lasting): reported when it starts, confirmed
  while it lasts, on every read of the BMC (the agent reads it every --bmc-interval, not every collection).
- `bmc-sel`: each new System Event Log record is recorded (a `BmcEvent`, to the control plane's event list), and one
  that asserts a fault is also a finding, once.
"""

from __future__ import annotations

from datetime import UTC, datetime

from gpufleet.health.bmc import BmcVerdict, judge_sel, judge_sensor
from gpufleet.health.detectors.base import NodeSetup, node_detector
from gpufleet.health.detectors.seen import NodeSeen
from gpufleet.model import Entity, EntityKind
from gpufleet.model.bmc import SelEntry
from gpufleet.model.observe import LATEST_TIME, BmcEvent, Finding

SOURCE = "bmc"


def _finding(now: float, node: str, sensor: str, verdict: BmcVerdict, evidence: str) -> Finding:
    return Finding(
        time=now,
        cause=verdict.cause,
        entity=Entity(EntityKind.node, node, name=sensor),
        severity=verdict.severity,
        summary=f"{node}: {verdict.summary}",
        evidence=evidence[:16_384],
        source=SOURCE,
        action="",
    )


def _logged(entry: SelEntry) -> float | None:
    """The record's own time in epoch seconds (a naive time is the host's local time, as ipmitool printed it)."""
    if entry.logged is None:
        return None
    logged = datetime.fromisoformat(entry.logged)
    when = logged.timestamp() if logged.tzinfo else logged.astimezone(UTC).timestamp()
    return when if 0 <= when <= LATEST_TIME else None


@node_detector("bmc-sensors", needs=("bmc",))
class BmcSensorDetector:
    @classmethod
    def build(cls, setup: NodeSetup) -> BmcSensorDetector:
        return cls()

    def detect(self, now: float, seen: NodeSeen) -> list[Finding]:
        out: list[Finding] = []
        for node, read in (seen.bmc or {}).items():
            for sensor in read.sensors:
                verdict = judge_sensor(sensor)
                if verdict is not None:
                    out.append(_finding(now, node, sensor.name, verdict, sensor.raw or sensor.name))
        return out


@node_detector("bmc-sel", needs=("bmc",), lasting=False)
class BmcSelDetector:
    @classmethod
    def build(cls, setup: NodeSetup) -> BmcSelDetector:
        return cls()

    def detect(self, now: float, seen: NodeSeen) -> list[Finding]:
        out: list[Finding] = []
        for node, read in (seen.bmc or {}).items():
            for entry in read.new_entries:
                verdict = judge_sel(entry)
                seen.bmc_events.append(
                    BmcEvent(
                        time=now,
                        node=node,
                        record=entry.record,
                        sensor_type=entry.sensor_type[:256],
                        sensor=entry.sensor[:256],
                        event=entry.event[:256],
                        asserted=entry.asserted,
                        raw=entry.raw[:16_384],
                        logged=_logged(entry),
                        severity=verdict.severity if verdict else None,
                    )
                )
                if verdict is not None:
                    out.append(_finding(now, node, entry.sensor or entry.sensor_type, verdict, entry.raw))
        return out
