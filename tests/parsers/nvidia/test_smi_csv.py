"""`nvidia-smi --query-gpu` CSV into the records `-q` gives: with and without header and units, the command line
naming the columns of a headerless paste, NVML's error strings kept as unreadable values.

Fixtures (tests/captures/nvsmi_query_gpu/), written in the layout nvidia-smi 535-580 prints (`, ` between cells, the
header's property names from `nvidia-smi --help-query-gpu`), no real capture of this view being stored yet:
- remap_pending_recovery.txt: GPU 1 with the values a public A800 inventory test quotes from `nvidia-smi -q -x`
  (dram_uncorrectable 32, remapped_row_pending Yes, gpu_recovery_action "Drain and Reset").
- throttle_noheader_nounits.txt: `--format=csv,noheader,nounits` below its command line, pre-R535
  clocks_throttle_reasons.* names; GPU 1 held at 382 MHz by the external power brake (bits 0x8|0x80 of nvml.h's
  nvmlClocksThrottleReason*), as the public Dell C4130 throttling write-up shows it in `-q`, and its link at x8.
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
