"""AMD and Gaudi devices under their exporters' names and labels; NVIDIA exactly as before."""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpufleet.errors import ManifestError
from gpufleet.model.attribution import Attribution
from gpufleet.telemetry.exposition.config import ExpositionConfig
from gpufleet.telemetry.exposition.dcgm import POD_INFO_METRIC, Renderer, render
from gpufleet.telemetry.frame import GpuEntity, MetricFrame
from gpufleet.telemetry.vendor_metrics import VendorMetrics, _check, go_float, load_vendor_metrics
from tests.telemetry.vendor_frames import (
    gaudi3_entities,
    h100_entities,
    mi300x_entities,
    mixed_frame,
    nvidia_reference_frame,
)

DATA = Path(__file__).parents[1] / "data"
NO_FLEET = ExpositionConfig(fleet_series=False)
DME_LABELS = {
    "card_model",
    "container",
    "deployment_mode",
    "gpu_compute_partition_type",
    "gpu_id",
    "gpu_memory_partition_type",
    "gpu_partition_id",
    "gpu_uuid",
    "hostname",
    "job_id",
    "job_partition",
    "job_user",
    "namespace",
    "pod",
    "serial_number",
}
GAUDI_LABELS = {"Serial", "UUID", "device", "driver", "fit", "id", "pod_name", "pod_namespace", "spi"}
Sample = tuple[str, dict[str, str], float]


def parsed(text: str) -> list[Sample]:
    return [(s.name, dict(s.labels), s.value) for f in text_string_to_metric_families(text) for s in f.samples]


def named(samples: list[Sample], name: str) -> list[Sample]:
    return [s for s in samples if s[0] == name]


def one(samples: list[Sample], name: str, **labels: str) -> float:
    found = [v for n, lab, v in samples if n == name and all(lab.get(k) == x for k, x in labels.items())]
    assert len(found) == 1, (name, labels, found)
    return found[0]


# -- NVIDIA: unchanged ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("golden", "config"),
    [
        ("nvidia_reference_default.prom", ExpositionConfig()),
        ("nvidia_reference_labels.prom", ExpositionConfig(attribution="labels", hostname_label="Hostname")),
    ],
)
def test_all_nvidia_frame_renders_byte_for_byte_as_before(golden: str, config: ExpositionConfig) -> None:
    """The golden files are the renderer's output before vendor rendering existed, for a frame with MIG instances,
    attribution, HPC jobs, Xids, clock events, IB ports, plain gauges and a histogram."""
    before = (DATA / golden).read_text()
    off = config.model_copy(update={"fleet_series": False})
    assert Renderer(off).render(nvidia_reference_frame()) == before
    # with the fleet series on (the default) the old text is untouched and the fleet families follow it
    now = Renderer(config).render(nvidia_reference_frame())
    assert now.startswith(before)
    added = {f.name for f in text_string_to_metric_families(now[len(before) :])}
    assert added and all(name.startswith("gpufleet_accelerator_") for name in added)


def test_a_renderer_keeps_rendering_the_same_text_as_values_change() -> None:
    frame = nvidia_reference_frame()
    renderer = Renderer(NO_FLEET)
    renderer.render(frame)
    frame.gpu("DCGM_FI_DEV_GPU_TEMP")[0] = 77
    assert renderer.render(frame) == render(frame, NO_FLEET)
    assert 'DCGM_FI_DEV_GPU_TEMP{gpu="0"' in renderer.render(frame)


# -- the mixed node set --------------------------------------------------------------------------------------------
def test_mixed_frame_renders_every_vendor_family_once_with_help_and_type() -> None:
    text = render(mixed_frame())
    names = Counter(line.split()[2] for line in text.splitlines() if line.startswith("# TYPE "))
    assert names and max(names.values()) == 1, [n for n, c in names.items() if c > 1]
    helps = {line.split()[2] for line in text.splitlines() if line.startswith("# HELP ")}
    assert helps == set(names)
    samples = parsed(text)
    assert len(named(samples, "DCGM_FI_DEV_GPU_UTIL")) == 8  # the H100s only
    assert len(named(samples, "gpu_gfx_activity")) == 8  # the MI300Xs only
    assert len(named(samples, "habanalabs_utilization")) == 8  # the Gaudis only
    assert len(named(samples, "gpufleet_accelerator_utilization_ratio")) == 24  # all of them
    vendors_by_family: dict[str, set[str]] = {}
    for name, labels, _ in samples:
        who = "nvidia" if "UUID" in labels and "pci_bus_id" in labels else "amd" if "serial_number" in labels else ""
        who = who or ("intel" if "Serial" in labels else "fleet")
        vendors_by_family.setdefault(name, set()).add(who)
    assert all(len(v) == 1 for v in vendors_by_family.values()), vendors_by_family
    # the dcgm-exporter-only families never name another vendor's device
    for name in ("DCGM_EXP_XID_ERRORS_COUNT", "DCGM_FI_DEV_GPU_TEMP"):
        assert all(lab.get("modelName") == "NVIDIA H100 80GB HBM3" for _, lab, _ in named(samples, name))


def test_amd_series_carry_exactly_dme_labels_and_units() -> None:
    samples = parsed(render(mixed_frame(), NO_FLEET))
    util = named(samples, "gpu_gfx_activity")
    for _, labels, value in util:
        assert set(labels) == DME_LABELS
        assert value == 87
    labels = next(lab for _, lab, _ in util if lab["gpu_id"] == "3")
    assert labels["serial_number"] == "692251001003" and labels["card_model"] == "AMD Instinct MI300X"
    assert (labels["gpu_compute_partition_type"], labels["gpu_memory_partition_type"]) == ("spx", "nps1")
    assert labels["gpu_partition_id"] == "0" and labels["deployment_mode"] == "baremetal"
    assert labels["pod"] == labels["namespace"] == labels["job_id"] == ""  # attribution is the info series
    gpu = {"gpu_id": "3"}
    assert one(samples, "gpu_used_vram", **gpu) == 65536  # MiB stays MB (amd-smi's MB are 2^20 bytes)
    assert one(samples, "gpu_total_vram", **gpu) == 65536 + 131072
    assert one(samples, "gpu_energy_consumed", **gpu) == 987_654_321 * 1000  # mJ -> uJ
    assert one(samples, "gpu_package_power", **gpu) == 503.5
    assert one(samples, "gpu_power_usage", **gpu) == 503.5
    assert one(samples, "gpu_junction_temperature", **gpu) == 63
    assert one(samples, "pcie_speed", **gpu) == 32  # gen 5 -> 32 GT/s
    assert one(samples, "gpu_clock", clock_type="system", **gpu) == 2100
    assert one(samples, "gpu_clock", clock_type="memory", **gpu) == 1300
    assert one(samples, "gpu_health", **gpu) == 1
    assert not named(samples, "gpu_edge_temperature")  # MI2xx only
    assert not named(samples, "gpu_afid_errors")  # no RAS event reported


def test_gaudi_series_carry_exactly_the_gaudi_exporter_labels_and_units() -> None:
    samples = parsed(render(mixed_frame(), NO_FLEET))
    util = named(samples, "habanalabs_utilization")
    for _, labels, _ in util:
        assert set(labels) == GAUDI_LABELS
        assert labels["device"] == labels["Serial"]  # the exporter repeats the serial
    gaudi = {"id": "2"}
    labels = next(lab for _, lab, _ in util if lab["id"] == "2")
    assert labels["Serial"] == "AN21010002" and labels["driver"] == "1.21.0-fw-59.2.1"
    assert one(samples, "habanalabs_memory_used_bytes", **gaudi) == 65536 * 2**20
    assert one(samples, "habanalabs_memory_total_bytes", **gaudi) == (65536 + 131072) * 2**20
    assert one(samples, "habanalabs_power_mW", **gaudi) == 502.5 * 1000
    assert one(samples, "habanalabs_energy", **gaudi) == 987_654_321  # HLML's energy is mJ, as DCGM's
    assert one(samples, "habanalabs_temperature_threshold_slowdown", **gaudi) == 95
    assert one(samples, "habanalabs_pending_rows_with_double_bit_ecc_errors", **gaudi) == 1
    assert one(samples, "habanalabs_pending_rows_with_single_bit_ecc_errors", **gaudi) == 2


def test_gaudi_firmware_labels_come_from_the_entity_label_fields() -> None:
    entity = gaudi3_entities()[0]
    fields = (*entity.label_fields, ("fit", "hl-gaudi3-1.21.0-fw-59.2.1"), ("spi", "59.2.1"))
    frame = MetricFrame([dataclasses.replace(entity, label_fields=fields)])
    frame.gpu("DCGM_FI_DEV_GPU_UTIL")[:] = 10
    (_, labels, _), *_ = named(parsed(render(frame, NO_FLEET)), "habanalabs_utilization")
    assert labels["fit"] == "hl-gaudi3-1.21.0-fw-59.2.1" and labels["spi"] == "59.2.1"


def test_gaudi_nic_ports_one_series_per_port_with_its_type() -> None:
    frame = mixed_frame()
    up = frame.gpu("gpufleet_gpu_nic_port_up_mask")
    up[16 + 2] = ((1 << 24) - 1) & ~(1 << 5) & ~(1 << 22)  # Gaudi 2: scale-up port 5 and scale-out port 22 down
    frame.gpu("gpufleet_gpu_nic_port_mask")[16 + 7] = np.nan  # Gaudi 7 did not report its ports
    ports = named(parsed(render(frame, NO_FLEET)), "habanalabs_nic_port_status")
    assert len(ports) == 7 * 24
    down = {(lab["id"], lab["port"], lab["port_type"]) for _, lab, v in ports if v == 0}
    assert down == {("2", "5", "internal"), ("2", "22", "external")}
    kinds = Counter(lab["port_type"] for _, lab, _ in ports if lab["id"] == "0")
    assert kinds == {"internal": 21, "external": 3}  # Gaudi 3: 21 scale-up and 3 scale-out ports


def test_amd_partition_caveat_sensors_on_partition_0_power_0_elsewhere() -> None:
    frame = MetricFrame(mi300x_entities(partition="DPX_NPS1", per_gpu=2))
    frame.gpu("DCGM_FI_DEV_GPU_UTIL")[:] = 50
    frame.gpu("DCGM_FI_DEV_GPU_TEMP")[:] = 70
    frame.gpu("DCGM_FI_DEV_POWER_USAGE")[:] = 300
    frame.gpu("DCGM_FI_DEV_SM_CLOCK")[:] = 2000
    frame.gpu("DCGM_FI_DEV_PCIE_LINK_GEN")[:] = 5
    frame.gpu("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")[:] = 1000
    frame.gpu("DCGM_FI_DEV_FB_USED")[:] = 1024
    frame.values[:, 15] = np.nan  # the last partition reported nothing this tick
    samples = parsed(render(frame))
    for name in ("gpu_junction_temperature", "gpu_clock", "pcie_speed", "gpu_energy_consumed", "gpu_gfx_activity"):
        series = named(samples, name)
        assert len(series) == 8 and {lab["gpu_partition_id"] for _, lab, _ in series} == {"0"}, name
    power = {lab["gpu_id"]: v for _, lab, v in named(samples, "gpu_package_power")}
    assert len(power) == 15  # the silent partition shows nothing, not a 0
    assert {v for g, v in power.items() if int(g) % 2 == 0} == {300} and {
        v for g, v in power.items() if int(g) % 2
    } == {0}
    assert len(named(samples, "gpu_used_vram")) == 15  # every partition's own memory
    labels = named(samples, "gpu_used_vram")[1][1]
    assert (labels["gpu_compute_partition_type"], labels["gpu_memory_partition_type"]) == ("dpx", "nps1")
    assert labels["serial_number"] == "692251001000" and labels["gpu_partition_id"] == "1"
    # the fleet series keep every partition apart, whatever DME shows
    fleet_temp = named(samples, "gpufleet_accelerator_temperature_celsius")
    assert len(fleet_temp) == 15 and {lab["partition"] for _, lab, _ in fleet_temp} == {"0", "1"}


def test_mi2xx_uses_edge_temperature_and_average_power() -> None:
    entity = GpuEntity(
        gpu=0,
        uuid="67ff740f-0000-1000-80e6-b5bb3c3ce0db",
        model_name="AMD Instinct MI210",
        hostname="mi210-node",
        vendor="amd",
        serial="PCB046982-0071",
    )
    frame = MetricFrame([entity])
    frame.gpu("DCGM_FI_DEV_GPU_TEMP")[:] = 41
    frame.gpu("DCGM_FI_DEV_POWER_USAGE")[:] = 42
    frame.gpu("DCGM_FI_DEV_PCIE_REPLAY_COUNTER")[:] = 1
    samples = parsed(render(frame, NO_FLEET))
    assert one(samples, "gpu_edge_temperature") == 41 and one(samples, "gpu_average_package_power") == 42
    assert not named(samples, "gpu_junction_temperature") and not named(samples, "gpu_package_power")
    assert not named(samples, "pcie_replay_count")  # MI3xx only
    labels = named(samples, "gpu_edge_temperature")[0][1]
    assert (labels["gpu_compute_partition_type"], labels["gpu_memory_partition_type"]) == ("none", "none")


def test_afid_errors_by_severity() -> None:
    frame = MetricFrame(mi300x_entities())
    frame.gpu("gpufleet_gpu_afid_fatal")[2] = 30
    frame.gpu("gpufleet_gpu_afid_non_fatal_corrected")[5] = 12
    afids = named(parsed(render(frame, NO_FLEET)), "gpu_afid_errors")
    got = {(lab["gpu_id"], lab["severity"], lab["afid_index"], v) for _, lab, v in afids}
    assert got == {("2", "fatal", "0", 30), ("5", "non_fatal_corrected", "0", 12)}


# -- attribution -----------------------------------------------------------------------------------------------------
def test_pod_info_names_each_device_by_its_exporter_identity() -> None:
    frame = mixed_frame()
    frame.set_attribution(1, Attribution("serve-0", "inference", "server"))
    frame.set_attribution(9, Attribution("trainer-1", "ml", "pytorch", workload="llm"))
    frame.set_attribution(17, Attribution("trainer-2", "ml", "pytorch"))
    samples = parsed(render(frame))
    info = named(samples, POD_INFO_METRIC)
    assert len(info) == 3
    # each info series joins its own vendor's series on the identity labels the exporter carries
    for key, family, pod in (
        (("UUID", "GPU_I_ID", "hostname"), "DCGM_FI_DEV_GPU_UTIL", "serve-0"),
        (("gpu_uuid",), "gpu_gfx_activity", "trainer-1"),
        (("UUID", "GPU_I_ID"), "habanalabs_utilization", "trainer-2"),
    ):
        (labels,) = [lab for _, lab, _ in info if lab["pod"] == pod]
        matches = [lab for _, lab, _ in named(samples, family) if all(lab.get(k) == labels.get(k) for k in key)]
        assert len(matches) == 1, (family, labels)
    fleet_info = named(samples, "gpufleet_accelerator_pod_info")
    assert {lab["vendor"] for _, lab, _ in fleet_info} == {"nvidia", "amd", "intel"}
    for _, labels, _ in fleet_info:
        key = ("hostname", "uuid", "partition")
        up = named(samples, "gpufleet_accelerator_up")
        matches = [lab for _, lab, _ in up if all(lab.get(k) == labels.get(k) for k in key)]
        assert len(matches) == 1


def test_compat_mode_puts_the_pod_on_vendor_series_as_the_exporters_do() -> None:
    frame = mixed_frame()
    frame.set_attribution(9, Attribution("trainer-1", "ml", "pytorch"))
    frame.set_jobs(10, ("4411", "4412"))
    frame.set_attribution(17, Attribution("trainer-2", "ml", "pytorch"))
    samples = parsed(render(frame, ExpositionConfig(attribution="labels", fleet_series=False)))
    util = named(samples, "gpu_gfx_activity")
    pods = {lab["gpu_id"]: (lab["pod"], lab["namespace"], lab["container"]) for _, lab, _ in util if lab["pod"]}
    assert pods == {"1": ("trainer-1", "ml", "pytorch")}
    assert sorted(lab["job_id"] for _, lab, _ in util if lab["gpu_id"] == "2") == ["4411", "4412"]
    gaudi = {
        lab["id"]: (lab["pod_namespace"], lab["pod_name"]) for _, lab, _ in named(samples, "habanalabs_utilization")
    }
    assert gaudi["1"] == ("ml", "trainer-2") and gaudi["0"] == ("", "")
    assert not named(samples, POD_INFO_METRIC)


def test_labels_follow_entity_changes() -> None:
    frame = MetricFrame(mi300x_entities())
    frame.gpu("DCGM_FI_DEV_GPU_UTIL")[:] = 5
    renderer = Renderer(ExpositionConfig(attribution="labels"))
    assert 'pod=""' in renderer.render(frame)
    frame.set_attribution(0, Attribution("p", "ns", "c"))
    assert 'pod="p"' in renderer.render(frame)
    frame.set_entities(gaudi3_entities())
    frame.gpu("DCGM_FI_DEV_GPU_UTIL")[:] = 5
    text = renderer.render(frame)
    assert "habanalabs_utilization{" in text and "gpu_gfx_activity" not in text


# -- formats and data ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "text"),
    [
        (39.0, "39"),
        (61.5, "61.5"),
        (192000.0, "192000"),
        (1e6, "1e+06"),
        (1234567.0, "1.234567e+06"),
        (137438953472.0, "1.37438953472e+11"),
        (0.0001, "0.0001"),
        (0.00001234, "1.234e-05"),
        (-3.5, "-3.5"),
        (0.0, "0"),
        (float("nan"), "NaN"),
        (float("inf"), "+Inf"),
    ],
)
def test_values_print_as_the_go_client_prints_them(value: float, text: str) -> None:
    assert go_float(value) == text


def test_a_field_the_data_file_misnames_is_an_error() -> None:
    data = load_vendor_metrics()
    amd = data.vendors["amd"]
    broken = amd.model_copy(update={"metrics": (amd.metrics[0].model_copy(update={"field": "DCGM_FI_DEV_GPU_UTILL"}),)})
    bad = VendorMetrics(tables=data.tables, vendors={"amd": broken}, fleet=data.fleet)
    with pytest.raises(ManifestError, match="unknown field DCGM_FI_DEV_GPU_UTILL"):
        _check(bad)


def test_every_mapped_vendor_series_renders_from_a_filled_frame() -> None:
    """No row of the data file is dead: a frame with every canonical field filled shows every vendor series."""
    frame = MetricFrame([*mi300x_entities(), *gaudi3_entities(), *h100_entities()])
    frame.values[:] = 1
    names = {s[0] for s in parsed(render(frame))}
    for vendor, spec in load_vendor_metrics().vendors.items():
        for metric in spec.metrics:
            if metric.arch:  # the MI2xx rows: covered by test_mi2xx_uses_edge_temperature_and_average_power
                continue
            assert metric.name in names, (vendor, metric.name)
