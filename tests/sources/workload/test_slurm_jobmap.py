"""The Slurm job map (dcgm-exporter's HPC job-mapping directory): read tolerantly, put on the frame each collection, and
exposed as hpc_job: info series by default, labels on every GPU series (one per job, as dcgm-exporter writes them) in
compat mode."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpufleet.agent.attribution import AttributionSource
from gpufleet.agent.collector import Collector
from gpufleet.errors import BackendError
from gpufleet.model.attribution import Attribution
from gpufleet.sources.workload.slurm_jobmap import JobMapAllotments, parse_job_file, read_job_map
from gpufleet.telemetry.attribution import EntityIndex, parse_device_id
from gpufleet.telemetry.exposition.config import ExpositionConfig
from gpufleet.telemetry.exposition.dcgm import JOB_INFO_METRIC, Renderer, render
from gpufleet.telemetry.frame import GpuEntity, MetricFrame
from tests.clirun import gpufleet

COMPAT = ExpositionConfig(attribution="labels")


def entities(n: int = 4) -> list[GpuEntity]:
    return [GpuEntity(i, f"GPU-{i:04d}", "NVIDIA H100 80GB HBM3", "gpu-01", pci_bus_id=f"00000000:{i:02X}:00.0")
            for i in range(n)]  # fmt: skip


def temp_frame(n: int = 4) -> MetricFrame:
    frame = MetricFrame(entities(n))
    frame.gpu("DCGM_FI_DEV_GPU_TEMP")[:] = [40 + i for i in range(n)]
    return frame


def series(text: str, name: str) -> list[dict[str, str]]:
    """The label sets of a family's samples (a counter's are named NAME_total by the parser)."""
    return [dict(s.labels) for f in text_string_to_metric_families(text) if f.name == name for s in f.samples]


class Temperatures:
    """A source that gives every GPU a reading, so its series show in each collection."""

    name = "temps"

    def collect(self, frame: MetricFrame) -> None:
        frame.gpu("DCGM_FI_DEV_GPU_TEMP")[:] = 40


def write_map(directory: Path, files: dict[str, str | bytes]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        path = directory / name
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return directory


# --- the reader ------------------------------------------------------------------------------------------------


def test_a_file_is_its_job_ids_in_order_each_once() -> None:
    assert parse_job_file("101\n\n  102 \r\n101\n") == (("101", "102"), [])
    assert parse_job_file("") == ((), [])
    jobs, problems = parse_job_file("7_3\n8+0\nnot a job\n" + "9" * 200 + "\n")
    assert jobs == ("7_3", "8+0")
    assert [p.split(" is")[0] for p in problems] == ["line 3", "line 4"]


def test_the_directory_maps_gpus_and_mig_instances_and_passes_over_other_names(tmp_path: Path) -> None:
    directory = write_map(tmp_path / "map", {"0": "11\n", "1": "11\n12\n", "2.0": "13\n", "7": "\n"})
    write_map(directory, {".lock": "", ".3.4242": "99\n", "README": "99\n", "gpu3": "99\n", "3.x": "99\n"})
    (directory / "5").mkdir()
    (directory / "6").symlink_to(tmp_path / "nowhere")
    mapping = read_job_map(directory)
    assert mapping.jobs == {"0": ("11",), "1": ("11", "12"), "2.0": ("13",)}
    assert mapping.problems == ()


def test_bad_files_are_reported_and_the_others_still_read(tmp_path: Path) -> None:
    directory = write_map(
        tmp_path / "map",
        {"0": "21\n", "1": b"\xff\xfe\x00garbage", "2": "9" * 70_000, "3": "22\n\x07bell\n"},
    )
    mapping = read_job_map(directory)
    assert mapping.jobs == {"0": ("21",), "3": ("22",)}
    problems = "\n".join(mapping.problems)
    assert f"{directory / '1'}: not text" in problems
    assert f"{directory / '2'}: larger than" in problems
    assert f"{directory / '3'}: line 2 is not a job id" in problems


def test_no_directory_yet_is_no_jobs_and_one_that_cannot_be_listed_is_an_error(tmp_path: Path) -> None:
    assert read_job_map(tmp_path / "not-yet").jobs == {}
    (tmp_path / "file").write_text("")
    with pytest.raises(BackendError, match="cannot read the job-map directory"):
        read_job_map(tmp_path / "file")


def test_a_file_name_is_the_gpu_index_or_index_and_gpu_instance() -> None:
    gpus = [
        GpuEntity(3, "GPU-x", "m", "h"),
        GpuEntity(2, "GPU-y", "m", "h", mig_profile="1g.10gb", gpu_instance_id=0),
        GpuEntity(2, "GPU-y", "m", "h", mig_profile="1g.10gb", gpu_instance_id=1),
    ]
    index = EntityIndex(gpus)
    assert index.of_device(parse_device_id("3")) == 0
    assert index.of_device(parse_device_id("2.0")) == 1
    assert index.of_device(parse_device_id("2.1")) == 2


# --- the source, each collection -------------------------------------------------------------------------------


def test_each_collection_follows_the_directory(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    directory = write_map(tmp_path / "map", {"0": "31\n", "2": "31\n32\n", "3": b"\xff"})
    frame = temp_frame()
    source = AttributionSource([JobMapAllotments(directory)])
    with caplog.at_level(logging.WARNING, logger="gpufleet.agent"):
        source.collect(frame)
        version = frame.labels_version
        source.collect(frame)
    assert frame.jobs == [("31",), (), ("31", "32"), ()]
    assert frame.labels_version == version  # nothing changed: the label cache stays
    assert [r.getMessage() for r in caplog.records] == [f"job map: {directory / '3'}: not text, skipped"]
    (directory / "0").unlink()
    (directory / "2").write_text("32\n")
    source.collect(frame)
    assert frame.jobs == [(), (), ("32",), ()] and frame.labels_version > version


def test_a_job_map_that_cannot_be_read_marks_the_reader_down_and_drops_the_labels(tmp_path: Path) -> None:
    directory = write_map(tmp_path / "map", {"1": "41\n"})
    frame = temp_frame()
    source = AttributionSource([JobMapAllotments(directory)])
    collector = Collector(frame, [Temperatures(), source], exposition=COMPAT)
    collector.collect_once()
    assert 'hpc_job="41"' in collector.body.decode()
    for path in directory.iterdir():
        path.unlink()
    directory.rmdir()
    directory.write_text("")  # a file where the directory was: it cannot be listed
    collector.collect_once()
    body = collector.body.decode()
    assert "hpc_job" not in body and 'DCGM_FI_DEV_GPU_TEMP{gpu="1"' in body
    assert 'gpufleet_attribution_input{input="allotments",reader="job-map",state="down"} 1' in body


# --- exposition --------------------------------------------------------------------------------------------------


def test_by_default_jobs_are_info_series_and_gpu_series_stay_as_they_were() -> None:
    frame = temp_frame()
    renderer = Renderer()
    before = renderer.render(frame)
    frame.set_jobs(1, ("51", "52"))
    text = renderer.render(frame)
    assert series(text, "DCGM_FI_DEV_GPU_TEMP") == series(before, "DCGM_FI_DEV_GPU_TEMP")
    info = series(text, JOB_INFO_METRIC)
    assert [(s["gpu"], s["UUID"], s["hpc_job"]) for s in info] == [("1", "GPU-0001", "51"), ("1", "GPU-0001", "52")]
    assert f"# HELP {JOB_INFO_METRIC} " in text and f"# TYPE {JOB_INFO_METRIC} gauge" in text


def test_compat_mode_labels_every_gpu_series_once_per_job_like_dcgm_exporter() -> None:
    frame = temp_frame()
    frame.set_jobs(0, ("61",))
    frame.set_jobs(2, ("61", "62"))
    frame.set_xid_count(79, [0, 0, 1, 0])
    text = render(frame, COMPAT)
    temps = [(s["gpu"], s.get("hpc_job")) for s in series(text, "DCGM_FI_DEV_GPU_TEMP")]
    assert temps == [("0", "61"), ("1", None), ("2", "61"), ("2", "62"), ("3", None)]
    line = next(ln for ln in text.splitlines() if ln.startswith('DCGM_FI_DEV_GPU_TEMP{gpu="2"'))
    assert line == (
        'DCGM_FI_DEV_GPU_TEMP{gpu="2",UUID="GPU-0002",pci_bus_id="00000000:02:00.0",device="nvidia2",'
        'modelName="NVIDIA H100 80GB HBM3",hostname="gpu-01",hpc_job="61"} 42'
    )
    xids = series(text, "DCGM_EXP_XID_ERRORS_COUNT")
    assert [(s["gpu"], s["hpc_job"]) for s in xids] == [("2", "61"), ("2", "62")]
    assert JOB_INFO_METRIC not in text


def test_jobs_sit_among_the_pod_labels_in_sorted_order() -> None:
    frame = temp_frame(1)
    frame.set_attribution(0, Attribution("trainer-0", "ml", "pytorch"))
    frame.set_jobs(0, ("71",))
    line = next(ln for ln in render(frame, COMPAT).splitlines() if ln.startswith("DCGM_FI_DEV_GPU_TEMP{"))
    assert line.endswith(',hostname="gpu-01",container="pytorch",hpc_job="71",namespace="ml",pod="trainer-0"} 40')


def test_the_label_cache_follows_jobs_coming_and_going() -> None:
    frame = temp_frame()
    renderer = Renderer(COMPAT)
    assert "hpc_job" not in renderer.render(frame)
    frame.set_jobs(3, ("81",))
    assert [s.get("hpc_job") for s in series(renderer.render(frame), "DCGM_FI_DEV_GPU_TEMP")] == [None] * 3 + ["81"]
    frame.set_jobs(3, ())
    assert "hpc_job" not in renderer.render(frame)


def test_the_agent_refuses_a_job_map_on_the_twin(tmp_path: Path) -> None:
    ran = gpufleet("agent", "--sim", "--job-map-dir", os.fspath(tmp_path))
    assert ran.returncode == 2 and "the twin attributes its own GPUs" in ran.stderr
    assert "--job-map-dir" in gpufleet("agent", "--help", env={"COLUMNS": "200"}).stdout
