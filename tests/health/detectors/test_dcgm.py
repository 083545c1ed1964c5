"""The DCGM detectors on what the agent's DCGM source read from recorded host-engine answers (tests/captures/dcgm,
through the double of DCGM's bindings): a 4.x thermal incident (DCGM #270), a healthy check with a pending recovery
action (DCGM #263), and policy violations written from DCGM's callback structures (policy_dbe_written)."""

from __future__ import annotations

from gpufleet.health.node_health import NodeHealth
from gpufleet.model import EntityKind, RootCause, Severity
from gpufleet.sources.gpu.dcgm import DcgmSource, DcgmTarget
from gpufleet.telemetry.frame import GpuEntity, MetricFrame
from tests.sources.gpu.fake_dcgm import bindings, load

T0 = 1_800_000_000.0


def read(capture: str) -> tuple[DcgmSource, MetricFrame, object]:
    node = load(capture)
    b, engine = bindings(node)
    ents = [GpuEntity(gpu=int(g["id"]), uuid=g["uuid"], model_name="NVIDIA H100 80GB HBM3", hostname="gpu-17")
            for g in node["gpus"]]  # fmt: skip
    frame = MetricFrame(tuple(ents))
    return DcgmSource(ents, DcgmTarget("127.0.0.1:5555"), 1.0, bindings=b), frame, engine  # type: ignore[arg-type]


def dcgm_findings(health: NodeHealth, now: float, frame: MetricFrame) -> list:  # type: ignore[type-arg]
    return [f for f in health.observe(now, frame=frame).findings if f.source == "dcgm"]


def test_a_thermal_incident_is_a_lasting_warning_on_its_gpu_until_it_clears() -> None:
    dcgm, frame, engine = read("health_thermal_dcgm4")
    health = NodeHealth(frame)
    frame.timestamp = T0
    dcgm.collect(frame)
    (finding,) = dcgm_findings(health, T0, frame)
    assert finding.cause is RootCause.thermal and finding.severity is Severity.warning
    assert (finding.entity.kind, finding.entity.node, finding.entity.index) == (EntityKind.gpu, "gpu-17", 2)
    assert "Thermal system" in finding.summary and "DCGM_FR_CLOCKS_EVENT_THERMAL" in finding.summary
    assert 'system="thermal"' in finding.evidence and "what to do:" in finding.evidence
    frame.timestamp = T0 + 1
    dcgm.collect(frame)
    assert dcgm_findings(health, T0 + 1, frame) == []  # the same condition, held back until it is confirmed
    engine.node["health"]["incidents"] = []  # type: ignore[attr-defined]
    frame.timestamp = T0 + 60
    dcgm.collect(frame)
    assert dcgm_findings(health, T0 + 60, frame) == []


def test_a_healthy_check_files_nothing() -> None:
    dcgm, frame, _ = read("health_healthy_dcgm4")
    dcgm.collect(frame)
    assert dcgm_findings(NodeHealth(frame), T0, frame) == []


def test_policy_violations_are_findings_once_each() -> None:
    dcgm, frame, engine = read("policy_dbe_written")
    health = NodeHealth(frame)
    engine.fire_policy()  # type: ignore[attr-defined]
    dcgm.collect(frame)
    found = {(f.entity.index, f.cause, f.severity): f for f in dcgm_findings(health, T0, frame)}
    assert set(found) == {(1, RootCause.ecc_dbe, Severity.critical), (0, RootCause.pcie, Severity.warning)}
    assert "violated 2 times: a double-bit" in found[(1, RootCause.ecc_dbe, Severity.critical)].summary
    dcgm.collect(frame)
    assert dcgm_findings(health, T0 + 1, frame) == []  # no new violation: nothing new
    engine.fire_policy()  # type: ignore[attr-defined]
    dcgm.collect(frame)
    again = dcgm_findings(health, T0 + 2, frame)
    assert {(f.entity.index, f.cause) for f in again} == {(1, RootCause.ecc_dbe), (0, RootCause.pcie)}
    assert any("violated 2 times" in f.summary for f in again)
