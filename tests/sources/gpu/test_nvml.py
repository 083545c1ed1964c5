"""NvmlSource's NVLink reading per link, replayed from recorded nvidia-smi answers through nvidia-ml-py's own module
(tests/sources/gpu/fake_nvml.py): each link's error counters and state in DCGM's link-scoped fields, labelled as
dcgm-exporter labels its link entities, with the per-GPU totals as before."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpufleet.sources.gpu.nvml import LINK_REFRESH_S, LINK_STATE, NvmlSource
from gpufleet.telemetry.exposition.dcgm import render
from gpufleet.telemetry.fields import load_field_catalog, switched
from gpufleet.telemetry.frame import MetricFrame
from tests.sources.gpu.fake_nvml import FakeGpu, FakeNvml, links_from_capture, remapped_from_capture

CAPTURES = Path(__file__).parents[2] / "captures"
H100 = "NVIDIA H100 80GB HBM3"
PER_LINK = "+DCGM_FI_DEV_NVLINK_*_PER_LINK_TOTAL,+DCGM_FI_DEV_NVLINK_GET_STATE"  # what GPUFLEET_FIELDS would say


def _capture(name: str) -> str:
    return (CAPTURES / name).read_text()


def _stas00() -> tuple[str, str]:
    text = _capture("nvml_state/nvlink_errors_h100_stas00.txt")
    errors, _, status = text.partition("$ nvidia-smi nvlink --status\n")
    return errors, "\n".join(line for line in status.splitlines() if "[...]" not in line)


def _gpu(index: int, **kw: object) -> FakeGpu:
    return FakeGpu(f"GPU-{index:08x}-0000-0000-0000-000000000000", H100, minor=index, temperature_c=40.0,
                   bus=f"00000000:{0x18 + index:02X}:00.0", **kw)  # type: ignore[arg-type]  # fmt: skip


def test_each_link_of_a_healthy_h100_is_read_with_its_counters_and_state() -> None:
    links = links_from_capture(*_stas00())
    source = NvmlSource("node-a", FakeNvml([_gpu(0, links=links)]))
    frame = source.new_frame()
    source.collect(frame)
    assert frame.link(LINK_STATE)[0].tolist() == [1.0] * 18
    assert frame.link("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_PER_LINK_TOTAL")[0].tolist() == [0.0] * 18
    assert frame.gpu("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL")[0] == 0


def test_a_bridged_pcie_card_has_its_inactive_links_at_zero_and_no_counters_for_them() -> None:
    status = _capture("nvlink_status_h100_pcie_bridged_hpe.txt")
    errors, _ = _stas00()
    links = links_from_capture(errors, status)
    links[2].crc_flit, links[2].recovery = 40, 1
    source = NvmlSource("node-a", FakeNvml([_gpu(0, links=links)]))
    default = source.new_frame()
    source.collect(default)
    assert "nvlink=" not in render(default)  # read for the detector, exported only where a site switches them on
    frame = MetricFrame(default.entities, catalog=switched(load_field_catalog(), PER_LINK).enabled())
    source.collect(frame)
    assert np.array_equal(frame.link_values, default.link_values, equal_nan=True)
    state = frame.link(LINK_STATE)[0]
    assert [k for k in range(18) if state[k] == 0] == [4, 5, 10, 11, 16, 17]  # the capture's six <inactive> links
    flit = frame.link("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_PER_LINK_TOTAL")[0]
    assert np.isnan(flit[4]) and flit[2] == 40
    # the per-GPU totals are the sums over the active links, as before
    assert frame.gpu("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL")[0] == 40
    assert frame.gpu("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL")[0] == 1
    text = render(frame)
    assert (
        'DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_PER_LINK_TOTAL{nvlink="2",gpu="0",gpu_uuid="GPU-00000000-0000-0000-0000-'
        '000000000000",pci_bus_id="00000000:18:00.0",device="nvidia0",model_name="NVIDIA H100 80GB HBM3",'
        'hostname="node-a"} 40\n' in text
    )
    assert 'DCGM_FI_DEV_NVLINK_GET_STATE{nvlink="4",' in text
    assert 'DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_PER_LINK_TOTAL{nvlink="4",' not in text


def _link_calls(nvml: FakeNvml) -> int:
    calls = sum(1 for fn, _ in nvml.calls if fn.startswith("nvmlDeviceGetNvLink"))
    nvml.calls.clear()
    return calls


def test_the_links_are_walked_again_only_when_their_totals_move_or_the_last_walk_is_old() -> None:
    links = links_from_capture(*_stas00())
    nvml = FakeNvml([_gpu(0, links=links)])
    source = NvmlSource("node-a", nvml)
    now = [100.0]
    source.clock = lambda: now[0]
    frame = source.new_frame()
    source.collect(frame)
    assert _link_calls(nvml) == 18 * 5  # a state and four counters a link
    flit = "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_PER_LINK_TOTAL"

    now[0] += 1.0  # nothing moved: the last walk's readings stand, no link is asked
    source.collect(frame)
    assert _link_calls(nvml) == 0
    assert frame.link(LINK_STATE)[0].tolist() == [1.0] * 18
    assert frame.link(flit)[0].tolist() == [0.0] * 18

    now[0] += 1.0  # a counter climbs on link 7: NVML's total moves, so the link is named in this collection
    links[7].crc_flit = 12
    source.collect(frame)
    assert _link_calls(nvml) == 18 * 5
    assert frame.link(flit)[0][7] == 12
    assert frame.gpu("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL")[0] == 12

    now[0] += 1.0  # link 3 goes down without an error: seen once the last walk is LINK_REFRESH_S old
    links[3].active = False
    source.collect(frame)
    assert frame.link(LINK_STATE)[0][3] == 1
    now[0] += LINK_REFRESH_S
    source.collect(frame)
    assert frame.link(LINK_STATE)[0][3] == 0
    assert np.isnan(frame.link(flit)[0][3])


def test_a_driver_without_nvml_link_totals_has_its_links_walked_every_collection() -> None:
    import pynvml

    gpu = _gpu(0, failing={"nvmlDeviceGetFieldValues": pynvml.NVML_ERROR_NOT_SUPPORTED})
    nvml = FakeNvml([gpu])
    source = NvmlSource("node-a", nvml)
    frame = source.new_frame()
    source.collect(frame)
    _link_calls(nvml)
    source.collect(frame)
    assert _link_calls(nvml) == 18 * 5
    assert frame.link(LINK_STATE)[0].tolist() == [1.0] * 18


def test_a_gpu_without_nvlink_has_no_link_series() -> None:
    source = NvmlSource("node-a", FakeNvml([_gpu(0, links=[])]))
    frame = source.new_frame()
    source.collect(frame)
    assert np.isnan(frame.link_values).all()
    assert "nvlink=" not in render(frame)


def test_a_pending_row_remap_is_read_each_collection() -> None:
    remapped = remapped_from_capture(_capture("nvml_state/remapped_rows_pending_gpud80.txt"))
    source = NvmlSource("node-a", FakeNvml([_gpu(0, remapped=remapped)]))
    frame = source.new_frame()
    source.collect(frame)
    assert frame.gpu("DCGM_FI_DEV_ROW_REMAP_PENDING")[0] == 1
    assert frame.gpu("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS")[0] == 4
    assert frame.gpu("DCGM_FI_DEV_ROW_REMAP_FAILURE")[0] == 0


@pytest.mark.parametrize("mig", [False, True])
def test_links_are_written_once_per_gpu(mig: bool) -> None:
    from tests.sources.gpu.fake_nvml import FakeMig

    gpu = _gpu(0)
    if mig:
        gpu.mig_mode = (1, 1)
        gpu.migs = [FakeMig(k, k + 1, 0, f"MIG-{k}", "3g.40gb", f"{H100} MIG 3g.40gb", 1.0, 40_000.0) for k in (0, 1)]
    source = NvmlSource("node-a", FakeNvml([gpu]))
    frame = source.new_frame()
    source.collect(frame)
    written = ~np.isnan(frame.link(LINK_STATE)).all(axis=1)
    assert written.tolist() == [True] + [False] * (len(frame.entities) - 1)
