from __future__ import annotations

import inspect
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from gpufleet.agent.collector import Collector
from gpufleet.agent.fields import NVIDIA_AGENT, named
from gpufleet.sim.source import TwinSource
from gpufleet.telemetry.exposition.dcgm import POD_INFO_METRIC
from gpufleet.telemetry.fields import load_field_catalog
from gpufleet.telemetry.monitoring.sizing import MIN_REPLICAS, PROMETHEUS_BYTES_PER_SAMPLE, series_counts, size
from tests.clirun import gpufleet
from tests.twins import small_twin


def test_the_catalog_bounds_what_the_agent_exports() -> None:
    """A twin node's real /metrics: every family it shows is counted, and no GPU or port shows more series than
    the sizing assumes."""
    twin = small_twin()
    twin.run(30)
    source = TwinSource(twin, node="n-000")
    collector = Collector(source.new_frame(), [source])
    collector.collect_once()
    lines = [ln for ln in collector.body.decode().splitlines() if ln and not ln.startswith("#")]
    per_gpu = Counter(ln.split('gpu="', 1)[1].split('"', 1)[0] for ln in lines if 'gpu="' in ln)
    per_port = Counter(ln.split('hca="', 1)[1].split('"', 1)[0] for ln in lines if 'hca="' in ln)
    enabled = {f.name for f in load_field_catalog().enabled()} | {POD_INFO_METRIC}
    families = {ln.split("{", 1)[0].removesuffix("_bucket").removesuffix("_sum").removesuffix("_count") for ln in lines}
    # the jobs' and services' own series are per workload, not per GPU or port: sized by the application's owner
    assert {f for f in families if not f.startswith(("training_", "gpufleet_inference_"))} <= enabled
    gpu, port, _ = series_counts()
    assert len(per_gpu) == 8 and max(per_gpu.values()) <= gpu
    assert len(per_port) == 8 and max(per_port.values()) <= port


def test_sizing_scales_with_the_fleet() -> None:
    small, big = size(32), size(1024)
    assert big.active_series == 32 * small.active_series
    assert small.samples_per_s == pytest.approx(small.active_series / 15)
    assert small.bytes_per_day == pytest.approx(small.samples_per_s * 86_400 * PROMETHEUS_BYTES_PER_SAMPLE)
    assert small.control_plane_replicas == MIN_REPLICAS
    assert big.control_plane_replicas >= small.control_plane_replicas
    assert size(32, scrape_interval_s=30).samples_per_s == pytest.approx(small.samples_per_s / 2)
    assert set(small.to_json()) >= {"activeSeries", "samplesPerSecond", "storageBytesPerDay", "controlPlaneReplicas"}


def _readme_sizing() -> str:
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    return readme.split("\n## Sizing\n", 1)[1].split("\n## ", 1)[0]


def test_the_readmes_sizing_table_is_what_deploy_size_says() -> None:
    """README's table, row by row and cell by cell, is `gpufleet deploy size` for an NVIDIA node's agent at the
    defaults its header names, written as the command's own table writes it."""
    section = _readme_sizing()
    defaults = {k: v.default for k, v in inspect.signature(size).parameters.items()}
    header = next(line for line in section.splitlines() if line.startswith("| nodes x"))
    assert [c.strip() for c in header.strip("|").split("|")][:5] == [
        f"nodes x {defaults['gpus_per_node']} GPUs",
        "active series",
        f"samples/s at {defaults['scrape_interval_s']:g} s",
        "storage/day",
        f"{defaults['retention_days']:g} days",
    ]
    rows = [line for line in section.splitlines() if re.match(r"\| [\d,]+ \|", line)]
    assert [int(row.split("|")[1].replace(",", "")) for row in rows] == [32, 256, 1024, 4096]
    for row in rows:
        nodes = int(row.split("|")[1].replace(",", ""))
        out = json.loads(gpufleet("deploy", "size", "--nodes", str(nodes), "-o", "json").stdout)
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[1:] == [
            f"{out['activeSeries']:,}",
            f"{out['samplesPerSecond']:,.0f}",
            f"{out['storageBytesPerDay'] / 1e9:,.1f} GB",
            f"{out['storageBytesRetained'] / 1e9:,.0f} GB",
            f"{out['controlPlaneCores']:.2f} cores",
            str(out["controlPlaneReplicas"]),
        ], row


def test_the_readmes_sizing_figures_are_what_the_code_counts() -> None:
    """The prose around the table: series per GPU, port and node, the BMC's assumed chassis, the control plane's
    nodes a core, and what switching the NVLink per-link fields on adds, each counted by the code `deploy size` runs."""
    from gpufleet.telemetry.fields import NVLINK, switched
    from gpufleet.telemetry.monitoring.sizing import NODES_PER_CORE, NVLINKS_PER_GPU, BmcSensors

    text = " ".join(_readme_sizing().split())
    sources = named(list(NVIDIA_AGENT))
    per_gpu, per_port, _ = series_counts(sources=sources)
    node = size(1, sources=sources).series_per_node
    assert f"{per_gpu} series per GPU, {per_port} per InfiniBand port, {node} per 8-GPU node" in text

    bmc = BmcSensors()
    _, _, other = series_counts(sources=sources)
    _, _, no_sensors = series_counts(sources=sources, bmc=BmcSensors(0, 0, 0, 0))
    assert (
        f"the BMC's {other - no_sensors} per-sensor series for an assumed {bmc.fans} fans, {bmc.psus} power supplies, "
        f"{bmc.temperatures} temperature sensors and {bmc.power_readings} power readings"
    ) in text
    assert "--bmc-sensors FANS,PSUS,TEMPS,POWER" in text
    assert f"{NODES_PER_CORE:,} planned" in text

    (spec,) = re.findall(r"GPUFLEET_FIELDS='([^']+)'", text)
    on = switched(load_field_catalog(), spec)
    per_link_fields = len(on.scoped(NVLINK))
    with_links, _, _ = series_counts(on, sources)
    assert f"{NVLINKS_PER_GPU} links x {per_link_fields} series" in text
    assert f"would add {with_links - per_gpu} series per GPU" in text
    assert (
        f"({with_links} series per GPU, {size(1, catalog=on, sources=sources).series_per_node:,} per 8-GPU node" in text
    )


def test_dcgm_among_the_sources_counts_only_what_it_fills_everywhere() -> None:
    """DCGM's host engine fills every GPU's health; its incidents, violations, job statistics and the profiling
    fields (per node, as its GPUs' metric groups have them) are not counted."""
    base = list(NVIDIA_AGENT)
    without, _, node = series_counts(sources=named(base))
    with_dcgm, _, node_dcgm = series_counts(sources=named([*base, "dcgm"]))
    assert with_dcgm == without + 1 and node_dcgm == node + 1  # gpufleet_dcgm_health; its gpufleet_source_up
    out = json.loads(gpufleet("deploy", "size", "--nodes", "32", "--sources", ",".join([*base, "dcgm"]),
                              "-o", "json").stdout)  # fmt: skip
    assert out["activeSeries"] == size(32, sources=named([*base, "dcgm"])).active_series


def test_nvlink_per_link_series_are_counted_only_when_a_site_switches_them_on() -> None:
    """Off by default (dcgm-exporter's counters file ships them off); switched on, 18 links x 5 series per GPU."""
    from gpufleet.telemetry.fields import switched

    sources = named(list(NVIDIA_AGENT))
    default, _, _ = series_counts(sources=sources)
    on = switched(load_field_catalog(), "+DCGM_FI_DEV_NVLINK_*_PER_LINK_TOTAL,+DCGM_FI_DEV_NVLINK_GET_STATE")
    per_link, _, _ = series_counts(on, sources)
    assert per_link - default == 18 * 5


def test_the_bmc_on_by_default_is_counted_per_sensor() -> None:
    """`gpufleet agent` runs the BMC source unless --no-bmc: its series are one per sensor, for the assumed chassis
    or the one given."""
    from gpufleet.agent.bmc import FIELDS as BMC_FIELDS
    from gpufleet.errors import UserError
    from gpufleet.telemetry.monitoring.sizing import BmcSensors

    assert "bmc" in NVIDIA_AGENT
    sources = named(list(NVIDIA_AGENT))
    without = named([s for s in NVIDIA_AGENT if s != "bmc"])
    _, _, other = series_counts(sources=sources)
    _, _, other_without = series_counts(sources=without)
    assumed = BmcSensors()
    per_sensor = sum(assumed.series(f) for f in BMC_FIELDS)
    assert per_sensor == 2 * assumed.fans + assumed.psus + 2 * assumed.temperatures + assumed.power_readings
    assert other - other_without == per_sensor + 1  # and its gpufleet_source_up
    _, _, hgx = series_counts(sources=sources, bmc=BmcSensors.parse("12,6,40,7"))
    assert hgx - other_without == 2 * 12 + 6 + 2 * 40 + 7 + 1
    with pytest.raises(UserError, match="four counts"):
        BmcSensors.parse("6,2")
    out = json.loads(gpufleet("deploy", "size", "--nodes", "1", "--bmc-sensors", "12,6,40,7", "-o", "json").stdout)
    assert out["seriesPerNode"] == size(1, sources=sources, bmc=BmcSensors(12, 6, 40, 7)).series_per_node
