"""Per-workload GPU attribution on /metrics: frames with shares built by hand, rendered in both attribution modes."""

from __future__ import annotations

import dataclasses
import math
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError

from gpufleet.errors import UserError
from gpufleet.health.thresholds import detection_limits
from gpufleet.health.xid_policy import xid_ratings
from gpufleet.model.attribution import Attribution, DeviceAttribution, Share, Sharing
from gpufleet.telemetry.exposition.config import ExpositionConfig, workload_series_settings
from gpufleet.telemetry.exposition.dcgm import Renderer, render
from gpufleet.telemetry.exposition.workload import FAMILIES, WORKLOAD_FAMILIES
from gpufleet.telemetry.fields import load_field_catalog
from gpufleet.telemetry.frame import GpuEntity, MetricFrame
from gpufleet.telemetry.monitoring.alert_rules import RULE_FILE, dump, rule_groups
from gpufleet.telemetry.monitoring.rule_tests import render_annotation
from gpufleet.telemetry.store import EmbeddedStore
from gpufleet.telemetry.store.frame_series import FrameSeries
from tests.clirun import gpufleet
from tests.conftest import require_tool
from tests.telemetry.conftest import make_entities
from tests.telemetry.vendor_frames import mi300x_entities, nvidia_reference_frame

DATA = Path(__file__).parents[1] / "data"
MIB = 1024 * 1024
NO_FLEET = ExpositionConfig(fleet_series=False)
LABELS_MODE = ExpositionConfig(fleet_series=False, attribution="labels")
SPLIT_FIELDS = ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_POWER_USAGE")
POD_KEYS = ("pod", "namespace", "container", "hpc_job")
IDENT0 = (
    'gpu="0",UUID="GPU-00000000-6d3c-22ed-0ec8-d3b864870b8b",pci_bus_id="00000000:18:00.0",device="nvidia0",'
    'modelName="NVIDIA H100 80GB HBM3",hostname="gpu-node-01"'
)
IDENT1 = (
    'gpu="1",UUID="GPU-00000001-6d3c-22ed-0ec8-d3b864870b8b",pci_bus_id="00000000:19:00.0",device="nvidia1",'
    'modelName="NVIDIA H100 80GB HBM3",hostname="gpu-node-01"'
)
A100 = "NVIDIA A100-SXM4-40GB"
A100_UUID = "GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f"
Sample = tuple[str, dict[str, str], float]


# -- helpers -------------------------------------------------------------------------------------------------------
def parsed(text: str) -> list[Sample]:
    """Every sample, through prometheus_client's parser (which refuses text that is not valid exposition)."""
    return [(s.name, dict(s.labels), s.value) for f in text_string_to_metric_families(text) for s in f.samples]


def named(samples: list[Sample], name: str) -> list[Sample]:
    return [s for s in samples if s[0] == name]


def lines(text: str, name: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.startswith((name + "{", name + " "))]


def without(text: str, families: Sequence[str]) -> str:
    """The text with whole families (their HELP, TYPE and samples) taken out."""
    drop = tuple(families)
    kept = []
    for ln in text.splitlines(keepends=True):
        name = ln.split(" ", 3)[2] if ln.startswith("#") else ln.split("{", 1)[0].split(" ", 1)[0]
        if name not in drop:
            kept.append(ln)
    return "".join(kept)


def holder(pod: str, namespace: str = "ml", container: str = "pytorch", workload: str = "") -> Attribution:
    return Attribution(pod, namespace, container, workload)


def share(
    who: Attribution,
    memory: float = math.nan,
    compute: float = math.nan,
    method: str = "measured",
    mem_util: float = math.nan,
    power: float = math.nan,
    power_method: str = "estimated",
    processes: int = 1,
    allotted: bool = True,
) -> Share:
    return Share(who, memory, compute, method, mem_util, power, power_method, processes, allotted)


def set_device(frame: MetricFrame, i: int, fb: float, util: float, copy: float, power: float, temp: float) -> None:
    values = zip(
        ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL"), (fb, util, copy), strict=True
    )
    for name, value in (*values, ("DCGM_FI_DEV_POWER_USAGE", power), ("DCGM_FI_DEV_GPU_TEMP", temp)):
        frame.gpu(name)[i] = value


def time_sliced_frame() -> MetricFrame:
    """GPU 0 time-sliced x4 among four pods (measured, per-process samples); GPU 1 held by one pod."""
    frame = MetricFrame(make_entities(2))
    set_device(frame, 0, fb=30000, util=62, copy=25, power=400.0, temp=61)
    set_device(frame, 1, fb=9000, util=80, copy=30, power=500.0, temp=66)
    pods = [holder("train-0"), holder("train-1"), holder("eval-0", "research", "eval"), holder("idle-0", "research")]
    shares = (
        share(pods[0], 10000, 20.4, mem_util=12, power=200.0),
        share(pods[1], 8000, 20.4, mem_util=8, power=400.0 / 3),
        share(pods[2], 6000, 20.4, mem_util=4, power=200.0 / 3, processes=2),
        share(pods[3], 0.0, 0.0, mem_util=0, power=0.0, processes=0),
    )
    frame.set_shares(0, DeviceAttribution(Sharing.time_slicing, 4, shares, 6000.0, 0.8))
    frame.set_jobs(0, ())
    sole = holder("serve-0", "inference", "server", workload="llm-serve")
    frame.set_shares(1, DeviceAttribution(Sharing.exclusive, 1, (share(sole, 8500, 80, mem_util=30, power=500.0),)))
    frame.set_attribution(1, sole)  # what the agent's attribution sets for a device with one pod
    return frame


def mig_entities(n: int = 7, profile: str = "1g.5gb") -> list[GpuEntity]:
    return [
        GpuEntity(
            gpu=0,
            uuid=A100_UUID,
            model_name=A100,
            hostname="a100-node-01",
            pci_bus_id="00000000:07:00.0",
            mig_profile=profile,
            gpu_instance_id=7 + k,
            mig_uuid=f"MIG-0b3c{k:04x}-1111-5222-8333-444455556666",
        )
        for k in range(n)
    ]


def mig_frame() -> MetricFrame:
    """An A100 in 7 x 1g.5gb, each instance held by one pod (no power reading of its own)."""
    frame = MetricFrame(mig_entities())
    for k in range(7):
        frame.gpu("DCGM_FI_DEV_FB_USED")[k] = 1000 + k
        pod = holder(f"infer-{k}", "inference", "server")
        frame.set_shares(k, DeviceAttribution(Sharing.mig, 1, (share(pod, 900 + k, 10.0 * k, processes=1),), 100, 0))
        frame.set_attribution(k, pod)
    return frame


def samples_of(frame: MetricFrame, config: ExpositionConfig = NO_FLEET) -> list[Sample]:
    return parsed(render(frame, config))


# -- gpufleet's per-workload series --------------------------------------------------------------------------------
def test_time_sliced_gpu_writes_each_workloads_use_exactly() -> None:
    text = render(time_sliced_frame(), NO_FLEET)
    parsed(text)
    pod0 = f'{IDENT0},container="pytorch",namespace="ml",pod="train-0",sharing="time-slicing"'
    measured = f'{IDENT0},container="pytorch",method="measured",namespace="ml",pod="train-0",sharing="time-slicing"'
    estimated = f'{IDENT0},container="pytorch",method="estimated",namespace="ml",pod="train-0",sharing="time-slicing"'
    assert f"gpufleet_workload_gpu_memory_used_bytes{{{pod0}}} {10000 * MIB}" in lines(
        text, "gpufleet_workload_gpu_memory_used_bytes"
    )
    assert lines(text, "gpufleet_workload_gpu_utilization_ratio")[0] == (
        f"gpufleet_workload_gpu_utilization_ratio{{{measured}}} 0.204"
    )
    assert lines(text, "gpufleet_workload_gpu_memory_bandwidth_utilization_ratio")[0] == (
        f"gpufleet_workload_gpu_memory_bandwidth_utilization_ratio{{{measured}}} 0.12"
    )
    assert (
        lines(text, "gpufleet_workload_gpu_power_watts")[0] == f"gpufleet_workload_gpu_power_watts{{{estimated}}} 200"
    )
    assert f"gpufleet_workload_gpu_processes{{{pod0}}} 1" in lines(text, "gpufleet_workload_gpu_processes")
    # the idle pod is there, with zeros: it holds a replica and ran nothing
    assert any('pod="idle-0"' in ln and ln.endswith(" 0") for ln in lines(text, "gpufleet_workload_gpu_processes"))
    # four pods of the shared GPU, none for the exclusively held one (not selected by default)
    for family in ("gpufleet_workload_gpu_memory_used_bytes", "gpufleet_workload_gpu_utilization_ratio"):
        assert len(lines(text, family)) == 4 and all('gpu="0"' in ln for ln in lines(text, family))
    assert "gpufleet_workload_gpu_unallotted" not in text
    assert lines(text, "gpufleet_gpu_sharing_info") == [
        f'gpufleet_gpu_sharing_info{{{IDENT0},replicas="4",sharing="time-slicing"}} 1',
        f'gpufleet_gpu_sharing_info{{{IDENT1},replicas="1",sharing="exclusive"}} 1',
    ]
    assert f'gpufleet_gpu_unattributed_memory_bytes{{{IDENT0},sharing="time-slicing"}} {6000 * MIB}' in text
    assert f'gpufleet_gpu_unattributed_utilization_ratio{{{IDENT0},sharing="time-slicing"}} 0.008' in text
    assert lines(text, "gpufleet_attribution_workload_series") == ["gpufleet_attribution_workload_series 20"]
    assert lines(text, "gpufleet_attribution_workload_series_budget") == [
        "gpufleet_attribution_workload_series_budget 2000"
    ]
    assert lines(text, "gpufleet_attribution_workload_series_dropped") == [
        "gpufleet_attribution_workload_series_dropped 0"
    ]


def test_workload_label_only_where_known_and_every_family_documented() -> None:
    samples = samples_of(time_sliced_frame(), NO_FLEET.model_copy(update={"workload_series_sharing": ("all",)}))
    serve = [lab for n, lab, _ in samples if n == "gpufleet_workload_gpu_power_watts" and lab.get("pod") == "serve-0"]
    assert serve == [{**serve[0], "workload": "llm-serve", "method": "estimated", "sharing": "exclusive"}]
    train = [lab for n, lab, _ in samples if n.startswith("gpufleet_workload_") and lab.get("pod") == "train-0"]
    assert train and all("workload" not in lab and "hpc_job" not in lab for lab in train)
    for family in text_string_to_metric_families(render(time_sliced_frame(), NO_FLEET)):
        if family.name in FAMILIES:
            assert family.documentation and family.type == "gauge", family.name
    assert set(FAMILIES) - {"gpufleet_workload_gpu_unallotted"} <= {n for n, _, _ in samples}


def test_mps_clients_get_estimated_compute_and_no_bandwidth() -> None:
    frame = MetricFrame(make_entities(1))
    set_device(frame, 0, fb=12000, util=90, copy=40, power=300.0, temp=55)
    clients = (
        share(holder("mps-a"), 4000, 30, "estimated", power=100.0),
        share(holder("mps-b"), 3000, 30, "estimated", power=100.0),
        share(holder("mps-c"), 2000, 30, "estimated", power=100.0),
    )
    frame.set_shares(0, DeviceAttribution(Sharing.mps, 3, clients, 3000, 0))
    samples = samples_of(frame)
    util = named(samples, "gpufleet_workload_gpu_utilization_ratio")
    assert [(lab["pod"], lab["method"], lab["sharing"], v) for _, lab, v in util] == [
        ("mps-a", "estimated", "mps", 0.3),
        ("mps-b", "estimated", "mps", 0.3),
        ("mps-c", "estimated", "mps", 0.3),
    ]
    assert not named(samples, "gpufleet_workload_gpu_memory_bandwidth_utilization_ratio")  # no per-process figure
    assert sum(v for _, _, v in named(samples, "gpufleet_workload_gpu_power_watts")) == 300
    assert [v for _, _, v in named(samples, "gpufleet_workload_gpu_memory_used_bytes")] == [
        4000 * MIB,
        3000 * MIB,
        2000 * MIB,
    ]


def test_mig_instances_are_not_selected_by_default_and_carry_their_instance_labels() -> None:
    frame = mig_frame()
    default = samples_of(frame)
    assert not [s for s in default if s[0] in WORKLOAD_FAMILIES]
    info = named(default, "gpufleet_gpu_sharing_info")
    assert [(lab["GPU_I_ID"], lab["sharing"], lab["replicas"]) for _, lab, _ in info] == [
        (str(7 + k), "mig", "1") for k in range(7)
    ]
    assert len(named(default, "gpufleet_gpu_pod_info")) == 7
    chosen = samples_of(frame, NO_FLEET.model_copy(update={"workload_series_sharing": ("mig",)}))
    memory = named(chosen, "gpufleet_workload_gpu_memory_used_bytes")
    assert [(lab["GPU_I_PROFILE"], lab["GPU_I_ID"], lab["pod"], v) for _, lab, v in memory] == [
        ("1g.5gb", str(7 + k), f"infer-{k}", (900 + k) * MIB) for k in range(7)
    ]
    assert not named(chosen, "gpufleet_workload_gpu_power_watts")  # a MIG instance has no power reading
    assert named(chosen, "gpufleet_attribution_workload_series")[0][2] == 21  # memory, utilization, processes x 7


def test_time_sliced_mig_instance() -> None:
    frame = MetricFrame(mig_entities(2, "3g.20gb"))
    frame.gpu("DCGM_FI_DEV_FB_USED")[:] = [9000, 100]
    pods = (
        share(holder("nb-1", "research"), 4000, 25, "estimated"),
        share(holder("nb-2", "research"), 3000, 25, "estimated"),
    )
    frame.set_shares(0, DeviceAttribution(Sharing.mig_shared, 2, pods, 2000, 0))
    samples = samples_of(frame)
    util = named(samples, "gpufleet_workload_gpu_utilization_ratio")
    assert [(lab["GPU_I_ID"], lab["pod"], lab["method"], lab["sharing"], v) for _, lab, v in util] == [
        ("7", "nb-1", "estimated", "mig-time-slicing", 0.25),
        ("7", "nb-2", "estimated", "mig-time-slicing", 0.25),
    ]
    # labels mode: memory splits; a MIG instance has no GPU_UTIL of its own, so no holder has one there either
    compat = samples_of(frame, LABELS_MODE)
    fb = [(lab.get("pod", ""), v) for n, lab, v in compat if n == "DCGM_FI_DEV_FB_USED" and lab["GPU_I_ID"] == "7"]
    assert sorted(fb) == [("", 2000), ("nb-1", 4000), ("nb-2", 3000)]
    assert not named(compat, "DCGM_FI_DEV_GPU_UTIL")


def test_slurm_jobs_sharing_a_gpu() -> None:
    frame = MetricFrame(make_entities(1))
    set_device(frame, 0, fb=20000, util=70, copy=20, power=350.0, temp=58)
    jobs = (
        share(Attribution(hpc_job="4411"), 9000, 40, power=200.0),
        share(Attribution(hpc_job="4412"), 8000, 30, power=150.0),
    )
    frame.set_shares(0, DeviceAttribution(Sharing.time_slicing, 2, jobs, 3000, 0))
    samples = samples_of(frame)
    memory = named(samples, "gpufleet_workload_gpu_memory_used_bytes")
    assert memory[0][1] == {
        "gpu": "0",
        "UUID": "GPU-00000000-6d3c-22ed-0ec8-d3b864870b8b",
        "pci_bus_id": "00000000:18:00.0",
        "device": "nvidia0",
        "modelName": "NVIDIA H100 80GB HBM3",
        "hostname": "gpu-node-01",
        "hpc_job": "4411",
        "sharing": "time-slicing",
    }
    # the job info series come from the shares (the frame's job list was never set here)
    assert [lab["hpc_job"] for _, lab, _ in named(samples, "gpufleet_gpu_job_info")] == ["4411", "4412"]
    assert not named(samples, "gpufleet_gpu_pod_info")
    compat = samples_of(frame, LABELS_MODE)
    assert sorted((lab.get("hpc_job", ""), v) for _, lab, v in named(compat, "DCGM_FI_DEV_FB_USED")) == [
        ("", 3000),
        ("4411", 9000),
        ("4412", 8000),
    ]
    assert [lab.get("hpc_job") for _, lab, _ in named(compat, "DCGM_FI_DEV_GPU_TEMP")] == [None]
    # without shares, dcgm-exporter's HPC job mapping copies the device's series per job, as before
    plain = MetricFrame(make_entities(1))
    set_device(plain, 0, fb=20000, util=70, copy=20, power=350.0, temp=58)
    plain.set_jobs(0, ("4411", "4412"))
    assert [lab["hpc_job"] for _, lab, _ in named(samples_of(plain, LABELS_MODE), "DCGM_FI_DEV_GPU_TEMP")] == [
        "4411",
        "4412",
    ]


def test_a_workload_on_a_gpu_it_was_not_given_is_marked_and_always_written() -> None:
    frame = MetricFrame(make_entities(1))
    set_device(frame, 0, fb=30000, util=95, copy=30, power=600.0, temp=70)
    owner, stray = holder("train-0"), holder("notebook-3", "research", "jupyter")
    both = (share(owner, 20000, 80, power=500.0), share(stray, 9000, 15, power=100.0, allotted=False))
    frame.set_shares(0, DeviceAttribution(Sharing.exclusive, 1, both, 1000, 0))
    samples = samples_of(frame)  # exclusive devices are not selected by default: this one is, for the stray
    assert {lab["pod"] for _, lab, _ in named(samples, "gpufleet_workload_gpu_memory_used_bytes")} == {
        "train-0",
        "notebook-3",
    }
    (marked,) = named(samples, "gpufleet_workload_gpu_unallotted")
    assert (marked[1]["pod"], marked[1]["namespace"], marked[1]["sharing"], marked[2]) == (
        "notebook-3",
        "research",
        "exclusive",
        1,
    )
    # even `--workload-series none` keeps them: the alert reads them
    none = NO_FLEET.model_copy(update=workload_series_settings(["none"]))
    assert len(named(samples_of(frame, none), "gpufleet_workload_gpu_unallotted")) == 1
    # labels mode splits the device: the stray pod's part is its own, not a copy of the device
    compat = samples_of(frame, LABELS_MODE)
    util = {lab.get("pod", ""): v for _, lab, v in named(compat, "DCGM_FI_DEV_GPU_UTIL")}
    assert util == {"train-0": 80, "notebook-3": 15, "": 0}


def test_unknown_memory_is_left_out_not_zero() -> None:
    frame = MetricFrame(make_entities(2))
    set_device(frame, 0, fb=30000, util=60, copy=20, power=300.0, temp=60)
    set_device(frame, 1, fb=30000, util=60, copy=20, power=300.0, temp=60)
    # no PID map: whose process is whose cannot be told, so no memory and no process count, compute estimated
    unknown = (
        share(holder("a"), compute=30, method="estimated", processes=0),
        share(holder("b"), compute=30, method="estimated", processes=0),
    )
    frame.set_shares(0, DeviceAttribution(Sharing.time_slicing, 2, unknown))
    # a driver that does not account per-process memory: the count is known, the memory is not
    counted = (share(holder("c"), compute=30, processes=2), share(holder("d"), compute=30, processes=1))
    frame.set_shares(1, DeviceAttribution(Sharing.time_slicing, 2, counted))
    samples = samples_of(frame)
    assert not named(samples, "gpufleet_workload_gpu_memory_used_bytes")
    assert not named(samples, "gpufleet_gpu_unattributed_memory_bytes")
    assert [(lab["pod"], v) for _, lab, v in named(samples, "gpufleet_workload_gpu_processes")] == [("c", 2), ("d", 1)]
    assert len(named(samples, "gpufleet_workload_gpu_utilization_ratio")) == 4
    # labels mode: no holder has a memory figure, so the whole device's memory stays on the row without pod labels
    compat = samples_of(frame, LABELS_MODE)
    fb = [(lab["gpu"], lab.get("pod", ""), v) for _, lab, v in named(compat, "DCGM_FI_DEV_FB_USED")]
    assert fb == [("0", "", 30000), ("1", "", 30000)]


# -- labels mode (dcgm-exporter compat) ------------------------------------------------------------------------------
def test_labels_mode_parts_add_up_to_the_device_and_device_fields_render_once() -> None:
    frame = time_sliced_frame()
    frame.set_xid_count(31, [1, 0])
    frame.clock_event_row("hw_thermal")[0] = 3
    samples = samples_of(frame, LABELS_MODE)
    uuid = frame.entities[0].uuid
    for name in SPLIT_FIELDS:
        device = frame.gpu(name)[0]
        parts = [v for n, lab, v in samples if n == name and lab["UUID"] == uuid]
        # four pods and the remainder; power's parts are the whole device's
        assert len(parts) == (4 if name == "DCGM_FI_DEV_POWER_USAGE" else 5), name
        assert sum(parts) == pytest.approx(
            math.trunc(device) if name != "DCGM_FI_DEV_POWER_USAGE" else device, abs=1e-5
        )
    fb = {lab.get("pod", ""): v for n, lab, v in samples if n == "DCGM_FI_DEV_FB_USED" and lab["UUID"] == uuid}
    assert fb == {"train-0": 10000, "train-1": 8000, "eval-0": 6000, "idle-0": 0, "": 6000}
    util = {lab.get("pod", ""): v for n, lab, v in samples if n == "DCGM_FI_DEV_GPU_UTIL" and lab["UUID"] == uuid}
    assert util == {"train-0": 20, "train-1": 20, "eval-0": 20, "idle-0": 0, "": 2}  # parts rounded, sum exact
    power = [lab for n, lab, _ in samples if n == "DCGM_FI_DEV_POWER_USAGE" and lab["UUID"] == uuid]
    assert all(lab.get("pod") for lab in power)  # the parts are the whole: no remainder series
    for name in ("DCGM_FI_DEV_GPU_TEMP", "DCGM_EXP_XID_ERRORS_COUNT", "DCGM_EXP_CLOCK_EVENTS_COUNT"):
        (only,) = [lab for n, lab, _ in samples if n == name and lab["UUID"] == uuid]
        assert not any(k in only for k in POD_KEYS), name
    # the exclusively held GPU keeps the pod on every series, as dcgm-exporter writes it
    held = [lab for n, lab, _ in samples if n.startswith("DCGM_") and lab["UUID"] == frame.entities[1].uuid]
    assert held and all(lab["pod"] == "serve-0" and lab["namespace"] == "inference" for lab in held)
    assert not named(samples, "gpufleet_gpu_pod_info")
    assert len(named(samples, "gpufleet_workload_gpu_memory_used_bytes")) == 4  # gpufleet's own series in both modes


def test_labels_mode_exclusive_device_renders_exactly_as_without_shares() -> None:
    frame = time_sliced_frame()
    frame.set_shares(0, None)
    plain = time_sliced_frame()
    for i in range(2):
        plain.set_shares(i, None)
    for config in (LABELS_MODE, NO_FLEET, ExpositionConfig(), ExpositionConfig(attribution="labels")):
        assert without(render(frame, config), FAMILIES) == render(plain, config)


def test_shared_amd_gpu_renders_once_without_pod_labels_in_labels_mode() -> None:
    frame = MetricFrame(mi300x_entities())
    frame.gpu("DCGM_FI_DEV_GPU_UTIL")[:] = 50
    frame.set_jobs(0, ("4411", "4412"))
    jobs = (
        share(Attribution(hpc_job="4411"), compute=25, method="estimated"),
        share(Attribution(hpc_job="4412"), compute=25, method="estimated"),
    )
    frame.set_shares(0, DeviceAttribution(Sharing.time_slicing, 2, jobs))
    samples = samples_of(frame, LABELS_MODE)
    gfx = [lab for _, lab, _ in named(samples, "gpu_gfx_activity") if lab["gpu_id"] == "0"]
    assert len(gfx) == 1 and gfx[0]["job_id"] == "" and gfx[0]["pod"] == ""
    util = named(samples, "gpufleet_workload_gpu_utilization_ratio")
    assert [(lab["gpu_uuid"], lab["hpc_job"]) for _, lab, _ in util] == [
        (frame.entities[0].uuid, "4411"),
        (frame.entities[0].uuid, "4412"),
    ]


def test_a_family_switched_off_in_the_catalog_is_left_out() -> None:
    catalog = load_field_catalog().with_enabled(["gpufleet_workload_gpu_power_watts"], False).enabled()
    frame = MetricFrame(make_entities(1), catalog=catalog)
    set_device(frame, 0, fb=12000, util=90, copy=40, power=300.0, temp=55)
    two = (share(holder("a"), 4000, 45, power=150.0), share(holder("b"), 4000, 45, power=150.0))
    frame.set_shares(0, DeviceAttribution(Sharing.time_slicing, 2, two, 4000, 0))
    samples = samples_of(frame)
    assert not named(samples, "gpufleet_workload_gpu_power_watts")
    assert named(samples, "gpufleet_attribution_workload_series")[0][2] == 6  # memory, utilization, processes: 2 each


# -- info mode -------------------------------------------------------------------------------------------------------
def test_info_series_name_every_pod_holding_a_gpu() -> None:
    samples = samples_of(time_sliced_frame(), ExpositionConfig())
    pods = [(lab["gpu"], lab["pod"], lab.get("workload")) for _, lab, _ in named(samples, "gpufleet_gpu_pod_info")]
    assert pods == [
        ("0", "train-0", None),
        ("0", "train-1", None),
        ("0", "eval-0", None),
        ("0", "idle-0", None),
        ("1", "serve-0", "llm-serve"),
    ]
    fleet = named(samples, "gpufleet_accelerator_pod_info")
    assert [(lab["gpu"], lab["pod"]) for _, lab, _ in fleet] == [(g, p) for g, p, _ in pods]


# -- cardinality -----------------------------------------------------------------------------------------------------
def test_budget_cuts_whole_devices_in_entity_order() -> None:
    frame = mig_frame()
    config = NO_FLEET.model_copy(update={"workload_series_sharing": ("all",), "workload_series_budget": 10})
    samples = samples_of(frame, config)
    kept = {lab["GPU_I_ID"] for n, lab, _ in samples if n in WORKLOAD_FAMILIES}
    assert kept == {"7", "8", "9"}  # three series each: the fourth instance would pass 10
    counts = {n: v for n, _, v in samples if n.startswith("gpufleet_attribution_")}
    assert counts == {
        "gpufleet_attribution_workload_series": 9,
        "gpufleet_attribution_workload_series_budget": 10,
        "gpufleet_attribution_workload_series_dropped": 12,
    }
    assert len([s for s in samples if s[0] in WORKLOAD_FAMILIES]) == 9
    # the device series are not per workload: every instance keeps them
    assert len(named(samples, "gpufleet_gpu_sharing_info")) == 7
    # the same frame renders the same cut every time
    renderer = Renderer(config)
    assert renderer.render(frame) == renderer.render(frame)
    nothing = samples_of(frame, config.model_copy(update={"workload_series_budget": 0}))
    assert not [s for s in nothing if s[0] in WORKLOAD_FAMILIES]
    assert named(nothing, "gpufleet_attribution_workload_series_dropped")[0][2] == 21


def test_selectors() -> None:
    assert workload_series_settings(["sharing:mps", "namespace:ml", "sharing:mps"]) == {
        "workload_series_sharing": ("mps",),
        "workload_series_namespaces": ("ml",),
    }
    assert workload_series_settings(["all"])["workload_series_sharing"] == ("all",)
    assert workload_series_settings(["none"]) == {"workload_series_sharing": (), "workload_series_namespaces": ()}
    for bad in (["sharing:shared"], ["namespace:"], ["pods"], ["none", "all"]):
        with pytest.raises(UserError):
            workload_series_settings(bad)
    with pytest.raises(ValidationError, match="unknown sharing mode"):
        ExpositionConfig(workload_series_sharing=("timeslicing",))
    with pytest.raises(ValidationError):
        ExpositionConfig(workload_series_budget=-1)


@pytest.mark.parametrize(
    ("selectors", "pods"),
    [
        ([], {"train-0", "train-1", "eval-0", "idle-0"}),  # default: shared devices
        (["namespace:inference"], {"serve-0"}),  # replacing the default: only that namespace
        (["namespace:research", "sharing:exclusive"], {"eval-0", "idle-0", "serve-0"}),
        (["namespace:*"], {"train-0", "train-1", "eval-0", "idle-0", "serve-0"}),
        (["all"], {"train-0", "train-1", "eval-0", "idle-0", "serve-0"}),
        (["none"], set()),
    ],
)
def test_selectors_choose_the_workloads(selectors: list[str], pods: set[str]) -> None:
    config = NO_FLEET.model_copy(update=workload_series_settings(selectors)) if selectors else NO_FLEET
    samples = samples_of(time_sliced_frame(), config)
    assert {lab["pod"] for n, lab, _ in samples if n in WORKLOAD_FAMILIES} == pods
    assert len(named(samples, "gpufleet_gpu_sharing_info")) == 2  # every device with shares, whatever is chosen


# -- label cache -------------------------------------------------------------------------------------------------------
def test_labels_go_when_the_share_goes() -> None:
    frame = time_sliced_frame()
    renderer = Renderer(ExpositionConfig())
    assert 'pod="idle-0"' in renderer.render(frame)
    version = frame.labels_version
    first = frame.shares[0]
    assert first is not None
    frame.set_shares(0, DeviceAttribution(Sharing.time_slicing, 4, first.shares[:3], 6000.0, 0.8))
    assert frame.labels_version > version
    text = renderer.render(frame)
    assert 'pod="idle-0"' not in text and 'pod="eval-0"' in text
    assert named(parsed(text), "gpufleet_attribution_workload_series")[0][2] == 15
    # values change without new labels: the cache stays, the values follow
    same = DeviceAttribution(
        Sharing.time_slicing, 4, tuple(dataclasses.replace(s, memory_mib=1.0) for s in first.shares[:3])
    )
    version = frame.labels_version
    frame.set_shares(0, same)
    assert frame.labels_version == version
    memory = named(parsed(renderer.render(frame)), "gpufleet_workload_gpu_memory_used_bytes")
    assert [v for _, lab, v in memory if lab["gpu"] == "0"] == [MIB, MIB, MIB]
    # a replica count is a label too, though not part of the frame's label key
    frame.set_shares(0, DeviceAttribution(Sharing.time_slicing, 8, same.shares))
    assert 'replicas="8",sharing="time-slicing"' in renderer.render(frame)
    # every share gone: back to exactly what a frame that never had shares renders
    frame.set_shares(0, None)
    frame.set_shares(1, None)
    plain = time_sliced_frame()
    plain.set_shares(0, None)
    plain.set_shares(1, None)
    assert renderer.render(frame) == Renderer(ExpositionConfig()).render(plain)


@pytest.mark.parametrize(
    ("golden", "config"),
    [
        ("nvidia_reference_default.prom", ExpositionConfig(fleet_series=False)),
        (
            "nvidia_reference_labels.prom",
            ExpositionConfig(attribution="labels", hostname_label="Hostname", fleet_series=False),
        ),
    ],
)
def test_frames_without_shares_render_byte_for_byte_as_before(golden: str, config: ExpositionConfig) -> None:
    before = (DATA / golden).read_text()
    tuned = config.model_copy(
        update={"workload_series_sharing": ("all",), "workload_series_namespaces": ("*",), "workload_series_budget": 1}
    )
    assert Renderer(tuned).render(nvidia_reference_frame()) == before
    frame = nvidia_reference_frame()
    for i in range(len(frame.entities)):
        frame.set_shares(i, None)
    assert Renderer(tuned).render(frame) == before


# -- the store ---------------------------------------------------------------------------------------------------------
def test_store_keeps_the_same_attribution_series_as_metrics() -> None:
    frame = time_sliced_frame()
    frame.timestamp = 1_700_000_000.0
    ours = {n for n in FAMILIES} | {"gpufleet_gpu_pod_info", "gpufleet_gpu_job_info"}
    scraped = {(n, tuple(sorted(lab.items())), v) for n, lab, v in samples_of(frame, ExpositionConfig()) if n in ours}
    stored = {
        (lab["__name__"], tuple(sorted((k, x) for k, x in lab.items() if k != "__name__")), v)
        for lab, v in FrameSeries().all_samples(frame)
        if lab["__name__"] in ours
    }
    assert stored == scraped
    store = EmbeddedStore()
    store.ingest(frame)
    assert len(store.instant("gpufleet_gpu_pod_info")) == 5
    assert {s.labels["pod"] for s in store.instant('gpufleet_workload_gpu_utilization_ratio{method="measured"}')} == {
        "train-0",
        "train-1",
        "eval-0",
        "idle-0",
    }
    # holders leaving make a new label set: a value goes to its own workload's series, never to the series that
    # held the same place in the old one
    first = frame.shares[0]
    assert first is not None
    frame.set_shares(0, DeviceAttribution(Sharing.time_slicing, 4, first.shares[2:3], 24000.0, 0.8))
    store.ingest(frame, frame.timestamp + 1)
    memory = {s.labels["pod"]: s.value for s in store.instant("gpufleet_workload_gpu_memory_used_bytes")}
    assert memory == {"train-0": 10000 * MIB, "train-1": 8000 * MIB, "eval-0": 6000 * MIB, "idle-0": 0}
    latest = store.range(
        'gpufleet_workload_gpu_memory_used_bytes{pod="train-0"}', frame.timestamp, frame.timestamp + 1, 1
    )
    assert latest[0].values.tolist() == [10000 * MIB, 10000 * MIB]  # t+1 still sees its sample at t


# -- rules and the command line ----------------------------------------------------------------------------------------
def _selector(name: str, labels: dict[str, str]) -> str:
    body = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return f"{name}{{{body}}}"


@pytest.mark.real
def test_the_alerts_fire_on_what_the_agent_writes(tmp_path: Path) -> None:
    """promtool runs the generated rules on series labelled exactly as this renderer labels them."""
    require_tool("promtool")
    frame = MetricFrame(make_entities(1))
    set_device(frame, 0, fb=30000, util=95, copy=30, power=600.0, temp=70)
    shares = (
        share(holder("train-0"), 20000, 80),
        share(holder("notebook-3", "research", "jupyter"), 9000, 15, allotted=False),
    )
    frame.set_shares(0, DeviceAttribution(Sharing.exclusive, 1, shares, 1000, 0))
    (stray,) = named(samples_of(frame), "gpufleet_workload_gpu_unallotted")
    tight = samples_of(frame, NO_FLEET.model_copy(update={"workload_series_budget": 3}))
    (dropped,) = named(tight, "gpufleet_attribution_workload_series_dropped")
    assert dropped[2] == 7  # memory, utilization and processes of each, and the stray's mark
    node = {"instance": "gpu-node-01:9400", "job": "gpufleet-agent"}
    rules = {
        r["alert"]: r for g in rule_groups(xids=xid_ratings(), limits=detection_limits())["groups"] for r in g["rules"]
    }
    expected = []
    for alert, labels, value in (
        ("GpuWorkloadUnallotted", stray[1], 1.0),
        ("GpuAttributionBudgetExceeded", node, dropped[2]),
    ):
        rule = rules[alert]
        exp = {**labels, **rule["labels"]}
        notes = {k: render_annotation(t, exp, value) for k, t in rule["annotations"].items()}
        expected.append((alert, {"exp_labels": exp, "exp_annotations": notes}))
    tests = {
        "rule_files": [RULE_FILE],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {"series": _selector(stray[0], stray[1]), "values": "1x30"},
                    {"series": _selector(dropped[0], node), "values": f"{dropped[2]:g}x30"},
                ],
                "alert_rule_test": [
                    {"eval_time": "3m", "alertname": "GpuWorkloadUnallotted", "exp_alerts": []},
                    {"eval_time": "10m", "alertname": "GpuAttributionBudgetExceeded", "exp_alerts": []},
                    *({"eval_time": "20m", "alertname": a, "exp_alerts": [e]} for a, e in expected),
                ],
            }
        ],
    }
    (tmp_path / RULE_FILE).write_text(dump(rule_groups(xids=xid_ratings(), limits=detection_limits())))
    (tmp_path / "tests.yml").write_text(dump(tests))
    run = subprocess.run(["promtool", "test", "rules", "tests.yml"], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.real
def test_promtool_reads_the_exposition() -> None:
    require_tool("promtool")
    text = render(time_sliced_frame(), ExpositionConfig(workload_series_sharing=("all",)))
    run = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
    # dcgm-exporter's camelCase identity labels (modelName, UUID) are its names: the only lint promtool has
    problems = [ln for ln in (run.stdout + run.stderr).splitlines() if ln and "camelCase" not in ln]
    assert not problems


def test_agent_flags(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    got: list[ExpositionConfig] = []

    def fake_agent(**kwargs: Any) -> None:
        got.append(kwargs["exposition"])
        raise UserError("stopped by the test", fix="none")

    monkeypatch.setattr("gpufleet.agent.host.host_agent", fake_agent)
    here = ("--data-dir", str(tmp_path))
    ran = gpufleet(
        "agent", *here, "--workload-series", "namespace:ml", "--workload-series", "sharing:mps",
        "--workload-series-budget", "50",
    )  # fmt: skip
    assert "stopped by the test" in ran.stderr and ran.returncode != 0
    assert (got[0].workload_series_sharing, got[0].workload_series_namespaces, got[0].workload_series_budget) == (
        ("mps",),
        ("ml",),
        50,
    )
    gpufleet("agent", *here)
    assert (
        got[1].workload_series_sharing == ("time-slicing", "mps", "mig-time-slicing")
        and got[1].workload_series_budget == 2000
    )
    bad = gpufleet("agent", *here, "--workload-series", "pods:all")
    assert bad.returncode != 0 and "--workload-series 'pods:all' is not a selector" in bad.stderr
    assert len(got) == 2
    negative = gpufleet("agent", *here, "--workload-series-budget", "-5")
    assert negative.returncode != 0 and "--workload-series-budget" in negative.stderr
    assert "--workload-series" in gpufleet("agent", "--help", env={"COLUMNS": "200"}).stdout
