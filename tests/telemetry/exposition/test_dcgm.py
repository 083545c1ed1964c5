from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpufleet.model.attribution import Attribution
from gpufleet.telemetry.dcgm_blanks import blank_values, is_blank
from gpufleet.telemetry.exposition.config import ExpositionConfig
from gpufleet.telemetry.exposition.dcgm import POD_INFO_METRIC, Renderer, render
from gpufleet.telemetry.frame import GpuEntity, MetricFrame
from tests.telemetry.conftest import MODEL, make_entities

_LINE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)\{(.*)\} (\S+)$")


def label_keys(line: str) -> list[str]:
    match = _LINE.match(line)
    assert match, line
    return re.findall(r'(?:^|,)\s*([A-Za-z_][A-Za-z0-9_]*)="', match.group(2))


def sample_lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln and not ln.startswith("#") and "{" in ln]


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_render_parses_and_carries_every_value(frame: MetricFrame) -> None:
    text = render(frame)
    parsed = samples(text)
    temp = frame.gpu("DCGM_FI_DEV_GPU_TEMP")
    got = {dict(k[1])["gpu"]: v for k, v in parsed.items() if k[0] == "DCGM_FI_DEV_GPU_TEMP"}
    assert got == {str(i): float(int(temp[i])) for i in range(8)}
    power = {dict(k[1])["gpu"]: v for k, v in parsed.items() if k[0] == "DCGM_FI_DEV_POWER_USAGE"}
    assert power["3"] == pytest.approx(frame.gpu("DCGM_FI_DEV_POWER_USAGE")[3], abs=1e-6)
    for family in text_string_to_metric_families(text):
        assert family.documentation, family.name


def test_doubles_print_like_go_percent_f(frame: MetricFrame) -> None:
    frame.gpu("DCGM_FI_DEV_POWER_USAGE")[0] = 61.5
    line = next(ln for ln in render(frame).splitlines() if ln.startswith('DCGM_FI_DEV_POWER_USAGE{gpu="0"'))
    assert line.endswith(" 61.500000")


@pytest.mark.parametrize(
    "capture,config",
    [
        ("dcgm_exporter_metrics_03_h100_podlabels_de490.txt", ExpositionConfig(hostname_label="Hostname")),
        ("dcgm_exporter_metrics_04_mixed_mig_newlabels_pr736.txt", ExpositionConfig()),
    ],
)
def test_names_and_label_keys_match_real_captures(corpus: Path, capture: str, config: ExpositionConfig) -> None:
    real = sample_lines((corpus / capture).read_text())
    compat = config.model_copy(update={"attribution": "labels"})
    for line in real:
        name = _LINE.match(line).group(1)  # type: ignore[union-attr]
        labels = dict(re.findall(r'([A-Za-z_][A-Za-z0-9_]*)="([^"]*)"', _LINE.match(line).group(2)))  # type: ignore[union-attr]
        entity = GpuEntity(
            gpu=int(labels["gpu"]),
            uuid=labels["UUID"],
            model_name=labels["modelName"],
            hostname=labels.get("hostname") or labels.get("Hostname", ""),
            pci_bus_id=labels["pci_bus_id"],
            device=labels["device"],
            mig_profile=labels.get("GPU_I_PROFILE"),
            gpu_instance_id=int(labels["GPU_I_ID"]) if "GPU_I_ID" in labels else None,
            label_fields=tuple((k, v) for k, v in labels.items() if k.startswith("DCGM_FI_")),
        )
        frame = MetricFrame([entity])
        frame.gpu(name)[0] = 1
        if "pod" in labels:
            frame.set_attribution(0, Attribution(labels["pod"], labels["namespace"], labels["container"]))
        ours = [ln for ln in sample_lines(Renderer(compat).render(frame)) if ln.startswith(name + "{")]
        assert len(ours) == 1
        assert label_keys(ours[0]) == label_keys(line), line
        # the exact label text matches too, value aside
        assert ours[0].rsplit(" ", 1)[0] == line.rsplit(" ", 1)[0]


def test_xid_count_series_like_capture(corpus: Path) -> None:
    text = (corpus / "dcgm_exporter_metrics_05_xid_count_pr239.txt").read_text()
    real_keys = label_keys(sample_lines(text)[0])
    entity = GpuEntity(
        0, "GPU-b9", "NVIDIA T400 4GB", "workstation", label_fields=(("DCGM_FI_DRIVER_VERSION", "545.29.02"),)
    )
    frame = MetricFrame([entity])
    frame.set_xid_count(42, [1])
    ours = [
        ln
        for ln in sample_lines(render(frame, ExpositionConfig(hostname_label="Hostname")))
        if ln.startswith("DCGM_EXP_XID_ERRORS_COUNT")
    ]
    assert len(ours) == 1
    keys = label_keys(ours[0])
    # the capture predates pci_bus_id; every other key in the same order
    assert [k for k in keys if k != "pci_bus_id"] == real_keys
    assert ours[0].endswith(',window_size_in_ms="300000",xid="42"} 1')


@pytest.mark.parametrize("sentinel", list(blank_values().values()))
def test_blank_sentinels_never_exported(frame: MetricFrame, sentinel: float) -> None:
    frame.gpu("DCGM_FI_DEV_MEMORY_TEMP")[2] = sentinel
    frame.gpu("DCGM_FI_DEV_POWER_USAGE")[2] = sentinel
    text = render(frame)
    assert 'DCGM_FI_DEV_MEMORY_TEMP{gpu="2"' not in text
    assert 'DCGM_FI_DEV_POWER_USAGE{gpu="2"' not in text
    assert 'DCGM_FI_DEV_MEMORY_TEMP{gpu="3"' in text
    assert is_blank(sentinel)


def test_large_real_values_near_sentinels_are_kept(frame: MetricFrame) -> None:
    energy = frame.gpu("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
    energy[:] = [2147483631, 2147483636, 5e9, 140737488355327, 1, 2, 3, 4]
    parsed = samples(render(frame))
    # prometheus_client's parser names counter samples with a _total suffix
    got = sorted(v for k, v in parsed.items() if k[0] == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total")
    assert got == sorted(float(v) for v in energy)


def test_readme_sentinel_value_is_blank(corpus: Path) -> None:
    text = (corpus / "dcgm_exporter_metrics_06_readme_k8s.txt").read_text()
    leaked = [float(ln.rsplit(" ", 1)[1]) for ln in sample_lines(text) if "MEMORY_TEMP" in ln]
    assert leaked and all(is_blank(v) for v in leaked)
    assert not is_blank(45.0)


def test_nan_means_no_sample_and_empty_families_are_omitted() -> None:
    frame = MetricFrame(make_entities(2))
    frame.gpu("DCGM_FI_DEV_GPU_TEMP")[:] = [40, np.nan]
    text = render(frame)
    assert text.count("DCGM_FI_DEV_GPU_TEMP{") == 1
    assert "DCGM_FI_DEV_SM_CLOCK" not in text


def test_attribution_info_metric_by_default_keeps_gpu_series_stable(frame: MetricFrame) -> None:
    renderer = Renderer()
    before = [ln.rsplit(" ", 1)[0] for ln in sample_lines(renderer.render(frame)) if ln.startswith("DCGM_")]
    frame.set_attribution(1, Attribution("trainer-0", "ml", "pytorch"))
    text = renderer.render(frame)
    after = [ln.rsplit(" ", 1)[0] for ln in sample_lines(text) if ln.startswith("DCGM_")]
    assert before == after
    info = [ln for ln in sample_lines(text) if ln.startswith(POD_INFO_METRIC)]
    assert len(info) == 1 and 'pod="trainer-0"' in info[0] and 'UUID="GPU-00000001' in info[0]


def test_compat_mode_puts_pod_labels_on_gpu_series(frame: MetricFrame) -> None:
    frame.set_attribution(1, Attribution("trainer-0", "ml", "pytorch"))
    text = render(frame, ExpositionConfig(attribution="labels", old_namespace=True))
    line = next(ln for ln in sample_lines(text) if ln.startswith('DCGM_FI_DEV_GPU_TEMP{gpu="1"'))
    assert label_keys(line)[-3:] == ["container_name", "pod_name", "pod_namespace"]
    assert POD_INFO_METRIC not in text


def test_label_values_are_escaped() -> None:
    entity = GpuEntity(0, "GPU-x", 'odd "model"\\', "h")
    frame = MetricFrame([entity])
    frame.gpu("DCGM_FI_DEV_GPU_TEMP")[0] = 1
    parsed = samples(render(frame))
    (key,) = [k for k in parsed if k[0] == "DCGM_FI_DEV_GPU_TEMP"]
    assert dict(key[1])["modelName"] == 'odd "model"\\'


def test_ib_ports_plain_gauges_and_histograms(frame: MetricFrame) -> None:
    frame.set_ib_pma("PortXmitData", [10])
    frame.set_gauge("gpufleet_source_up", {"source": "nvml"}, 0)
    frame.set_gauge("training_last_step_timestamp_seconds", {"job": "llm"}, 1.7e9)
    frame.histogram("gpufleet_inference_request_duration_seconds", {"model": "m"}, [0.1, 1]).observe([0.05, 2])
    parsed = samples(render(frame))
    ib_key = (
        "infiniband_port_transmit_bytes_total",
        (("hca", "mlx5_0"), ("hostname", "gpu-node-01"), ("port", "1"), ("rail", "0")),
    )
    assert parsed[ib_key] == 40  # PMA counts octets / 4
    assert parsed[("gpufleet_source_up", (("source", "nvml"),))] == 0
    assert parsed[("gpufleet_inference_request_duration_seconds_bucket", (("le", "0.1"), ("model", "m")))] == 1
    assert parsed[("gpufleet_inference_request_duration_seconds_count", (("model", "m"),))] == 2


def test_clock_events_and_mig_labels() -> None:
    entity = GpuEntity(0, "GPU-a", "NVIDIA A30", "h", mig_profile="1g.6gb", gpu_instance_id=3)
    frame = MetricFrame([entity])
    frame.clock_event_row("hw_thermal")[0] = 2
    line = next(ln for ln in sample_lines(render(frame)) if ln.startswith("DCGM_EXP_CLOCK_EVENTS_COUNT"))
    assert label_keys(line) == [
        "gpu",
        "UUID",
        "pci_bus_id",
        "device",
        "modelName",
        "GPU_I_PROFILE",
        "GPU_I_ID",
        "hostname",
        "clock_event",
        "window_size_in_ms",
    ]
    assert line.endswith(" 2")


def test_label_cache_follows_entity_changes(frame: MetricFrame) -> None:
    renderer = Renderer()
    renderer.render(frame)
    frame.set_entities(make_entities(2, host="other"))
    frame.gpu("DCGM_FI_DEV_GPU_TEMP")[:] = 50
    text = renderer.render(frame)
    assert 'hostname="other"' in text and 'gpu-node-01"' not in text.split("infiniband")[0]
    assert MODEL in text


def test_a_nan_loss_is_exported_and_counters_are_typed() -> None:
    """A diverged job's NaN loss is its value; other NaN gauges are "no value" and stay out."""
    from gpufleet.instrument import names
    from gpufleet.telemetry.exposition.dcgm import Renderer
    from gpufleet.telemetry.frame import MetricFrame

    frame = MetricFrame(entities=())
    frame.set_gauge(names.TRAINING_LOSS, {"job": "a"}, float("nan"))
    frame.set_gauge(names.TRAINING_SAMPLES_PER_SECOND, {"job": "a"}, float("nan"))
    frame.set_gauge(names.TRAINING_STEPS, {"job": "a"}, 12)
    body = Renderer().render(frame)
    assert 'training_loss{job="a"} NaN' in body
    assert "training_samples_per_second" not in body
    assert "# TYPE training_steps_total counter" in body
