"""amd-smi list/static/metric/partition, text and --json, on real captured outputs (tests/captures/amd, each
with its .source.txt), and on hand-written malformed inputs for the errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.errors import ParseError
from gpufleet.parsers.amd.amd_smi import AmdSmiReport, parse_amd_smi
from tests.conftest import CAPTURES

DATA = CAPTURES / "amd"
# the default view (`amd-smi` alone) has its own module and tests (test_amd_smi_default.py)
FILES = sorted(
    p for p in DATA.glob("amd_smi_*") if not p.name.endswith(".source.txt") and not p.name.startswith("amd_smi_default")
)


def _parse(name: str) -> AmdSmiReport:
    return parse_amd_smi((DATA / name).read_text(encoding="utf-8"), source=name)


def test_there_are_real_captures_of_every_mode() -> None:
    names = {p.name for p in FILES}
    assert len(names) >= 8
    assert {n.split("_")[2] for n in names} >= {"list", "static", "metric", "partition"}
    assert any(n.endswith(".json") for n in names) and any(n.endswith(".txt") for n in names)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_capture_reads_whole_and_names_its_source(path: Path) -> None:
    source = path.with_name(path.name.rsplit(".", 1)[0] + ".source.txt")
    assert source.is_file() and "Source:" in source.read_text(encoding="utf-8")
    report = parse_amd_smi(path.read_text(encoding="utf-8"), source=path.name)
    assert report.gpus and report.problems == []
    assert [g.index for g in report.gpus] == sorted({g.index for g in report.gpus})


def test_mi300x_list_text_gives_bdf_and_uuid_per_gpu() -> None:
    report = _parse("amd_smi_list_mi300x_blog.txt")
    assert [(g.index, g.pci, g.uuid) for g in report.gpus] == [
        (0, "0000:05:00", "afff74a1-0000-1000-8054-e92b0a5d57c8"),
        (1, "0000:26:00", "0aff74a1-0000-1000-805b-ce698de95724"),
        (2, "0000:46:00", "97ff74a1-0000-1000-8065-fa81273af9ce"),
    ]


def test_static_limit_section_gives_the_hotspot_and_memory_temperature_limits() -> None:
    """`amd-smi static`'s LIMIT: SLOWDOWN_ (amdsmi CRITICAL) and SHUTDOWN_ (EMERGENCY) temperatures; N/A is none."""
    (gpu,) = _parse("amd_smi_static_mi300a_docs.txt").gpus
    assert (gpu.hotspot_slowdown_c, gpu.hotspot_shutdown_c, gpu.mem_slowdown_c, gpu.mem_shutdown_c) == (
        100,
        110,
        105,
        115,
    )
    (json_gpu,) = _parse("amd_smi_static_rx6600.json").gpus
    assert (json_gpu.hotspot_slowdown_c, json_gpu.hotspot_shutdown_c) == (110, 115)


def test_mi300a_static_text_reads_partition_limits_and_vram() -> None:
    (gpu,) = _parse("amd_smi_static_mi300a_docs.txt").gpus
    assert (gpu.market_name, gpu.device_id, gpu.gfx_target, gpu.compute_units) == ("MI300A", "0x74a0", "gfx942", 228)
    assert (gpu.compute_partition, gpu.memory_partition, gpu.partition_id, gpu.partition) == (
        "SPX",
        "NPS1",
        0,
        "SPX_NPS1",
    )
    assert gpu.vram_total_mib == 64289 and gpu.power_cap_w == 550
    assert (gpu.pcie_max_width, gpu.pcie_max_speed_gts, gpu.pcie_max_gen) == (16, 32.0, 5)
    assert gpu.driver_version == "6.9.0-rc5+" and gpu.serial == "0x7E8F7E20764E2714"
    assert gpu.model is None  # the catalog has no MI300A


def test_static_names_map_to_the_catalog_by_name_or_device_id() -> None:
    (mi350,) = _parse("amd_smi_static_mi350x_pr2987.txt").gpus
    assert mi350.market_name == "AMD Instinct MI350X" and mi350.gfx_target == "gfx950" and mi350.compute_units == 128
    (mi300,) = _parse("amd_smi_static_mi300x_blog.txt").gpus
    assert mi300.market_name == "MI300X-O" and mi300.model == "mi300x"  # the name is unknown, device id 0x74a1 is


def test_mi300x_metric_text_under_load() -> None:
    (gpu,) = _parse("amd_smi_metric_mi300x_blog.txt").gpus
    assert gpu.gfx_activity_pct == 100 and gpu.umc_activity_pct == 0 and gpu.mm_activity_pct is None
    assert gpu.power_w == 234 and gpu.throttle_status == "UNTHROTTLED"
    assert gpu.gfx_clock_mhz == pytest.approx((2102 + 2101 + 2107) / 3, abs=0.1)  # the mean over the XCDs shown


def test_a_list_wrapped_over_lines_does_not_break_the_block() -> None:
    (gpu,) = _parse("amd_smi_metric_radeon_powerjoular67.txt").gpus
    assert (gpu.gfx_activity_pct, gpu.umc_activity_pct, gpu.power_w, gpu.gfx_clock_mhz) == (0, 1, 20, 14)


def test_metric_json_reads_every_section() -> None:
    report = _parse("amd_smi_metric_rx6600.json")
    assert report.format == "json"
    (gpu,) = report.gpus
    assert (gpu.temp_edge_c, gpu.temp_hotspot_c, gpu.temp_mem_c) == (36, 37, 32)
    assert (gpu.vram_total_mib, gpu.vram_used_mib, gpu.vram_free_mib) == (8176, 202, 7974)
    assert (gpu.gfx_clock_mhz, gpu.mem_clock_mhz, gpu.power_w, gpu.energy_j) == (800, 541, 6, 0.0)
    assert (gpu.pcie_width, gpu.pcie_speed_gts, gpu.pcie_gen) == (8, 16.0, 4)
    assert (gpu.ecc.correctable, gpu.ecc.uncorrectable, gpu.ecc.deferred) == (0, 0, 0) and gpu.ecc_blocks == {}
    assert gpu.pcie_replay_count is None  # "N/A" is no value, not zero


def test_static_json_and_the_cut_market_name() -> None:
    (gpu,) = _parse("amd_smi_static_rx6600.json").gpus
    assert gpu.market_name == "Navi 23 [Radeon RX 6600/6600 XT" and gpu.device_id == "0x73ff"
    assert gpu.bdf == "0000:0b:00.0" and gpu.driver_version == "7.0.0-3-pve"
    assert gpu.power_cap_w == 100 and gpu.vram_total_mib == 8176 and gpu.pcie_max_speed_gts == 16
    assert gpu.compute_partition is None and gpu.partition == ""


def test_partition_table_with_debug_lines() -> None:
    report = _parse("amd_smi_partition_mi300x_4477.txt")
    assert report.format == "partition"
    assert [(g.index, g.memory_partition, g.compute_partition, g.partition_id) for g in report.gpus] == [
        (i, "NPS1", None, None) for i in range(4)
    ]


def test_list_static_and_metric_concatenated_merge_per_gpu() -> None:
    text = "\n".join(
        (DATA / n).read_text(encoding="utf-8")
        for n in ("amd_smi_list_mi300x_blog.txt", "amd_smi_static_mi300x_blog.txt", "amd_smi_metric_mi300x_blog.txt")
    )
    report = parse_amd_smi(text)
    gpu0 = report.gpus[0]
    assert (gpu0.uuid, gpu0.model, gpu0.power_w, gpu0.pcie_max_gen) == (
        "afff74a1-0000-1000-8054-e92b0a5d57c8", "mi300x", 234, 5,
    )  # fmt: skip
    assert len(report.gpus) == 3


def test_gpu_data_wrapper_and_per_block_ecc() -> None:
    # hand-written in the shape ROCm 6.4+ prints: the list under "gpu_data", ECC counted per RAS block
    text = (
        '{"gpu_data": [{"gpu": 0, "ecc": {"total_correctable_count": 3, "total_uncorrectable_count": 1,'
        ' "total_deferred_count": 0}, "ecc_blocks": {"UMC": {"correctable_count": 3, "uncorrectable_count": 1,'
        ' "deferred_count": 0}, "GFX": {"correctable_count": 0, "uncorrectable_count": 0, "deferred_count": 0}},'
        ' "pcie": {"replay_count": 12, "l0_to_recovery_count": 2}, "some_future_key": {"x": 1}}]}'
    )
    (gpu,) = parse_amd_smi(text).gpus
    assert (gpu.ecc.correctable, gpu.ecc.uncorrectable) == (3, 1)
    assert gpu.ecc_blocks["UMC"].uncorrectable == 1 and gpu.ecc_blocks["GFX"].correctable == 0
    assert (gpu.pcie_replay_count, gpu.pcie_recovery_count) == (12, 2)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "is empty"),
        ("   \n", "is empty"),
        ('[{"gpu": 0, ', "not valid JSON"),
        ('{"gpu_data": "N/A"}', "expected a list"),
        ('[{"gpu": "zero"}]', "not an index"),
        ('[{"cpu": 0}]', "no GPU entry"),
        ("GPU: 0\n    USAGE\n        GFX_ACTIVITY: 1 %\n", "not a `KEY: value` line"),
        ("GPU: first\n    BDF: 0000:05:00.0\n", "not an index"),
        ("ERROR: Unable to detect any GPU devices, check amdgpu version and module status\n", "amd-smi said: ERROR"),
        ("CPU: 0\n    SMU:\n        FW_VERSION: 85.90.0\n", "no `GPU: N` block"),
        ("CURRENT_PARTITION:\nMEMORY  ACCELERATOR_TYPE\nNPS1    SPX\n", "no GPU_ID column"),
        ("CURRENT_PARTITION:\nGPU_ID  MEMORY\n0  NPS1  extra\n", "3 cells under a 2-column header"),
    ],
)
def test_malformed_input_is_one_clear_error(text: str, message: str) -> None:
    # hand-written malformed inputs, not captures
    with pytest.raises(ParseError, match=message) as info:
        parse_amd_smi(text, source="bad.txt")
    assert info.value.fix and "amd-smi" in info.value.fix


def test_a_value_that_does_not_read_is_noted_not_fatal() -> None:
    # hand-written: a number field holding text
    report = parse_amd_smi("GPU: 0\n    USAGE:\n        GFX_ACTIVITY: busy %\n    POWER:\n        SOCKET_POWER: 99 W\n")
    assert report.gpus[0].gfx_activity_pct is None and report.gpus[0].power_w == 99
    assert report.problems == ["amd-smi: GPU 0: gfx_activity_pct 'busy %' does not read"]
