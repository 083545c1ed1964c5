from __future__ import annotations

import pytest

from gpufleet.catalog.clock_events import clock_events_of, load_clock_events
from gpufleet.catalog.dcgm_fields import parse_counter_file
from gpufleet.errors import NotFoundError
from gpufleet.telemetry.fields import EXP_OVERRIDES, IB_PORT_RATE, IB_PORT_UP, load_field_catalog
from tests.conftest import CATALOG_DATA

FAULT_FIELDS = [
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
    "DCGM_FI_DEV_RETIRED_SBE",
    "DCGM_FI_DEV_RETIRED_DBE",
    "DCGM_FI_DEV_RETIRED_PENDING",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
    "DCGM_FI_DEV_POWER_VIOLATION",
    "DCGM_FI_DEV_THERMAL_VIOLATION",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_EXP_XID_ERRORS_COUNT",
    "DCGM_EXP_CLOCK_EVENTS_COUNT",
]


def test_fault_fields_are_switched_on() -> None:
    enabled = set(load_field_catalog().enabled().names())
    missing = [f for f in FAULT_FIELDS if f not in enabled]
    assert not missing


def test_names_types_and_help_follow_dcgm_exporter() -> None:
    upstream = parse_counter_file((CATALOG_DATA / "dcgm_exporter" / "default-counters.csv").read_text())
    catalog = load_field_catalog()
    # a name listed twice (PCIe bytes: old counter commented out, DCP gauge on) counts as its enabled line
    chosen = {f.name: f for f in upstream if not f.enabled_by_default}
    chosen.update({f.name: f for f in upstream if f.enabled_by_default})
    for field in chosen.values():
        if field.name in EXP_OVERRIDES:  # the counter file's line is wrong about them: the next test
            continue
        ours = catalog.get(field.name)
        assert ours.prom_type == field.prom_type, field.name
        assert ours.help == field.help, field.name
    # what dcgm-exporter ships switched on stays on
    on_upstream = {f.name for f in upstream if f.enabled_by_default}
    assert on_upstream <= set(catalog.enabled().names())


def test_the_windowed_counts_are_gauges_as_dcgm_exporter_exposes_them() -> None:
    """DCGM_EXP_XID_ERRORS_COUNT and DCGM_EXP_CLOCK_EVENTS_COUNT count samples within a sliding window, so they fall
    as samples leave it: gauges, with the help texts dcgm-exporter's own tests give them (its etc/default-counters.csv
    line says counter, "reported XIDs during last window")."""
    catalog = load_field_catalog()
    xid, clocks = catalog.get("DCGM_EXP_XID_ERRORS_COUNT"), catalog.get("DCGM_EXP_CLOCK_EVENTS_COUNT")
    assert (xid.prom_type, clocks.prom_type) == ("gauge", "gauge")
    assert xid.help == "Count of XID Errors within user-specified time window (see xid-count-window-size param)."
    assert clocks.help == (
        "Count of clock events within the user-specified time window (see clock-events-count-window-size param)."
    )
    upstream = {
        f.name: f for f in parse_counter_file((CATALOG_DATA / "dcgm_exporter" / "default-counters.csv").read_text())
    }
    for name in EXP_OVERRIDES:  # each override is still a field of the counter file, and really differs from it
        assert upstream[name].prom_type != catalog.get(name).prom_type, name


def test_ib_counters_use_prometheus_naming() -> None:
    ib = load_field_catalog().scoped("ib_port")
    assert ib
    for field in ib:
        assert field.name.startswith("infiniband_port_")
        # counters end in _total; the port's state and link rate beside them are gauges in base units
        if field.prom_type == "counter":
            assert field.name.endswith("_total")
        else:
            assert field.prom_type == "gauge" and field.name in {IB_PORT_UP, IB_PORT_RATE}
    names = {f.name for f in ib}
    assert "infiniband_port_symbol_errors_total" in names
    assert "infiniband_port_transmit_bytes_total" in names


def test_gpufleet_own_metrics_present() -> None:
    names = set(load_field_catalog().enabled().names())
    for name in (
        "gpufleet_source_up",
        "training_last_step_timestamp_seconds",
        "training_step_duration_seconds",
        "gpufleet_inference_request_duration_seconds",
        "gpufleet_gpu_idle_cost_dollars_per_hour",
    ):
        assert name in names


def test_unknown_field_is_a_user_error() -> None:
    with pytest.raises(NotFoundError):
        load_field_catalog().get("DCGM_FI_NOPE")
    with pytest.raises(NotFoundError):
        load_field_catalog().with_enabled(["DCGM_FI_NOPE"])


def test_with_enabled_switches_a_field_on() -> None:
    cat = load_field_catalog().with_enabled(["DCGM_FI_PROF_SM_ACTIVE"])
    assert "DCGM_FI_PROF_SM_ACTIVE" in cat.enabled().names()
    assert "DCGM_FI_PROF_SM_ACTIVE" not in load_field_catalog().enabled().names()


def test_clock_event_bits() -> None:
    names = [e.name for e in load_clock_events()]
    assert names[:2] == ["gpu_idle", "clocks_setting"]
    assert clock_events_of(0x40 | 0x1) == ["gpu_idle", "hw_thermal"]


PER_LINK = "+DCGM_FI_DEV_NVLINK_*_PER_LINK_TOTAL,+DCGM_FI_DEV_NVLINK_GET_STATE"


def test_nvlink_per_link_fields_are_off_as_dcgm_exporter_ships_them_and_a_site_switches_them_on() -> None:
    from gpufleet.telemetry.fields import NVLINK, switched

    catalog = load_field_catalog()
    per_link = [f.name for f in catalog.scoped(NVLINK)]
    assert len(per_link) == 5 and not any(f.enabled for f in catalog.scoped(NVLINK))
    on = switched(catalog, PER_LINK)
    assert all(f.enabled for f in on.scoped(NVLINK))
    assert sum(f.enabled for f in on) == sum(f.enabled for f in catalog) + 5
    back = switched(on, "-DCGM_FI_DEV_NVLINK_GET_STATE DCGM_FI_DEV_GPU_TEMP")  # space-separated; bare means on
    assert not back.get("DCGM_FI_DEV_NVLINK_GET_STATE").enabled and back.get("DCGM_FI_DEV_GPU_TEMP").enabled


def test_a_site_switch_that_names_no_field_is_one_clear_error() -> None:
    from gpufleet.errors import UserError
    from gpufleet.telemetry.fields import switched

    with pytest.raises(UserError, match="GPUFLEET_FIELDS: '\\+DCGM_FI_DEV_NVLNK_\\*' names no field"):
        switched(load_field_catalog(), "+DCGM_FI_DEV_NVLNK_*")
