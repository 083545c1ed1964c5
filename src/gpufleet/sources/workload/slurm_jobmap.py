"""Which Slurm jobs use which GPU, from the directory a Slurm prolog keeps (deploy/slurm/prolog.sh).

The format is dcgm-exporter's HPC job mapping: one file per GPU, named by its index ("0") or, for a MIG instance, by
the GPU's index and the GPU instance id ("2.0"); each line of a file is the id of a job using that GPU. Other names
(the prolog's lock and temporary files, anything else) are not mapping files and are passed over, as dcgm-exporter
does. A mapping file that cannot be read or holds something that is not a job id is reported and skipped: one bad
file never costs the other GPUs their jobs.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

from gpufleet.errors import BackendError
from gpufleet.model.attribution import Allotment, Allotments, Attribution

log = logging.getLogger("gpufleet.agent")

MAPPING_NAME = re.compile(r"^\d+(?:\.\d+)?$")
MAX_FILE_BYTES = 64 * 1024  # thousands of job ids; more is not a mapping file
MAX_JOB_ID = 128  # a label value, not a document
_JOB_ID = re.compile(r"^[\x21-\x7e]+$")  # printable, no spaces: 1234, 1234_7 (array), 1234+0 (heterogeneous)


@dataclass(frozen=True, slots=True)
class JobMap:
    """The jobs on each GPU ("0", or "2.0" for a MIG instance), and what could not be read."""

    jobs: dict[str, tuple[str, ...]]
    problems: tuple[str, ...] = ()


def parse_job_file(text: str) -> tuple[tuple[str, ...], list[str]]:
    """One mapping file's job ids, in file order and each once (blank lines and surrounding spaces dropped), and a
    note for each line that is not a job id."""
    jobs: list[str] = []
    problems: list[str] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        job = raw.strip()
        if not job:
            continue
        if len(job) > MAX_JOB_ID or not _JOB_ID.match(job):
            problems.append(f"line {lineno} is not a job id: {job[:40]!r}")
            continue
        if job not in jobs:
            jobs.append(job)
    return tuple(jobs), problems


def read_job_map(directory: Path) -> JobMap:
    """Read the mapping directory. A directory that does not exist yet means no job has started (the prolog creates
    it); one that cannot be listed is a BackendError."""
    try:
        entries = sorted(directory.iterdir())
    except FileNotFoundError:
        return JobMap({})
    except OSError as exc:
        raise BackendError(
            f"cannot read the job-map directory {directory}: {exc.strerror or exc}",
            fix="let the agent's user read it (the prolog writes it world-readable), or fix --job-map-dir",
        ) from None
    jobs: dict[str, tuple[str, ...]] = {}
    problems: list[str] = []
    for path in entries:
        if not MAPPING_NAME.match(path.name):
            continue
        try:
            if not path.is_file():
                continue
            with path.open("rb") as fh:
                data = fh.read(MAX_FILE_BYTES + 1)
        except OSError as exc:
            problems.append(f"{path}: cannot read: {exc.strerror or exc}")
            continue
        if len(data) > MAX_FILE_BYTES:
            problems.append(f"{path}: larger than {MAX_FILE_BYTES} bytes, skipped")
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            problems.append(f"{path}: not text, skipped")
            continue
        found, bad = parse_job_file(text)
        problems.extend(f"{path}: {note}" for note in bad)
        if found:
            jobs[path.name] = found
    return JobMap(jobs, tuple(problems))


class JobMapAllotments:
    """The job map as per-workload attribution reads it: each job holds the GPU (or MIG instance) its file names,
    and several jobs in one file share it (Slurm's gres/shard, or MPS). Whose each process is comes from its cgroup
    (`job_<id>` in the path), so shared GPUs split exactly."""

    name = "job-map"

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._reported: set[str] = set()

    def read(self) -> Allotments:
        mapping = read_job_map(self.directory)
        for problem in sorted(set(mapping.problems) - self._reported):
            log.warning("job map: %s", problem)
        self._reported = set(mapping.problems)
        return Allotments(
            tuple(
                Allotment(key, Attribution(hpc_job=job), resource="gres/gpu")
                for key, jobs in mapping.jobs.items()
                for job in jobs
            )
        )
