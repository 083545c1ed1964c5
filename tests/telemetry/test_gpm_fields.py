"""The GPM map (telemetry/data/gpm_fields.csv) against nvidia-ml-py's own constants, DCGM's field ids and the field
catalog's units."""

from __future__ import annotations

import pynvml

from gpufleet.catalog.dcgm_fields import field_ids
from gpufleet.telemetry.fields import load_field_catalog
from gpufleet.telemetry.gpm_fields import load_gpm_fields

MIB = 1024 * 1024


def test_each_gpm_metric_is_nvidia_ml_pys() -> None:
    for f in load_gpm_fields():
        assert getattr(pynvml, f.metric) == f.metric_id, f.field


def test_each_field_is_a_dcgm_profiling_field_once() -> None:
    fields = [f.field for f in load_gpm_fields()]
    assert len(fields) == len(set(fields))
    metrics = [f.metric_id for f in load_gpm_fields()]
    assert len(metrics) == len(set(metrics))
    ids = field_ids()
    assert all(name.startswith("DCGM_FI_PROF_") and 1001 <= ids[name] <= 1100 for name in fields)


def test_the_scale_turns_gpms_unit_into_the_fields() -> None:
    """GPM: percent (0-100) and MiB/s; the fields: ratios (Grafana percentunit) and bytes per second (Bps)."""
    catalog = load_field_catalog()
    for f in load_gpm_fields():
        unit = catalog.get(f.field).unit
        assert (unit, f.scale) in (("percentunit", 0.01), ("Bps", MIB)), f.field
        assert f.metric.endswith("_PER_SEC") == (f.scale == MIB), f.field


def test_what_a_gpu_instance_has_of_its_own() -> None:
    """DCGM gives a GPU instance its activity ratios, never the whole GPU's PCIe or NVLink rates."""
    per_instance = {f.field for f in load_gpm_fields() if f.per_instance}
    assert {"DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE"} <= per_instance
    assert not per_instance & {"DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_NVLINK_RX_BYTES"}
    default_on = {f.field for f in load_gpm_fields() if load_field_catalog().get(f.field).enabled}
    # dcgm-exporter's default counters file switches these on, and the catalog with it
    assert default_on == {
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "DCGM_FI_PROF_PCIE_RX_BYTES",
    }
