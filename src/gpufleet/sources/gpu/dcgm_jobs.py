"""DCGM's job statistics for the Slurm jobs on a node's GPUs, for the DCGM source (sources/gpu/dcgm.py).

The jobs are the ones the frame's attribution names on each GPU (the Slurm job map). A job seen first starts DCGM's
statistics on a group of its GPUs (dcgmGroupCreate, dcgmWatchJobFields, dcgmJobStartStats, with the job id as
DCGM's job id), is read every collection (dcgmJobGetStats: each GPU's c_dcgmGpuUsageInfo_t summary), and is stopped
and removed (dcgmJobStopStats, dcgmJobRemove, dcgmGroupDestroy) when the job map lets it go; its series go with it.
Per GPU and job: energy, average SM utilization, peak memory, critical Xids, double-bit ECC errors and PCIe replays
as `gpufleet_dcgm_job_*{hpc_job}`. A blank summary value (dcgmvalue.py's DCGM_INT32_BLANK, DCGM_INT64_BLANK and
above: DCGM had no sample) is no series, never a zero.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

from gpufleet.telemetry.frame import MetricFrame

log = logging.getLogger("gpufleet.dcgm")

# dcgmvalue.py: DCGM's blank values start here (DCGM_INT64_IS_BLANK, DCGM_INT32_IS_BLANK)
INT64_BLANK = 0x7FFFFFFFFFFFFFF0
INT32_BLANK = 0x7FFFFFF0


def _int64(value: Any) -> float:
    return math.nan if int(value) >= INT64_BLANK or int(value) < 0 else float(value)


def _int32(value: Any) -> float:
    return math.nan if int(value) >= INT32_BLANK or int(value) < 0 else float(value)


# dcgmJobGetStats' per-GPU summary (c_dcgmGpuUsageInfo_t) -> series, with its conversion
JOB_SERIES: tuple[tuple[str, Callable[[Any], float]], ...] = (
    ("gpufleet_dcgm_job_energy_joules", lambda g: _int64(g.energyConsumed)),  # J (dcgmi stats: "Joules")
    ("gpufleet_dcgm_job_sm_utilization_ratio", lambda g: _int32(g.smUtilization.average) / 100.0),
    ("gpufleet_dcgm_job_max_memory_used_bytes", lambda g: _int64(g.maxGpuMemoryUsed)),
    ("gpufleet_dcgm_job_xid_errors", lambda g: _int32(g.numXidCriticalErrors)),
    ("gpufleet_dcgm_job_ecc_dbe_errors", lambda g: _int32(g.eccDoubleBit)),
    ("gpufleet_dcgm_job_pcie_replays", lambda g: _int64(g.pcieReplays)),
)
JOB_LABEL = "hpc_job"


class DcgmJobStats:
    """The jobs DCGM keeps statistics for on one host-engine connection, each with its group of GPUs."""

    def __init__(
        self,
        bindings: Any,
        handle: Any,
        interval_s: float,
        columns: dict[int, int],
        labels: Callable[..., dict[str, str]],
    ) -> None:
        """`columns`: each DCGM GPU id's frame column; `labels(gpu, **more)`: a GPU's series labels."""
        self.agent, self.structs = bindings.agent, bindings.structs
        self.error = bindings.structs.DCGMError
        self.handle = handle
        self.interval_s = interval_s
        self.columns = columns
        self.labels = labels
        self.jobs: dict[str, Any] = {}  # job id -> its DCGM group

    def collect(self, frame: MetricFrame) -> None:
        jobs: dict[str, set[int]] = {}
        column_gpu = {c: g for g, c in self.columns.items()}
        for column, held in enumerate(frame.jobs[: len(frame.entities)]):
            if column in column_gpu:
                for job in held:
                    jobs.setdefault(job, set()).add(column_gpu[column])
        for job in [j for j in self.jobs if j not in jobs]:
            self._end(frame, job)
        for job, gpus in jobs.items():
            if job not in self.jobs and not self._start(job, gpus):
                continue
            self._read(frame, job)

    def _start(self, job: str, gpus: set[int]) -> bool:
        agent = self.agent
        try:
            group = agent.dcgmGroupCreate(self.handle, self.structs.DCGM_GROUP_EMPTY, f"gpufleet-job-{job}")
            for g in sorted(gpus):
                agent.dcgmGroupAddDevice(self.handle, group, g)
            agent.dcgmWatchJobFields(self.handle, group, int(self.interval_s * 1e6), 3600.0, 0)
            agent.dcgmJobStartStats(self.handle, group, job)
        except self.error as exc:
            log.warning("DCGM: job %s: statistics not started: %s", job, exc)
            return False
        self.jobs[job] = group
        return True

    def _read(self, frame: MetricFrame, job: str) -> None:
        try:
            info = self.agent.dcgmJobGetStats(self.handle, job)
        except self.error as exc:
            log.debug("DCGM: job %s: no statistics yet: %s", job, exc)
            return
        for k in range(min(int(info.numGpus), len(info.gpus))):
            usage = info.gpus[k]
            gpu = int(usage.gpuId)
            if gpu not in self.columns:
                continue
            labels = self.labels(gpu, **{JOB_LABEL: job})
            for name, convert in JOB_SERIES:
                value = convert(usage)
                if math.isnan(value):
                    frame.remove_gauge(name, labels)
                else:
                    frame.set_gauge(name, labels, value)

    def _end(self, frame: MetricFrame, job: str) -> None:
        group = self.jobs.pop(job)
        for name, _ in JOB_SERIES:
            for gpu in self.columns:
                frame.remove_gauge(name, self.labels(gpu, **{JOB_LABEL: job}))
        try:
            self.agent.dcgmJobStopStats(self.handle, job)
            self.agent.dcgmJobRemove(self.handle, job)
            self.agent.dcgmGroupDestroy(self.handle, group)
        except self.error as exc:
            log.debug("DCGM: job %s: not removed: %s", job, exc)
