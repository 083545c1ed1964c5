"""`gpufleet telemetry fields` says, for this node, a set of sources or the twin's agent, which source fills each
field of the catalog and why a field stays empty (and so is not exported)."""

from __future__ import annotations

import json

from tests.clirun import gpufleet

NVIDIA_AGENT = "nvml,kmsg,ib-sysfs,attribution,idle-cost"


def _fields(*args: str) -> dict[str, dict[str, object]]:
    res = gpufleet("telemetry", "fields", *args, "-o", "json")
    assert res.returncode == 0, res.stderr
    return {f["name"]: f for f in json.loads(res.stdout)}


def test_an_nvidia_agent_fills_profiling_from_gpm_on_the_gpus_that_have_it() -> None:
    """Without a node to look at, the NVML agent's profiling fields are filled for some GPUs only (NVML's GPM, Hopper
    and later): said, and not counted as filled; PCIe and NVLink bytes belong to whole GPUs."""
    fields = _fields("--sources", NVIDIA_AGENT)
    for name in ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES"):
        field = fields[name]
        assert field["enabled"] and not field["exported"] and field["filled_by"] == []
        assert "GPUs with NVML GPM (Hopper and later)" in str(field["partly"]), field
    assert "whole GPUs only" in str(fields["DCGM_FI_PROF_PCIE_TX_BYTES"]["partly"])
    assert fields["DCGM_FI_DEV_GPU_UTIL"]["filled_by"] == ["nvml"] and fields["DCGM_FI_DEV_GPU_UTIL"]["exported"]
    assert fields["DCGM_EXP_XID_ERRORS_COUNT"]["filled_by"] == ["kmsg"]
    assert fields["gpufleet_gpu_idle_cost_dollars_per_hour"]["filled_by"] == ["idle-cost"]
    assert fields["infiniband_port_symbol_errors_total"]["filled_by"] == ["ib-sysfs"]
    assert "DCGM_FI_PROF_SM_ACTIVE" not in fields  # switched off: listed with --all
    assert not _fields("--all", "--sources", NVIDIA_AGENT)["DCGM_FI_PROF_SM_ACTIVE"]["enabled"]


def test_the_twins_agent_and_what_it_fills_for_some_devices_only() -> None:
    fields = _fields("--sim")
    assert fields["DCGM_FI_DEV_GPU_UTIL"]["filled_by"] == ["twin"]
    engine = fields["DCGM_FI_PROF_GR_ENGINE_ACTIVE"]
    assert not engine["exported"] and "MIG instances only" in str(engine["partly"])
    assert "twin simulates no profiling counters" in str(fields["DCGM_FI_PROF_DRAM_ACTIVE"]["why_empty"])
    assert fields["gpufleet_accelerator_pod_info"]["filled_by"] == ["attribution"]


def test_the_table_names_the_sources_and_this_nodes_missing_ones() -> None:
    table = gpufleet("telemetry", "fields", "--sources", NVIDIA_AGENT).stdout
    assert "FILLED BY" in table and "WHY EMPTY" in table and "GPM" in table
    here = gpufleet("telemetry", "fields")  # this host: whatever it has, said, never a traceback
    assert here.returncode == 0 and "this node's agent" in here.stdout and "Traceback" not in here.stderr


def test_unknown_sources_and_both_choices_are_clear_errors() -> None:
    bad = gpufleet("telemetry", "fields", "--sources", "nvml,dcgmi")
    assert bad.returncode != 0 and "unknown source(s): dcgmi" in bad.stderr and "dcgm" in bad.stderr
    both = gpufleet("telemetry", "fields", "--sim", "--sources", "nvml")
    assert both.returncode != 0 and "--sim" in both.stderr
