"""deploy/slurm/prolog.sh and epilog.sh under a real slurmd (a second test cluster whose slurm.conf names them), and
the scripts alone for what Slurm cannot set up here (two jobs on one GPU).

The settings file sits beside slurm.conf, the one place of ours that reaches the prolog: slurmd gives it a fresh
environment (SLURM_CONF, SLURMD_NODENAME, SLURM_JOB_ID, SLURM_JOB_GPUS, ...), nothing from its own. It points the
health check of each node at a saved `dcgmi diag` output, `RUN/dcgmi/<node>.txt`, which each test puts in place.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.agent.attribution import AttributionSource
from gpufleet.integrations.slurm.client import expand_index_list
from gpufleet.sources.workload.slurm_jobmap import JobMapAllotments, read_job_map
from gpufleet.telemetry.exposition.config import ExpositionConfig
from gpufleet.telemetry.exposition.dcgm import render
from gpufleet.telemetry.frame import GpuEntity, MetricFrame
from tests.conftest import REPO_ROOT
from tests.slurm_cluster import SlurmCluster, require_slurm

SCRIPTS = REPO_ROOT / "deploy" / "slurm"
DATA = REPO_ROOT / "tests" / "captures"
PASS = DATA / "dcgmi_diag_4x_r2_pass.txt"
UNKNOWN = DATA / "dcgmi_diag_4x_r2_internal_error.txt"  # the diagnostic's own error: Unknown
FAIL = "dcgmi_diag_fail_01_r3_rowremap_stas00.txt"  # in the shared corpus: a GPU with pending row remaps


def gpufleet_command() -> str:
    """The gpufleet entry point of the Python running the tests (the prolog has no PATH of ours)."""
    beside = Path(sys.executable).with_name("gpufleet")
    found = str(beside) if beside.exists() else shutil.which("gpufleet")
    if found is None:
        pytest.fail("no gpufleet entry point beside the test interpreter or on PATH")
    return found


class PrologCluster:
    """A two-node cluster whose slurmd run deploy/slurm/prolog.sh and epilog.sh."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.job_map = root / "job-map"  # one directory per node: the nodes share this host
        self.log_dir = root / "gpufleet-log"
        self.dcgmi = root / "dcgmi"
        self.marks = root / "marks"
        extra = "\n".join(
            [
                f"Prolog={SCRIPTS / 'prolog.sh'}",
                f"Epilog={SCRIPTS / 'epilog.sh'}",
                "PrologFlags=Alloc",
                "PrologEpilogTimeout=120",
            ]
        )
        self.slurm = SlurmCluster(root, nodes=2, extra_conf=extra)

    def start(self) -> None:
        for d in (self.root / "etc", self.dcgmi, self.marks):
            d.mkdir(parents=True, exist_ok=True)
        settings = self.root / "etc" / "gpufleet-slurm.env"
        settings.write_text(
            f"GPUFLEET_JOB_MAP_DIR={self.job_map}/$SLURMD_NODENAME\n"
            f"GPUFLEET_LOG_DIR={self.log_dir}\n"
            f'GPUFLEET_DIAG="{gpufleet_command()} diag -r 1 --node $SLURMD_NODENAME '
            f'--dcgmi-output {self.dcgmi}/$SLURMD_NODENAME.txt -o json"\n'
        )
        settings.chmod(0o644)  # the scripts source it as root only when no one else can write it
        self.slurm.start()

    def stop(self) -> None:
        try:
            self.slurm.runner.run(["scancel", "--full", "-u", "root"])
        finally:
            self.slurm.stop()

    def health(self, node: str, saved_output: Path) -> None:
        """What the health check on `node` will judge from now on."""
        shutil.copyfile(saved_output, self.dcgmi / f"{node}.txt")

    def submit(self, node: str, gpus: int, script: str) -> str:
        out = self.slurm.runner.run(
            ["sbatch", "--parsable", "-w", node, f"--gres=gpu:{gpus}", "-o", "/dev/null", "--wrap", script]
        )
        return out.strip().split(";")[0]

    def job_state(self, job_id: str) -> str:
        jobs = self.slurm.runner.jobs(job_id)
        return jobs[0].state if jobs else "GONE"

    def log(self) -> str:
        path = self.log_dir / "slurm.log"
        return path.read_text() if path.exists() else ""

    def verdict(self, node: str) -> dict[str, object]:
        return json.loads((self.log_dir / f"diag-{node}.json").read_text())  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def cluster() -> Iterator[PrologCluster]:
    require_slurm()
    if not (SCRIPTS / "prolog.sh").stat().st_mode & 0o111:
        pytest.fail("deploy/slurm/prolog.sh is not executable: slurmd could not run it")
    root = Path(tempfile.mkdtemp(prefix="gpufleet-slurm-prolog-"))
    c = PrologCluster(root)
    try:
        c.start()
        yield c
    finally:
        c.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def prolog(cluster: PrologCluster) -> Iterator[PrologCluster]:
    """The cluster, every node passing its health check; no jobs and no drained node left behind."""
    for node in cluster.slurm.nodes:
        cluster.health(node, PASS)
    yield cluster
    cluster.slurm.reset_nodes()


@pytest.mark.real
def test_a_job_has_its_gpus_mapped_while_it_runs_and_unmapped_after(prolog: PrologCluster) -> None:
    slurm = prolog.slurm
    started, release = prolog.marks / "started-a", prolog.marks / "release-a"
    job = prolog.submit("gpu-01", 2, f"touch {started}; while [ ! -e {release} ]; do sleep 0.2; done")
    # the batch script starts once the prolog is done (RUNNING comes earlier, while the prolog still runs)
    slurm.wait_for(started.exists, "the job's script to start", detail=lambda: prolog.job_state(job))
    detail = slurm.runner.run(["scontrol", "-o", "-d", "show", "job", job])
    found = re.search(r"\bGRES=\S*\(IDX:([^)]*)\)", detail)
    assert found, detail
    indices = expand_index_list(found.group(1))
    assert len(indices) == 2

    directory = prolog.job_map / "gpu-01"
    mapping = read_job_map(directory)
    assert mapping.jobs == {str(i): (job,) for i in indices} and mapping.problems == ()
    assert not (prolog.job_map / "gpu-02").exists()
    # and the agent's source puts it on the GPUs' series
    frame = MetricFrame([GpuEntity(i, f"GPU-{i}", "NVIDIA H100 80GB HBM3", "gpu-01") for i in range(8)])
    frame.gpu("DCGM_FI_DEV_GPU_TEMP")[:] = 40
    AttributionSource([JobMapAllotments(directory)]).collect(frame)
    labelled = re.findall(
        r'DCGM_FI_DEV_GPU_TEMP\{gpu="(\d)".*hpc_job="(\d+)"', render(frame, ExpositionConfig(attribution="labels"))
    )
    assert labelled == [(str(i), job) for i in indices]

    release.touch()
    slurm.wait_for(lambda: prolog.job_state(job) in ("COMPLETED", "GONE"), "the job to end")
    slurm.wait_for(lambda: read_job_map(directory).jobs == {}, "the epilog to unmap the job")
    assert f"gpu-01 job {job} epilog: unmapped GPUs" in prolog.log()


@pytest.mark.real
def test_a_failing_health_check_drains_the_node_and_requeues_the_job_held(prolog: PrologCluster, corpus: Path) -> None:
    slurm = prolog.slurm
    prolog.health("gpu-02", corpus / FAIL)
    ran = prolog.marks / "ran-b"
    job = prolog.submit("gpu-02", 1, f"touch {ran}")

    slurm.wait_for(lambda: slurm.runner.node("gpu-02").state.drained, "gpu-02 to drain")
    node = slurm.runner.node("gpu-02")
    assert node.reason == "Prolog error"

    def requeued() -> tuple[str, str]:
        (state,) = slurm.runner.jobs(job)
        return state.state, state.reason

    slurm.wait_for(lambda: requeued() == ("PENDING", "launch_failed_requeued_held"), "a held requeue", detail=requeued)
    assert slurm.runner.jobs(job)[0].restarts >= 1
    assert not ran.exists()
    assert read_job_map(prolog.job_map / "gpu-02").jobs == {}

    verdict = prolog.verdict("gpu-02")
    assert (verdict["node"], verdict["verdict"]) == ("gpu-02", "Fail")
    line = next(ln for ln in prolog.log().splitlines() if f"gpu-02 job {job} prolog:" in ln and "Fail" in ln)
    assert " err " in line and "row remappings are pending" in line and "the node drains" in line
    # what the prolog printed is in slurmd's log, where Slurm puts a failed prolog's output
    slurmd_log = (prolog.root / "log" / "slurmd-gpu-02.log").read_text()
    assert "gpufleet: health check: Fail (dcgmi: Deployment: GPU 3 has uncorrectable memory errors" in slurmd_log


@pytest.mark.real
def test_a_passing_health_check_lets_the_job_run(prolog: PrologCluster) -> None:
    slurm = prolog.slurm
    ran = prolog.marks / "ran-c"
    job = prolog.submit("gpu-02", 1, f"touch {ran}")
    slurm.wait_for(lambda: prolog.job_state(job) in ("COMPLETED", "GONE"), "the job to run to its end")
    assert ran.exists()
    assert slurm.runner.node("gpu-02").state.available
    assert prolog.verdict("gpu-02")["verdict"] == "Pass"
    assert f"gpu-02 job {job} prolog: health check: Pass" in prolog.log()


@pytest.mark.real
def test_a_check_that_cannot_say_lets_the_job_run_with_a_warning(prolog: PrologCluster) -> None:
    slurm = prolog.slurm
    prolog.health("gpu-01", UNKNOWN)
    ran = prolog.marks / "ran-d"
    job = prolog.submit("gpu-01", 1, f"touch {ran}")
    slurm.wait_for(lambda: prolog.job_state(job) in ("COMPLETED", "GONE"), "the job to run to its end")
    assert ran.exists() and slurm.runner.node("gpu-01").state.available
    line = next(ln for ln in prolog.log().splitlines() if f"gpu-01 job {job} prolog: health check" in ln)
    assert " warning " in line and "Unknown" in line and "starting the job" in line


# --- the scripts alone -------------------------------------------------------------------------------------------


def run_script(name: str, settings: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Run a script as slurmd would: a bare environment (no PATH), the job's variables, our settings file."""
    base = {"GPUFLEET_SLURM_ENV": str(settings), "SLURMD_NODENAME": "gpu-01"}
    return subprocess.run(
        ["/bin/bash", str(SCRIPTS / name)], env={**base, **env}, capture_output=True, text=True, timeout=60, check=False
    )


def test_two_jobs_on_one_gpu_each_keep_their_line(tmp_path: Path) -> None:
    if shutil.which("flock") is None:
        pytest.skip("needs flock (util-linux)")
    job_map = tmp_path / "map"
    settings = tmp_path / "slurm.env"
    settings.write_text(f"GPUFLEET_JOB_MAP_DIR={job_map}\nGPUFLEET_LOG_DIR={tmp_path / 'log'}\nGPUFLEET_DIAG=\n")
    settings.chmod(0o644)
    for job, gpus in (("101", "0,1"), ("102", "1,2")):
        assert run_script("prolog.sh", settings, SLURM_JOB_ID=job, SLURM_JOB_GPUS=gpus).returncode == 0
    assert read_job_map(job_map).jobs == {"0": ("101",), "1": ("101", "102"), "2": ("102",)}
    assert run_script("epilog.sh", settings, SLURM_JOB_ID="101").returncode == 0
    assert read_job_map(job_map).jobs == {"1": ("102",), "2": ("102",)}
    assert run_script("epilog.sh", settings, SLURM_JOB_ID="102").returncode == 0
    assert sorted(p.name for p in job_map.iterdir()) == [".lock"]


def test_prologs_starting_together_lose_no_job(tmp_path: Path) -> None:
    if shutil.which("flock") is None:
        pytest.skip("needs flock (util-linux)")
    job_map = tmp_path / "map"
    settings = tmp_path / "slurm.env"
    settings.write_text(f"GPUFLEET_JOB_MAP_DIR={job_map}\nGPUFLEET_LOG_DIR={tmp_path / 'log'}\nGPUFLEET_DIAG=\n")
    base = {"GPUFLEET_SLURM_ENV": str(settings), "SLURMD_NODENAME": "gpu-01", "SLURM_JOB_GPUS": "0,1"}
    jobs = [str(200 + k) for k in range(12)]
    procs = [
        subprocess.Popen(["/bin/bash", str(SCRIPTS / "prolog.sh")], env={**base, "SLURM_JOB_ID": job}) for job in jobs
    ]
    assert [p.wait(timeout=120) for p in procs] == [0] * len(jobs)
    mapping = read_job_map(job_map).jobs
    assert sorted(mapping) == ["0", "1"]
    assert sorted(mapping["0"]) == sorted(mapping["1"]) == jobs


def test_a_settings_file_others_can_write_is_not_sourced(tmp_path: Path) -> None:
    settings = tmp_path / "slurm.env"
    marker = tmp_path / "sourced"
    settings.write_text(f"touch {marker}\n")
    settings.chmod(0o666)
    log_dir = tmp_path / "log"
    ran = run_script("epilog.sh", settings, SLURM_JOB_ID="7", GPUFLEET_LOG_DIR=str(log_dir))
    assert ran.returncode == 0 and not marker.exists()
    assert f"ignoring {settings}: it is sourced as" in (log_dir / "slurm.log").read_text()
