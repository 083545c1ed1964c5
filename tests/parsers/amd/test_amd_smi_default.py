"""`amd-smi` alone (the default view, AMD-SMI 26.0.0+ / ROCm 7.0.0+) on real captures (tests/captures/amd, each with
its .source.txt), and malformed inputs for the errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.errors import ParseError
from gpufleet.parsers.amd.amd_smi_default import is_default_view, parse_amd_smi_default, parse_amd_smi_output
from tests.conftest import CAPTURES

DATA = CAPTURES / "amd"
FILES = sorted(p for p in DATA.glob("amd_smi_default_*") if not p.name.endswith(".source.txt"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_capture_reads_whole_and_names_its_source(path: Path) -> None:
    assert path.with_name(path.stem + ".source.txt").is_file()
    report = parse_amd_smi_output(path.read_text(encoding="utf-8"), path.name)
    assert report.format == "default" and report.gpus and report.problems == []


def test_mi300x_rows_give_bdf_index_partition_temperature_uec_power_and_memory() -> None:
    report = parse_amd_smi_default((DATA / "amd_smi_default_mi300x_changelog.txt").read_text(encoding="utf-8"))
    assert len(report.gpus) == 8 and report.driver_version == "6.12.12"
    first, last = report.gpus[0], report.gpus[7]
    assert (first.index, first.bdf, first.pci, first.model) == (0, "0000:0c:00.0", "0000:0c:00", "mi300x")
    assert (first.temp_c, first.ecc.uncorrectable, first.power_w, first.power_cap_w) == (60, 0, 734, 750)
    assert (first.partition, first.gfx_activity_pct, first.umc_activity_pct) == ("SPX_NPS1", 98, 13)
    assert (last.index, last.bdf, last.vram_used_mib, last.vram_total_mib) == (7, "0000:df:00.0", 4976, 196592)


def test_an_igpu_reads_its_n_a_cells_as_missing() -> None:
    (gpu,) = parse_amd_smi_default((DATA / "amd_smi_default_radeon_rocm5902.txt").read_text(encoding="utf-8")).gpus
    assert (gpu.temp_c, gpu.power_w, gpu.power_cap_w, gpu.partition) == (None, None, None, "")
    assert (gpu.ecc.uncorrectable, gpu.vram_used_mib, gpu.vram_total_mib) == (0, 161, 98304)


def test_a_cut_table_and_a_table_without_gpus_are_said() -> None:
    text = (DATA / "amd_smi_default_mi300x_changelog.txt").read_text(encoding="utf-8").splitlines()
    assert is_default_view("\n".join(text))
    with pytest.raises(ParseError, match="first row but not its second"):
        parse_amd_smi_default("\n".join(text[:8]))
    with pytest.raises(ParseError, match="lists no GPU"):
        parse_amd_smi_default("\n".join(text[:7]))
    with pytest.raises(ParseError, match="not a GPU's first row"):
        parse_amd_smi_default("\n".join([*text[:7], "| garbage | more garbage |"]))
