"""The twin's windowed counts read as dcgm-exporter's: DCGM_EXP_CLOCK_EVENTS_COUNT counts, per reason, the samples
within the window that had it set (NVIDIA/dcgm-exporter 4.5.3-4.8.2, internal/pkg/collector/expcollector.go
getMetrics), so it grows while a reason holds and falls as its samples leave the window, like the Xid count."""

from __future__ import annotations

import numpy as np

from gpufleet.catalog.clock_events import clock_event_bit
from gpufleet.sim.source import TwinSource
from gpufleet.telemetry.exposition.dcgm import render
from tests.twins import small_twin

HW_THERMAL = clock_event_bit("hw_thermal")
IDLE = clock_event_bit("gpu_idle")


def _counts(source: TwinSource, at: float, gpu0_bits: int) -> tuple[float, float]:
    """Collect once at twin time `at` with GPU 0's clock-event bits set to `gpu0_bits` (the others idle); GPU 0's
    hw_thermal and gpu_idle counts."""
    twin = source.twin
    twin.time = at
    twin.gpus.clock_events[source.gpu_idx] = IDLE
    twin.gpus.clock_events[source.gpu_idx[0]] = gpu0_bits
    frame = source.new_frame()
    source.collect(frame)
    return float(frame.clock_event_row("hw_thermal")[0]), float(frame.clock_event_row("gpu_idle")[0])


def test_clock_event_counts_are_samples_within_the_window_not_the_reason_now() -> None:
    twin = small_twin(nodes=1, job_nodes=0)
    source = TwinSource(twin, "n-000", window_s=60.0)
    assert _counts(source, 0.0, HW_THERMAL) == (1, 0)
    assert _counts(source, 10.0, HW_THERMAL) == (2, 0)
    assert _counts(source, 10.0, HW_THERMAL | IDLE) == (2, 1)  # a second reading at the same instant replaces it
    assert _counts(source, 20.0, IDLE) == (2, 2)  # the reason cleared, its samples are still in the window
    assert _counts(source, 65.0, IDLE) == (1, 3)  # the sample at 0 s left the 60 s window
    assert _counts(source, 75.0, IDLE) == (0, 3)  # and the one at 10 s: 20, 65 and 75 s remain
    assert _counts(source, 200.0, IDLE) == (0, 1)  # the window holds only the newest sample


def test_the_count_is_exported_as_a_gauge_and_only_while_nonzero() -> None:
    twin = small_twin(nodes=1, job_nodes=0)
    source = TwinSource(twin, "n-000", window_s=60.0)
    _counts(source, 0.0, HW_THERMAL)
    _counts(source, 30.0, HW_THERMAL)
    frame = source.new_frame()
    source.collect(frame)  # again at 30 s: the same two samples
    text = render(frame)
    assert "# TYPE DCGM_EXP_CLOCK_EVENTS_COUNT gauge\n" in text
    thermal = [ln for ln in text.splitlines() if ln.startswith("DCGM_EXP_CLOCK_EVENTS_COUNT") and "hw_thermal" in ln]
    assert len(thermal) == 1 and thermal[0].endswith(" 2")
    twin.gpus.alive[source.gpu_idx[0]] = False  # fallen off the bus: no series, as DCGM has no sample of it
    frame = source.new_frame()
    source.collect(frame)
    assert np.isnan(frame.clock_events[:, 0]).all()
