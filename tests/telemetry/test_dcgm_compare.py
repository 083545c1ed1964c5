"""dcgm-exporter's default counters file against what an NVIDIA node's agent exports: the verdicts follow the catalog
and the sources' declarations, and docs/dcgm-exporter.md holds the table they generate."""

from __future__ import annotations

import json
from pathlib import Path

from gpufleet.agent.fields import NVIDIA_AGENT, named
from gpufleet.catalog import load_dcgm_fields
from gpufleet.cli.field_sources import all_sources
from gpufleet.telemetry.dcgm_compare import (
    BOTH,
    EXPORTER_ONLY,
    GPUFLEET_ONLY,
    MARKER,
    NEITHER,
    Comparison,
    compare,
    markdown,
)
from gpufleet.telemetry.fields import load_field_catalog, switched
from tests.clirun import gpufleet

DOC = Path(__file__).resolve().parents[2] / "docs" / "dcgm-exporter.md"


def _rows() -> dict[str, Comparison]:
    return {r.name: r for r in compare(named(list(NVIDIA_AGENT)), all_sources())}


def test_each_field_gets_the_verdict_its_two_sides_give() -> None:
    rows = _rows()
    assert rows["DCGM_FI_DEV_GPU_TEMP"].verdict == BOTH
    # dcgm-exporter's on, the NVML source does not read it: its own declaration says why
    reserved = rows["DCGM_FI_DEV_FB_RESERVED"]
    assert reserved.verdict == EXPORTER_ONLY and reserved.why.startswith("nvml: ")
    temp = rows["DCGM_FI_DEV_MEMORY_TEMP"]  # a field value NVML gives GPUs with a memory sensor
    assert (temp.gpufleet, temp.verdict) == ("partly", BOTH) and "sensor" in temp.why
    ecc = rows["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"]  # commented out in the default file, exported by gpufleet
    assert (ecc.exporter, ecc.gpufleet, ecc.verdict) == ("off", "yes", GPUFLEET_ONLY)
    xid = rows["DCGM_FI_DEV_XID_ERRORS"]
    assert xid.verdict == BOTH and xid.filled_by == ("kmsg",)
    sm = rows["DCGM_FI_PROF_GR_ENGINE_ACTIVE"]  # GPM on Hopper and later: partly, and said so
    assert (sm.gpufleet, sm.verdict) == ("partly", BOTH) and "Hopper" in sm.why
    link = rows["DCGM_FI_DEV_NVLINK_GET_STATE"]  # read for the detector, not exported by default
    assert (link.exporter, link.gpufleet, link.verdict) == ("", "off", NEITHER)
    assert "GPUFLEET_FIELDS" in link.why
    assert rows["infiniband_port_up"].verdict == GPUFLEET_ONLY
    # every field of dcgm-exporter's default file has a row
    assert {f.name for f in load_dcgm_fields()} <= set(rows)


def test_the_verdicts_follow_the_catalog_and_the_sources() -> None:
    on = switched(load_field_catalog(), "+DCGM_FI_DEV_NVLINK_GET_STATE")
    row = {r.name: r for r in compare(named(list(NVIDIA_AGENT)), all_sources(), on)}["DCGM_FI_DEV_NVLINK_GET_STATE"]
    assert (row.gpufleet, row.verdict) == ("yes", GPUFLEET_ONLY)
    without_nvml = {r.name: r for r in compare(named(["kmsg", "ib-sysfs"]), all_sources())}
    assert without_nvml["DCGM_FI_DEV_GPU_TEMP"].verdict == EXPORTER_ONLY
    assert "nvml" in without_nvml["DCGM_FI_DEV_GPU_TEMP"].why


def test_the_docs_table_is_what_the_catalog_and_sources_generate() -> None:
    """Run scripts/dcgm_exporter_table.py after a change to the catalog, the counters file or a source."""
    text = DOC.read_text()
    assert MARKER in text
    generated = text.split(MARKER, 1)[1].lstrip("\n")
    assert generated == markdown(compare(named(list(NVIDIA_AGENT)), all_sources()))
    readme = (DOC.parents[1] / "README.md").read_text()
    assert "docs/dcgm-exporter.md" in readme


def test_the_cli_view() -> None:
    out = gpufleet("telemetry", "fields", "--compare-dcgm-exporter", "-o", "json")
    assert out.returncode == 0, out.stderr
    rows = {r["name"]: r for r in json.loads(out.stdout)}
    assert rows["DCGM_FI_DEV_GPU_TEMP"]["verdict"] == BOTH
    assert rows["DCGM_FI_DEV_FB_RESERVED"]["dcgm_exporter"] == "on"
    table = gpufleet("telemetry", "fields", "--compare-dcgm-exporter", "--sim")
    assert table.returncode == 0 and "the twin's agent" in table.stdout
