"""Legacy rocm-smi: the three Concise Info layouts, --json and --showmetrics, on real captured outputs
(tests/captures/amd, each with its .source.txt), and hand-written malformed inputs for the errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.errors import ParseError
from gpufleet.parsers.amd.amd_smi import AmdSmiReport
from gpufleet.parsers.amd.rocm_smi import parse_rocm_smi
from tests.conftest import CAPTURES

DATA = CAPTURES / "amd"
FILES = sorted(p for p in DATA.glob("rocm_smi_*") if not p.name.endswith(".source.txt"))


def _parse(name: str) -> AmdSmiReport:
    return parse_rocm_smi((DATA / name).read_text(encoding="utf-8"), source=name)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_capture_reads_whole_and_names_its_source(path: Path) -> None:
    assert path.with_name(path.name.rsplit(".", 1)[0] + ".source.txt").is_file()
    report = parse_rocm_smi(path.read_text(encoding="utf-8"), source=path.name)
    assert report.tool == "rocm-smi" and report.gpus and report.problems == []


def test_every_layout_and_format_has_a_capture() -> None:
    formats = {_parse(p.name).format for p in FILES}
    assert formats == {"table", "json", "metrics", "ras"} and len(FILES) >= 5


def test_rocm_61_layout_mi300x_under_load() -> None:
    (gpu,) = _parse("rocm_smi_concise_mi300x_loaded.txt").gpus
    assert (gpu.node_id, gpu.device_id, gpu.guid) == (1, "0x74b5", "21947")
    assert (gpu.temp_hotspot_c, gpu.temp_edge_c) == (67.0, None)  # the header says (Junction)
    assert (gpu.power_w, gpu.power_cap_w, gpu.gfx_activity_pct, gpu.vram_used_pct) == (737, 750, 100, 49)
    assert (gpu.gfx_clock_mhz, gpu.mem_clock_mhz) == (1280, 1100)
    assert (gpu.partition, gpu.partition_id) == ("SPX_NPS1", 0)


def test_cpx_partitions_are_one_row_each_with_their_partition_id() -> None:
    gpus = _parse("rocm_smi_concise_mi300x_cpx_blog.txt").gpus
    assert len(gpus) == 16 and {g.partition for g in gpus} == {"CPX_NPS1"}
    assert [g.partition_id for g in gpus] == list(range(8)) * 2
    assert {g.model for g in gpus} == {"mi300x"}  # by device id 0x74a1
    second = gpus[8:]
    assert {g.gfx_activity_pct for g in second} == {11.0} and {g.vram_used_pct for g in second} == {22.0}
    assert gpus[15].power_w == 335 and gpus[15].mem_clock_mhz == 1300
    assert len({g.guid for g in gpus}) == 16


def test_rocm_60_layout_takes_the_name_from_the_second_line() -> None:
    gpus = _parse("rocm_smi_concise_mi300x_x4_jax.txt").gpus
    assert [g.market_name for g in gpus] == ["AMD Instinct MI300X"] * 4 and {g.model for g in gpus} == {"mi300x"}
    assert [g.power_w for g in gpus] == [170, 176, 177, 176] and {g.partition for g in gpus} == {"SPX_NPS1"}


def test_mi250x_second_gcd_has_no_power_reading() -> None:
    gpus = _parse("rocm_smi_concise_mi250x_lumi.txt").gpus
    assert len(gpus) == 8 and gpus[0].market_name == "AMD INSTINCT MI200 ("
    assert [g.power_w for g in gpus[:2]] == [292.0, None] and [g.power_cap_w for g in gpus[:2]] == [500.0, None]
    assert gpus[0].temp_edge_c == 55 and gpus[0].temp_hotspot_c is None  # (Edge)
    assert gpus[5].gfx_activity_pct == 2 and gpus[0].partition == ""  # N/A, N/A


def test_rocm_5_layout() -> None:
    (gpu,) = _parse("rocm_smi_concise_legacy_mi250_blog.txt").gpus
    assert (gpu.temp_edge_c, gpu.power_w, gpu.power_cap_w, gpu.gfx_activity_pct, gpu.vram_used_pct) == (
        50, 352, 560, 100, 17,
    )  # fmt: skip


def test_allinfo_json_mi250() -> None:
    report = _parse("rocm_smi_allinfo_mi250_wandb.json")
    assert report.driver_version == "6.2.4"
    (gpu,) = report.gpus
    assert gpu.market_name == "AMD INSTINCT MI250 (MCM) OAM AC MBA" and gpu.model == "mi250x"
    assert (gpu.pci, gpu.serial, gpu.device_id) == ("0000:2f:00", "PCB052715-0065", "0x740c")
    assert (gpu.temp_edge_c, gpu.temp_hotspot_c, gpu.temp_mem_c) == (32, 35, 43)
    assert gpu.temp_hbm_c == [43, 39, 42, 43]
    assert (gpu.power_w, gpu.power_cap_w, gpu.gfx_clock_mhz, gpu.mem_clock_mhz) == (89, 560, 800, 1600)
    assert gpu.pcie_replay_count == 147
    assert gpu.energy_j == pytest.approx(962825096.3, rel=1e-6)  # "Accumulated Energy (uJ)"


def test_allinfo_json_radeon_without_sensors() -> None:
    (gpu,) = _parse("rocm_smi_allinfo_rx6600.json").gpus
    assert gpu.market_name.startswith("Navi 23") and gpu.gfx_target == "gfx1032" and gpu.guid == "17901"
    assert gpu.vram_used_pct == 1 and gpu.power_w is None and gpu.uuid is None  # "Unique ID": "N/A"


def test_showmetrics_lines() -> None:
    (gpu,) = _parse("rocm_smi_showmetrics_rx9070_ollama.txt").gpus
    assert (gpu.temp_edge_c, gpu.temp_hotspot_c, gpu.temp_mem_c) == (41, 43, 62)
    assert (gpu.gfx_activity_pct, gpu.umc_activity_pct, gpu.power_w) == (3, 4, 20)
    assert (gpu.gfx_clock_mhz, gpu.mem_clock_mhz, gpu.pcie_width, gpu.pcie_speed_gts) == (41, 96, 16, 16.0)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "is empty"),
        ('{"card0": ', "not valid JSON"),
        ('["card0"]', "expected"),
        ('{"system": {"Driver version": "6.2.4"}}', 'no "cardN" object'),
        ('{"card0": "N/A"}', "not an object"),
        ("WARNING: No AMD GPUs specified\n", "found no AMD GPU"),
        ("Device  Node  IDs  Temp  Power\n==========\n0  1  strange row\n", "not a Concise Info row"),
        ("GPU  Temp (DieEdge)  AvgPwr  SCLK\n=====\n", "lists no GPU"),
        ("hello world\n", "neither a Concise Info table"),
    ],
)
def test_malformed_input_is_one_clear_error(text: str, message: str) -> None:
    # hand-written malformed inputs, not captures
    with pytest.raises(ParseError, match=message) as info:
        parse_rocm_smi(text, source="bad.txt")
    assert info.value.fix


def test_showrasinfo_reads_each_blocks_counts_where_its_ecc_is_on() -> None:
    """rocm_smi.py showRasInfo: a block whose ECC is DISABLED, or with no counts, is listed as off, not as zero."""
    report = _parse("rocm_smi_showrasinfo_mi50_arkprojects.txt")
    assert report.format == "ras" and [g.index for g in report.gpus] == [0, 1]
    gpu = report.gpus[0]
    assert set(gpu.ecc_blocks) == {"UMC", "SDMA", "GFX", "MMHUB", "PCIE_BIF", "HDP"}
    assert {c.uncorrectable for c in gpu.ecc_blocks.values()} == {0}
    assert "XGMI_WAFL" in gpu.ecc_blocks_off and "ATHUB" in gpu.ecc_blocks_off


def test_ras_tables_join_the_concise_table_of_the_same_gpus() -> None:
    concise = (DATA / "rocm_smi_concise_mi300x_loaded.txt").read_text(encoding="utf-8")
    ras = "GPU[0]:\tRAS INFO\n         Block       Status    Correctable Error  Uncorrectable Error\n" \
          "           UMC        ENABLED                  3                    2\n" \
          "          SDMA       DISABLED            3145680              3145680\n" + "_" * 40 + "\n"  # fmt: skip
    (gpu,) = parse_rocm_smi(concise + ras, "c").gpus
    assert gpu.temp_hotspot_c == 67.0 and gpu.ecc_blocks["UMC"].uncorrectable == 2 and gpu.ecc_blocks_off == ["SDMA"]
