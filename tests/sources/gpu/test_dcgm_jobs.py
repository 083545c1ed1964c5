"""DCGM's job statistics (sources/gpu/dcgm_jobs.py) through the DCGM source, on recorded host-engine answers: dcgmi
stats of a job (DCGM #305) and a blank DCGM 3.x summary (DCGM #93), replayed through the double of DCGM's bindings."""

from __future__ import annotations

from tests.sources.gpu.test_dcgm import gauge, source


def test_job_statistics_follow_the_slurm_job_map() -> None:
    dcgm, frame, engine = source("job_stats_dcgm4")
    frame.set_jobs(0, ("4242",))
    dcgm.collect(frame)
    labels = {"gpu": "0", "UUID": "GPU-00000000-0000-0000-0000-000000000000", "hpc_job": "4242"}
    assert engine.jobs_started == {"4242": 101}  # type: ignore[attr-defined]
    assert gauge(frame, "gpufleet_dcgm_job_energy_joules", **labels) == 10747.0
    assert gauge(frame, "gpufleet_dcgm_job_sm_utilization_ratio", **labels) == 1.0
    assert gauge(frame, "gpufleet_dcgm_job_max_memory_used_bytes", **labels) == 543162368.0
    frame.set_jobs(0, ())
    dcgm.collect(frame)
    assert engine.jobs_stopped == ["4242"]  # type: ignore[attr-defined]
    assert gauge(frame, "gpufleet_dcgm_job_energy_joules", **labels) is None


def test_blank_job_statistics_of_dcgm_3_are_left_out() -> None:
    dcgm, frame, _ = source("job_stats_blank_dcgm3")
    frame.set_jobs(0, ("952404",))
    dcgm.collect(frame)
    labels = {"gpu": "0", "UUID": "GPU-00000000-0000-0000-0000-000000000000", "hpc_job": "952404"}
    assert gauge(frame, "gpufleet_dcgm_job_energy_joules", **labels) is None
    assert gauge(frame, "gpufleet_dcgm_job_sm_utilization_ratio", **labels) is None
    assert gauge(frame, "gpufleet_dcgm_job_max_memory_used_bytes", **labels) == 0.0
