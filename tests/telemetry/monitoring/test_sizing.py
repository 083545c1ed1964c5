from __future__ import annotations

from collections import Counter

import pytest

from gpufleet.agent.collector import Collector
from gpufleet.sim.source import TwinSource
from gpufleet.telemetry.exposition.dcgm import POD_INFO_METRIC
from gpufleet.telemetry.fields import load_field_catalog
from gpufleet.telemetry.monitoring.sizing import MIN_REPLICAS, PROMETHEUS_BYTES_PER_SAMPLE, series_counts, size
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
