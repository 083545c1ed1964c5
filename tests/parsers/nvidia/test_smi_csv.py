"""`nvidia-smi --query-gpu` CSV into the records `-q` gives: with and without header and units, the command line
naming the columns of a headerless paste, NVML's error strings kept as unreadable values.

Fixtures (tests/captures/nvsmi_query_gpu/), each with its .source.txt:
- healthy_rtx2060_smc57.txt: a real capture (driver 460.91.03, header with units).
- remap_pending_recovery.txt and throttle_noheader_nounits.txt: written from nvidia-smi's documentation (the layout
  of drivers 535-580 and 450-530, property names from `nvidia-smi --help-query-gpu`), not captured: no public paste
  of these columns with a fault in them was found. Their values are made up.
"""

from __future__ import annotations

import pytest

from gpufleet.errors import ParseError
from gpufleet.parsers.nvidia.smi_csv import header_properties, parse_query_gpu
from tests.conftest import CAPTURES

DATA = CAPTURES / "nvsmi_query_gpu"


def test_a_header_with_units_names_the_columns_and_values_lose_their_units() -> None:
    text = (
        "index, temperature.gpu, memory.used [MiB], power.draw [W], pcie.link.width.current, ecc.mode.current\n"
        "0, 34, 1024 MiB, 61.52 W, 16, Enabled\n"
    )
    (gpu,) = parse_query_gpu(text).gpus
    assert (gpu.index, gpu.temp_c, gpu.memory_used_mib, gpu.power_draw_w) == (0, 34.0, 1024.0, 61.52)
    assert (gpu.pcie_width_current, gpu.ecc_mode_current) == (16, True)


def test_a_real_capture_with_units_reads_each_column() -> None:
    (gpu,) = parse_query_gpu((DATA / "healthy_rtx2060_smc57.txt").read_text()).gpus
    assert (gpu.product_name, gpu.pci, gpu.driver_version) == ("GeForce RTX 2060", "0000:09:00", "460.91.03")
    assert (gpu.clock_graphics_mhz, gpu.max_clock_graphics_mhz, gpu.gpu_util_pct) == (300.0, 2160.0, 20.0)
    assert (gpu.temp_c, gpu.memory_used_mib) == (36.0, 682.0)


def test_memory_health_and_the_recovery_action_read_as_in_q() -> None:
    report = parse_query_gpu((DATA / "remap_pending_recovery.txt").read_text().split("\n", 1)[1])
    healthy, bad = report.gpus
    assert (healthy.recovery_action, healthy.remap_pending, healthy.pci) == ("None", False, "0000:18:00")
    assert (bad.ecc_volatile.dbe_total, bad.remap_uncorrectable, bad.remap_pending) == (32, 3, True)
    assert bad.recovery_action == "Drain and Reset"


def test_the_command_line_names_the_columns_of_noheader_output() -> None:
    report = parse_query_gpu((DATA / "throttle_noheader_nounits.txt").read_text())
    fine, braked = report.gpus
    assert not fine.active_clock_event_reasons
    assert set(braked.active_clock_event_reasons) == {"hw_slowdown", "hw_power_brake_slowdown"}
    assert (braked.clock_sm_mhz, braked.pcie_width_current, braked.pcie_width_max) == (382.0, 8, 16)


def test_nvml_errors_are_unreadable_values_and_na_is_no_value() -> None:
    text = (
        "index, temperature.gpu, power.draw, remapped_rows.pending\n3, [GPU requires reset], [N/A], [Unknown Error]\n"
    )
    (gpu,) = parse_query_gpu(text).gpus
    assert gpu.temp_c is None and gpu.power_draw_w is None and gpu.remap_pending is None
    assert [(v.name, v.kind) for v in gpu.unreadable] == [
        ("temperature/gpu_temp", "reset-required"), ("remapped_rows/remapped_row_pending", "read-error"),
    ]  # fmt: skip


def test_rows_without_a_header_or_command_are_refused_and_a_short_row_is_a_problem() -> None:
    with pytest.raises(ParseError, match="no header"):
        parse_query_gpu("0, 34, 1024\n")
    lenient = parse_query_gpu("index, temperature.gpu\n0, 34\n1\n", strict=False)
    assert len(lenient.gpus) == 1 and "1 values for 2 columns" in lenient.problems[0]


@pytest.mark.parametrize(
    ("line", "names"),
    [
        ("index, name, memory.used [MiB]", ["index", "name", "memory.used"]),
        ("gpu_recovery_action", ["gpu_recovery_action"]),
        ("pid, process_name", None),  # no GPU property: another query
        ("0, 00000000:18:00.0, 34", None),
    ],
)
def test_header_properties(line: str, names: list[str] | None) -> None:
    assert header_properties(line) == names
