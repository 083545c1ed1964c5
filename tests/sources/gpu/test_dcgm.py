"""The DCGM source on recorded host-engine answers (tests/captures/dcgm), through a double of DCGM's own bindings."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from gpufleet.errors import DependencyMissingError, UserError
from gpufleet.sources.gpu.dcgm import (
    HEALTH,
    HEALTH_INCIDENT,
    POLICY_VIOLATIONS,
    DcgmSource,
    DcgmTarget,
    load_bindings,
    open_dcgm,
    parse_target,
)
from gpufleet.telemetry.fields import load_field_catalog
from gpufleet.telemetry.frame import GpuEntity, MetricFrame, label_items
from tests.sources.gpu.fake_dcgm import bindings, load

REMOTE = DcgmTarget("127.0.0.1:5555")
PROF = [n for n in load_field_catalog().names("gpu") if n.startswith("DCGM_FI_PROF_")]


def prof_frame(ents: list[GpuEntity]) -> MetricFrame:
    """A frame with every profiling field switched on (the catalog ships some off, as dcgm-exporter does)."""
    return MetricFrame(ents, catalog=load_field_catalog().with_enabled(PROF).enabled())


def entities(node: dict) -> list[GpuEntity]:
    return [GpuEntity(gpu=int(g["id"]), uuid=g["uuid"], model_name=g.get("name", "GPU"), hostname="n0")
            for g in node["gpus"]]  # fmt: skip


def source(name: str, target: DcgmTarget = REMOTE) -> tuple[DcgmSource, MetricFrame, object]:
    node = load(name)
    b, engine = bindings(node)
    ents = entities(node)
    return DcgmSource(ents, target, 1.0, bindings=b), prof_frame(ents), engine  # type: ignore[arg-type]


def gauge(frame: MetricFrame, name: str, **labels: str) -> float | None:
    return frame.gauges.get((name, label_items(labels)))


def test_prof_fields_of_two_h100s_as_dcgm_3_3_read_them() -> None:
    dcgm, frame, engine = source("prof_h100_dcgm33")
    dcgm.collect(frame)
    assert frame.gpu("DCGM_FI_PROF_SM_ACTIVE").tolist() == [0.9125968658836753, 0.9322035653753363]
    assert frame.gpu("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")[1] == 0.2830590854513563
    assert frame.gpu("DCGM_FI_PROF_DRAM_ACTIVE")[0] == 0.21368455905985453
    assert frame.gpu("DCGM_FI_PROF_PCIE_RX_BYTES").tolist() == [873509672.0, 304185631.0]
    # the field the post did not watch has no value: never a zero
    assert all(math.isnan(v) for v in frame.gpu("DCGM_FI_PROF_GR_ENGINE_ACTIVE"))
    assert ("dcgmWatchFields", (1_000_000, 30.0, 0)) in engine.calls  # type: ignore[attr-defined]
    assert {"DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_PCIE_TX_BYTES"} <= dcgm.fields.fills


def test_dcgm_4_6_field_names_resolve_through_their_deprecated_aliases() -> None:
    node = load("prof_h100_dcgm33") | {"dcgm": "4.6.0"}
    b, _ = bindings(node)
    assert not hasattr(b.fields, "DCGM_FI_PROF_SM_ACTIVE")  # renamed in 4.6
    ents = entities(node)
    dcgm, frame = DcgmSource(ents, REMOTE, 1.0, bindings=b), prof_frame(ents)  # type: ignore[arg-type]
    dcgm.collect(frame)
    assert frame.gpu("DCGM_FI_PROF_SM_ACTIVE")[0] == 0.9125968658836753


def test_blank_samples_of_dcgm_4_2_3_stay_empty() -> None:
    dcgm, frame, _ = source("smact_na_dcgm423")
    dcgm.collect(frame)
    assert all(math.isnan(v) for v in frame.gpu("DCGM_FI_PROF_SM_ACTIVE"))
    assert dcgm.fields.fills == frozenset({"DCGM_FI_PROF_SM_ACTIVE", HEALTH})


def test_a_health_incident_becomes_the_gpus_series_and_goes_when_it_clears() -> None:
    dcgm, frame, engine = source("health_thermal_dcgm4")
    dcgm.collect(frame)
    uuid = "GPU-00000000-0000-0000-0000-000000000002"
    assert frame.gpu(HEALTH)[2] == 10.0 and frame.gpu(HEALTH)[0] == 0.0
    labels = {"gpu": "2", "UUID": uuid, "system": "thermal", "code": "DCGM_FR_CLOCKS_EVENT_THERMAL"}
    assert gauge(frame, HEALTH_INCIDENT, **labels) == 10.0
    assert engine.health_set == 0xFFFFFFFF  # type: ignore[attr-defined]
    engine.node["health"]["incidents"] = []  # type: ignore[attr-defined]
    frame.timestamp += 60
    dcgm.collect(frame)
    assert gauge(frame, HEALTH_INCIDENT, **labels) is None
    assert frame.gpu(HEALTH)[2] == 0.0


def test_a_healthy_check_with_a_pending_recovery_action_reads_healthy() -> None:
    dcgm, frame, _ = source("health_healthy_dcgm4")
    dcgm.collect(frame)
    assert frame.gpu(HEALTH).tolist() == [0.0] * 8
    assert not any(name == HEALTH_INCIDENT for name, _ in frame.gauges)


def test_policy_violations_are_counted_per_gpu_and_condition() -> None:
    dcgm, frame, engine = source("policy_dbe_written")
    condition, parms = next(args for name, args in engine.calls if name == "dcgmPolicySet")  # type: ignore[attr-defined]
    assert condition == 0x3F and parms[2] == (1, 63)  # DBE..NVLink; retired pages at DCGM's limit
    engine.fire_policy()  # type: ignore[attr-defined]
    dcgm.collect(frame)
    assert gauge(frame, POLICY_VIOLATIONS, gpu="1", UUID="GPU-00000000-0000-0000-0000-000000000001",
                 condition="dbe") == 2.0  # fmt: skip
    assert gauge(frame, POLICY_VIOLATIONS, gpu="0", UUID="GPU-00000000-0000-0000-0000-000000000000",
                 condition="pcie") == 1.0  # fmt: skip


def test_dcgm_3_without_policy_register_v2_says_why_and_reads_the_rest() -> None:
    node = load("policy_dbe_written") | {"dcgm": "3.3.9"}
    b, _ = bindings(node)
    dcgm = DcgmSource(entities(node), REMOTE, 1.0, bindings=b)  # type: ignore[arg-type]
    assert "dcgmPolicyRegister_v2" in dcgm.policy_why


def test_embedded_starts_the_engine_in_process() -> None:
    _, _, engine = source("health_healthy_dcgm4", DcgmTarget(""))
    assert ("dcgmStartEmbedded", (1,)) in engine.calls  # type: ignore[attr-defined]


def test_targets() -> None:
    assert parse_target("auto") == "auto" and parse_target("off") is None
    assert parse_target("embedded") == DcgmTarget("")
    assert parse_target("gpu-7") == DcgmTarget("gpu-7:5555")
    assert parse_target("10.0.0.5:5556") == DcgmTarget("10.0.0.5:5556")
    with pytest.raises(UserError):
        parse_target("host:port")


def test_no_dcgm_here_is_one_message_and_auto_stays_silent(tmp_path: Path) -> None:
    with pytest.raises(DependencyMissingError, match="bindings are not installed"):
        load_bindings([tmp_path])
    node = load("health_healthy_dcgm4")
    b, _ = bindings(node, reachable=False)
    ents = entities(node)
    assert open_dcgm(ents, "auto", 1.0, bindings=b) == (None, "")  # type: ignore[arg-type]
    dcgm, why = open_dcgm(ents, REMOTE, 1.0, bindings=b)  # type: ignore[arg-type]
    assert dcgm is None and "nv-hostengine at 127.0.0.1:5555 did not answer" in why
    assert open_dcgm(ents, None, 1.0, bindings=b) == (None, "")  # type: ignore[arg-type]
