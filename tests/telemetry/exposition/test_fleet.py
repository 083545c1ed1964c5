"""The vendor-neutral gpufleet_accelerator_* series, the mixed-fleet dashboard panels and `fields --vendor`."""

from __future__ import annotations

import json
import re
from collections import Counter

import numpy as np
import pytest

from gpufleet.health.thresholds import detection_limits
from gpufleet.telemetry.exposition.config import ExpositionConfig
from gpufleet.telemetry.exposition.dcgm import render
from gpufleet.telemetry.fields import FLEET, load_field_catalog
from gpufleet.telemetry.frame import MetricFrame
from gpufleet.telemetry.monitoring.dashboards import dashboards
from gpufleet.telemetry.monitoring.sizing import series_counts
from tests.clirun import gpufleet
from tests.telemetry.exposition.test_vendor import named, one, parsed
from tests.telemetry.vendor_frames import mixed_frame, nvidia_entities

FLEET_LABELS = {"vendor", "model", "hostname", "gpu", "uuid"}


def test_every_accelerator_of_every_vendor_gets_the_fleet_series() -> None:
    samples = parsed(render(mixed_frame()))
    up = named(samples, "gpufleet_accelerator_up")
    assert len(up) == 24 and {v for *_, v in up} == {1}
    assert all(set(labels) == FLEET_LABELS for _, labels, _ in up)
    assert Counter(lab["vendor"] for _, lab, _ in up) == {"nvidia": 8, "amd": 8, "intel": 8}
    amd = {"vendor": "amd", "gpu": "3"}
    assert one(samples, "gpufleet_accelerator_utilization_ratio", **amd) == pytest.approx(0.87)
    assert one(samples, "gpufleet_accelerator_memory_used_bytes", **amd) == 65536 * 2**20
    assert one(samples, "gpufleet_accelerator_memory_total_bytes", **amd) == (65536 + 131072) * 2**20
    assert one(samples, "gpufleet_accelerator_temperature_celsius", **amd) == 63
    assert one(samples, "gpufleet_accelerator_power_watts", **amd) == 503.5
    assert one(samples, "gpufleet_accelerator_energy_joules_total", **amd) == pytest.approx(987_654.321)
    assert one(samples, "gpufleet_accelerator_ecc_correctable_total", **amd) == 3
    assert one(samples, "gpufleet_accelerator_ecc_uncorrectable_total", **amd) == 0


def test_temperature_limit_from_the_device_else_the_catalog_else_none() -> None:
    samples = parsed(render(mixed_frame()))
    limits = {
        (lab["vendor"], lab["gpu"]): v for _, lab, v in named(samples, "gpufleet_accelerator_temperature_limit_celsius")
    }
    assert limits[("intel", "0")] == 95  # the Gaudi reports its slowdown threshold
    assert limits[("nvidia", "0")] == 90  # the catalog's H100 SXM slowdown temperature
    # the MI300X reports none here: the catalog's hotspot slowdown limit (amd-smi static --limit), the sensor its
    # temperature is read from (sources/gpu/amdsmi.py: the junction on MI300)
    assert {v for (vendor, _), v in limits.items() if vendor == "amd"} == {100}


def test_memory_total_adds_reserved_where_reported_and_mig_instances_are_partitions() -> None:
    frame = MetricFrame(nvidia_entities())
    frame.gpu("DCGM_FI_DEV_FB_USED")[:] = 1000
    frame.gpu("DCGM_FI_DEV_FB_FREE")[:] = 80000
    frame.gpu("DCGM_FI_DEV_FB_RESERVED")[:2] = 559
    samples = parsed(render(frame))
    totals = {
        (lab["gpu"], lab.get("partition")): v for _, lab, v in named(samples, "gpufleet_accelerator_memory_total_bytes")
    }
    assert totals[("0", None)] == (1000 + 80000 + 559) * 2**20
    assert totals[("2", None)] == (1000 + 80000) * 2**20
    assert {p for _, p in totals} == {None, "1", "2"}  # the two MIG instances by GPU_I_ID


def test_a_silent_accelerator_is_down_and_has_no_values() -> None:
    frame = mixed_frame()
    frame.values[:, 12] = np.nan  # MI300X 4 fell off the bus
    samples = parsed(render(frame))
    assert one(samples, "gpufleet_accelerator_up", vendor="amd", gpu="4") == 0
    assert not [
        s for s in named(samples, "gpufleet_accelerator_temperature_celsius") if s[1]["uuid"] == frame.entities[12].uuid
    ]
    assert not [s for s in named(samples, "gpu_gfx_activity") if s[1]["gpu_id"] == "4"]


def test_fleet_series_can_be_turned_off_whole_or_per_family() -> None:
    text = render(mixed_frame(), ExpositionConfig(fleet_series=False))
    assert "gpufleet_accelerator_" not in text
    catalog = load_field_catalog().with_enabled(["gpufleet_accelerator_power_watts"], False).enabled()
    frame = MetricFrame(mixed_frame().entities, catalog=catalog)
    frame.values[:] = 1
    names = {s[0] for s in parsed(render(frame))}
    assert "gpufleet_accelerator_up" in names and "gpufleet_accelerator_power_watts" not in names


def test_sizing_counts_the_fleet_series() -> None:
    catalog = load_field_catalog()
    with_fleet = series_counts(catalog)[0]
    names = [f.name for f in catalog.scoped(FLEET)]
    without = series_counts(catalog.with_enabled(names, False))[0]
    assert with_fleet - without == len(names) == 11


# -- dashboards ----------------------------------------------------------------------------------------------------
def test_cluster_dashboard_has_a_mixed_fleet_panel_set() -> None:
    panels = dashboards(limits=detection_limits())["gpufleet-cluster"]["panels"]
    fleet = [p for p in panels if "gpufleet_accelerator_" in p["targets"][0]["expr"]]
    exprs = {p["title"]: p["targets"][0]["expr"] for p in fleet}
    assert exprs["Fleet: utilization by vendor"] == "avg by (vendor) (gpufleet_accelerator_utilization_ratio)"
    assert "/ sum by (vendor) (gpufleet_accelerator_memory_total_bytes)" in exprs["Fleet: memory in use by vendor"]
    assert exprs["Fleet: power draw by vendor"] == "sum by (vendor) (gpufleet_accelerator_power_watts)"
    assert (
        "increase(gpufleet_accelerator_ecc_uncorrectable_total[1h])"
        in (exprs["Fleet: uncorrectable ECC errors by vendor and model"])
    )
    units = {p["title"]: p["fieldConfig"]["defaults"]["unit"] for p in fleet}
    assert (
        units["Fleet: utilization by vendor"] == "percentunit"
        and units["Fleet: memory in use by vendor"] == "percentunit"
    )
    assert units["Fleet: power draw by vendor"] == "watt" and units["Fleet: memory used by vendor"] == "bytes"
    known = set(load_field_catalog().names())
    for expr in exprs.values():
        assert set(re.findall(r"\bgpufleet_accelerator_[a-z_]+", expr)) <= known, expr
    # laid out without overlap after the NVIDIA panels
    boxes = [(p["gridPos"]["x"], p["gridPos"]["y"], p["gridPos"]["w"], p["gridPos"]["h"]) for p in panels]
    cells = [(x + dx, y + dy) for x, y, w, h in boxes for dx in range(w) for dy in range(h)]
    assert len(cells) == len(set(cells))


def test_fleet_dashboard_queries_what_the_agent_renders() -> None:
    """Every family a mixed-fleet panel reads is one a mixed node's /metrics shows, with the labels it groups by."""
    samples = parsed(render(mixed_frame()))
    panels = [
        p
        for p in dashboards(limits=detection_limits())["gpufleet-cluster"]["panels"]
        if "gpufleet_accelerator_" in p["targets"][0]["expr"]
    ]
    for panel in panels:
        expr = panel["targets"][0]["expr"]
        for name in re.findall(r"\bgpufleet_accelerator_[a-z_]+", expr):
            series = named(samples, name)
            assert series, name
            for group in re.findall(r"by \(([^)]*)\)", expr):
                assert all({g.strip() for g in group.split(",")} <= set(lab) for _, lab, _ in series), (expr, name)


# -- the field catalog command -------------------------------------------------------------------------------------
def test_cli_shows_the_vendor_names_of_canonical_fields() -> None:
    result = gpufleet("telemetry", "fields", "--vendor", "amd", "-o", "json")
    assert result.returncode == 0, result.stderr
    rows = {r["metric"]: r for r in json.loads(result.stdout)}
    assert rows["gpu_gfx_activity"]["field"] == "DCGM_FI_DEV_GPU_UTIL"
    assert rows["gpu_energy_consumed"]["conversion"] == "x1000" and rows["gpu_energy_consumed"]["unit"] == "uJ"
    assert rows["gpu_junction_temperature"]["partitions"] == "partition 0 only"
    assert rows['gpu_clock{clock_index="0",clock_type="system"}']["field"] == "DCGM_FI_DEV_SM_CLOCK"
    result = gpufleet("telemetry", "fields", "--vendor", "intel")
    assert result.returncode == 0 and "habanalabs_power_mW" in result.stdout and "x1000" in result.stdout
    assert "habanalabs_nic_port_status{port,port_type}" in result.stdout
    wrong = gpufleet("telemetry", "fields", "--vendor", "nvdia")
    assert wrong.returncode != 0 and "unknown --vendor 'nvdia'" in wrong.stderr and "amd, intel" in wrong.stderr
    nvidia = gpufleet("telemetry", "fields", "--vendor", "nvidia", "-o", "json")
    assert "DCGM_FI_DEV_GPU_UTIL" in {f["name"] for f in json.loads(nvidia.stdout)}
