"""The processes on each GPU, for per-workload attribution: nvidia-smi's process outputs parsed exactly as captured,
and the NVML reader (and NvmlSource's MIG entities) run on a fake NVML that replays those captures."""

from __future__ import annotations

import contextlib
import json
import logging
import math

import pynvml
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.errors import ParseError
from gpufleet.model.attribution import GpuProcess
from gpufleet.parsers.nvidia.smi_processes import (
    ComputeApp,
    MigDeviceUsage,
    PmonSample,
    TableProcess,
    parse_compute_apps_csv,
    parse_mig_devices,
    parse_pmon,
    parse_process_table,
    parse_processes,
    process_reading,
)
from gpufleet.sources.gpu.nvml import NvmlSource
from gpufleet.sources.gpu.nvml_processes import NvmlProcesses
from gpufleet.telemetry.attribution import AttributionInputs, DeviceReading, attribute
from gpufleet.telemetry.frame import GpuEntity
from tests.clirun import gpufleet
from tests.conftest import CAPTURES
from tests.parsers.damage import JUNK, damaged
from tests.sources.gpu.fake_nvml import FakeGpu, FakeNvml, FakeProcess, host_from_capture

DATA = CAPTURES / "nvml_processes"
MASKED = "GPU-00000000-0000-0000-0000-000000000000"  # the exporter's captures mask the GPU UUID to this
T4 = "GPU-7d1e5f8a-0000-4000-8000-00000000e00b"  # stands in for the Azure T4's UUID, which the article does not print
A100 = {  # nvidia-smi -L of the nvgpu capture
    0: "GPU-2ac434d3-1aca-57a0-597d-1d2effdba9f3",
    1: "GPU-cd9ee947-34d2-d0fe-93e0-2195b3f2fd52",
    2: "GPU-67051dc2-cce1-4acf-d254-e76d938eda30",
    3: "GPU-30f9801c-a554-b6de-bd27-d5cefbf59291",
}


def text(name: str) -> str:
    return (DATA / name).read_text()


def h100_load() -> FakeNvml:
    table, pmon = text("nvsmi_h100_load_exporter.txt"), text("pmon_h100_load_exporter.txt")
    return FakeNvml(host_from_capture(table, pmon=pmon, uuids=(MASKED,), name="NVIDIA H100 80GB HBM3"))


def a100_mig() -> FakeNvml:
    return FakeNvml(host_from_capture(text("nvsmi_a100_mig_nvgpu.txt"), text("nvsmi_L_a100_mig_nvgpu.txt")))


def read(fake: FakeNvml) -> tuple[GpuProcess, ...]:
    return NvmlProcesses(fake, list(range(len(fake.gpus)))).read().processes


# ---- the Processes: table --------------------------------------------------------------------------------------


def test_time_sliced_t4_lists_two_compute_processes() -> None:
    assert parse_process_table(text("nvsmi_t4_timeslicing_azure.txt")) == [
        TableProcess(0, 197976, "C", "/tmp/nbody", 109.0),
        TableProcess(0, 198051, "C", "/tmp/nbody", 109.0),
    ]


def test_mps_clients_are_m_plus_c_and_the_server_is_a_compute_process() -> None:
    rows = parse_process_table(text("nvsmi_t4_mps_azure.txt"))
    assert [(r.pid, r.type, r.name, r.used_memory_mib, r.mps, r.compute) for r in rows] == [
        (144377, "M+C", "/tmp/nbody", 107.0, True, True),
        (144379, "M+C", "/tmp/nbody", 107.0, True, True),
        (144443, "C", "nvidia-cuda-mps-server", 25.0, False, True),
    ]


def test_mig_processes_carry_their_gpu_and_compute_instance() -> None:
    assert parse_process_table(text("nvsmi_a100_mig_nvgpu.txt")) == [
        TableProcess(0, 53522, "C", "python3", 16197.0, gpu_instance_id=1, compute_instance_id=0),
        TableProcess(1, 111478, "C", "python", 15077.0, gpu_instance_id=2, compute_instance_id=0),
        TableProcess(2, 1128, "C", "python", 15351.0, gpu_instance_id=0, compute_instance_id=0),
        TableProcess(3, 10179, "C", "python3", 21149.0, gpu_instance_id=0, compute_instance_id=0),
    ]
    h200 = parse_process_table(text("nvsmi_h200_mig_load_exporter.txt"))
    assert [(r.pid, r.gpu_instance_id, r.compute_instance_id, r.used_memory_mib) for r in h200] == [
        (12249, 2, 1, 2194.0),
        (12250, 2, 1, 1170.0),
        (12267, 2, 1, 13526.0),
    ]


def test_wddm_accounts_no_memory_and_names_keep_their_end() -> None:
    rows = parse_process_table(text("nvsmi_rtx2080s_wddm_load_exporter.txt"))
    assert len(rows) == 12 and all(r.used_memory_mib is None for r in rows)
    assert rows[1] == TableProcess(0, 4680, "C+G", "...e Experience\\NVIDIA Share.exe", None)
    assert rows[-1] == TableProcess(0, 26660, "C", "...1.1-full_build\\bin\\ffmpeg.exe", None)
    assert [r.type for r in rows].count("C+G") == 10 and all(r.compute for r in rows)


def test_a_pre_r450_table_has_no_instance_columns() -> None:
    # constructed from the layout drivers before R450 print (header as in heterodb/pg-strom issue #304, driver 375.66)
    table = """\
+-----------------------------------------------------------------------------+
| Processes:                                                       GPU Memory |
|  GPU       PID  Type  Process name                               Usage      |
|=============================================================================|
|    0     10452    C   ...bin/postgres: kaigai postgres [local] SELECT   867MiB |
|    0     10453    G   /usr/lib/xorg/Xorg                               13MiB |
+-----------------------------------------------------------------------------+
"""
    assert parse_process_table(table) == [
        TableProcess(0, 10452, "C", "...bin/postgres: kaigai postgres [local] SELECT", 867.0),
        TableProcess(0, 10453, "G", "/usr/lib/xorg/Xorg", 13.0),
    ]


def test_an_idle_gpu_has_no_processes() -> None:
    table = text("nvsmi_t4_timeslicing_azure.txt").split("|    0   N/A")[0] + (
        "|  No running processes found                                                 |\n"
        "+-----------------------------------------------------------------------------+\n"
    )
    assert parse_process_table(table) == []


def test_the_mig_devices_table_gives_each_instances_memory() -> None:
    assert parse_mig_devices(text("nvsmi_a100_mig_nvgpu.txt")) == [
        MigDeviceUsage(0, 1, 0, 0, 16214.0, 20096.0),
        MigDeviceUsage(0, 2, 0, 1, 11.0, 20096.0),
        MigDeviceUsage(1, 1, 0, 0, 11.0, 20096.0),
        MigDeviceUsage(1, 2, 0, 1, 15092.0, 20096.0),
        MigDeviceUsage(2, 0, 0, 0, 15356.0, 40537.0),
        MigDeviceUsage(3, 0, 0, 0, 21156.0, 40537.0),
    ]
    h200 = parse_mig_devices(text("nvsmi_h200_mig_load_exporter.txt"))
    assert [(d.gpu_instance_id, d.compute_instance_id, d.mig_device, d.memory_used_mib) for d in h200] == [
        (2, 0, 0, 16925.0),
        (2, 1, 1, 16925.0),  # two compute instances share their GPU instance's memory
        (3, 0, 2, 17.0),
        (9, 0, 3, 9.0),
        (10, 0, 4, 9.0),
    ]
    assert parse_mig_devices(text("nvsmi_h100_load_exporter.txt")) == []


# ---- --query-compute-apps --------------------------------------------------------------------------------------


def test_compute_apps_csv_with_the_physical_gpus_uuid() -> None:
    assert parse_compute_apps_csv(text("compute_apps_h100_mig_load_exporter.txt")) == [
        ComputeApp(21180, "/root/tools/memhog", MASKED, 2296.0, "00000000:00:09.0", "NVIDIA H100 80GB HBM3"),
        ComputeApp(21181, "/root/tools/memhog", MASKED, 1272.0, "00000000:00:09.0", "NVIDIA H100 80GB HBM3"),
        ComputeApp(21198, "./gpu_burn", MASKED, 7484.0, "00000000:00:09.0", "NVIDIA H100 80GB HBM3"),
    ]


def test_compute_apps_under_wddm_have_no_memory() -> None:
    apps = parse_compute_apps_csv(text("compute_apps_rtx2080s_wddm_load_exporter.txt"))
    assert len(apps) == 12 and all(a.used_memory_mib is None for a in apps)
    assert apps[4].name == "C:\\Program Files\\NZXT CAM\\NZXT CAM.exe"
    assert apps[4].as_process() == GpuProcess(20372, MASKED, name="C:\\Program Files\\NZXT CAM\\NZXT CAM.exe")


def test_compute_apps_without_header_name_their_fields() -> None:
    # the same rows as the H100 capture, printed with --format=csv,noheader,nounits
    body = "21180, /root/tools/memhog, 2296, GPU-00000000-0000-0000-0000-000000000000\n"
    apps = parse_compute_apps_csv(body, fields=["pid", "process_name", "used_memory", "gpu_uuid"])
    assert apps == [ComputeApp(21180, "/root/tools/memhog", MASKED, 2296.0)]
    with pytest.raises(ParseError, match="line 1 is no CSV header"):
        parse_compute_apps_csv(body)


def test_a_process_name_with_commas_keeps_them() -> None:
    csv = (
        "pid, process_name, used_gpu_memory [MiB]\n"
        "77, python -c import a, b, 100 MiB\n"
        "1758887, [Not Found], 58060 MiB\n"  # as an H200 host printed a process it could not name
    )
    assert parse_compute_apps_csv(csv) == [
        ComputeApp(77, "python -c import a, b", used_memory_mib=100.0),
        ComputeApp(1758887, "", used_memory_mib=58060.0),
    ]
    assert parse_compute_apps_csv("gpu_uuid, pid, used_gpu_memory [MiB]\n") == []  # no compute process


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("pid, process_name, used_gpu_memory [MiB]\nabc, python, 10 MiB\n", "line 2 has pid 'abc'"),
        ("pid, used_gpu_memory [MiB]\n12, 10 MiB, extra\n", "line 2 has 3 values for 2 columns"),
        ("pid, process_name, used_gpu_memory [MiB]\n\n12, python, lots\n", "line 3 has used_gpu_memory 'lots'"),
    ],
)
def test_malformed_compute_apps_name_the_line(body: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        parse_compute_apps_csv(body)


# ---- pmon ------------------------------------------------------------------------------------------------------


def test_pmon_gives_samples_only_to_processes_that_ran_kernels() -> None:
    samples = parse_pmon(text("pmon_h100_load_exporter.txt"))
    assert len(samples) == 15 and {s.cycle for s in samples} == {0, 1, 2, 3, 4}
    assert samples[:3] == [
        PmonSample(0, 11327, "C", None, None, None, None, name="memhog"),
        PmonSample(0, 11328, "C", None, None, None, None, name="memhog"),
        PmonSample(0, 11345, "C", 99.0, 10.0, None, None, name="gpu_burn"),
    ]
    assert [s.sampled for s in samples[:3]] == [False, False, True]


def test_pmon_with_frame_buffer_column_on_four_gpus() -> None:
    samples = parse_pmon(text("pmon_mu_4gpu_sonar.txt"))
    assert [(s.gpu, s.pid, s.fb_mib, s.sm_util, s.mem_util, s.name) for s in samples] == [
        (0, 447153, 7669.0, None, None, "python3.9"),
        (0, 447160, 11057.0, None, None, "python3.9"),
        (0, 506826, 11057.0, None, None, "python3.9"),
        (0, 1864615, 1635.0, 40.0, 0.0, "python"),
        (1, 1864615, 535.0, None, None, "python"),
        (1, 2233095, 24395.0, 84.0, 23.0, "python3"),
        (2, 1864615, 535.0, None, None, "python"),
        (2, 1448150, 9383.0, None, None, "python3"),
        (3, 1864615, 535.0, None, None, "python"),
        (3, 2233469, 15771.0, 90.0, 23.0, "python3"),
    ]
    assert {s.cycle for s in samples} == {0}


def test_pmon_names_with_spaces_and_an_encoder_only_sample() -> None:
    samples = parse_pmon(text("pmon_rtx2080s_wddm_load_exporter.txt"))
    assert len(samples) == 60 and max(s.cycle for s in samples) == 4
    share = samples[1]
    assert (share.pid, share.type, share.name, share.sampled) == (4680, "C+G", "NVIDIA Share.exe", False)
    encoder = [s for s in samples if s.pid == 26660][-1]
    assert (encoder.sm_util, encoder.enc_util, encoder.sampled) == (None, 99.0, True)


def test_pmon_of_a_mig_gpu_has_no_samples() -> None:
    assert not any(s.sampled for s in parse_pmon(text("pmon_h100_mig_load_exporter.txt")))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("    0      11327     C      -      -   memhog\n", "line 1 comes before any `# gpu pid ...` header"),
        ("# gpu  pid  type  sm  mem  command\n    x   12   C   1   2   a\n", "line 2 has GPU 'x'"),
        ("# gpu  pid  type  sm  mem  command\n# Idx # C/G % % name\n    0   12   C   1\n", "line 3 has 4 values"),
        ("# gpu  pid  type  sm  mem  command\n    0   12   C   high   2   a\n", "line 2 has sm 'high'"),
    ],
)
def test_malformed_pmon_names_the_line(body: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        parse_pmon(body)


def test_malformed_tables_name_the_line() -> None:
    broken = text("nvsmi_t4_mps_azure.txt").replace("144379    M+C", "14437x    M+C")
    with pytest.raises(ParseError, match="line 20 is not a process row"):
        parse_process_table(broken)
    with pytest.raises(ParseError, match="no Processes: table"):
        parse_process_table(text("pmon_h100_load_exporter.txt"))
    mig = text("nvsmi_a100_mig_nvgpu.txt").replace("|  0    2   0   1  |     11MiB", "|  0    2   0   1  |     11GiB")
    with pytest.raises(ParseError, match="line 36 is not a MIG device row"):
        parse_mig_devices(mig)


def test_any_capture_is_told_apart_by_shape() -> None:
    assert parse_processes(text("nvsmi_h100_mig_load_exporter.txt")).format == "table"
    assert len(parse_processes(text("nvsmi_h100_mig_load_exporter.txt")).mig_devices) == 4
    assert parse_processes(text("pmon_mu_4gpu_sonar.txt")).format == "pmon"
    assert parse_processes(text("compute_apps_h100_load_exporter.txt")).format == "compute-apps"


def test_a_table_and_pmon_make_a_process_reading() -> None:
    rows = parse_process_table(text("nvsmi_h100_load_exporter.txt"))
    reading = process_reading(rows, {0: MASKED}, parse_pmon(text("pmon_h100_load_exporter.txt")))
    assert reading.sampled == {MASKED}
    assert [(p.pid, p.used_memory_mib, p.sm_util, p.mem_util) for p in reading.processes] == [
        (11327, 2566.0, 0.0, 0.0),
        (11328, 1542.0, 0.0, 0.0),
        (11345, 15690.0, 99.0, 10.0),
    ]
    mig = process_reading(parse_process_table(text("nvsmi_h100_mig_load_exporter.txt")), {0: MASKED}, [])
    assert mig.sampled == frozenset() and {p.gpu_instance_id for p in mig.processes} == {2}


def test_gpufleet_read_shows_the_processes() -> None:
    run = gpufleet("read", "nvidia-smi-processes", str(DATA / "nvsmi_t4_mps_azure.txt"), "-o", "json")
    assert run.returncode == 0, run.stderr
    rows = json.loads(run.stdout)["processes"]
    assert [(r["pid"], r["type"]) for r in rows] == [(144377, "M+C"), (144379, "M+C"), (144443, "C")]


# ---- NvmlProcesses on a replayed capture -----------------------------------------------------------------------


def test_time_shared_h100_processes_and_their_samples() -> None:
    reading = NvmlProcesses(h100_load(), [0]).read()
    assert reading.sampled == {MASKED}
    assert reading.processes == (
        GpuProcess(11327, MASKED, None, 2566.0, 0.0, 0.0, name="/root/tools/memhog"),  # no sample: no kernel
        GpuProcess(11328, MASKED, None, 1542.0, 0.0, 0.0, name="/root/tools/memhog"),
        GpuProcess(11345, MASKED, None, 15690.0, 99.0, 10.0, name="./gpu_burn"),
    )
    # the memory NVML accounts is what --query-compute-apps printed at the same moment
    csv = parse_compute_apps_csv(text("compute_apps_h100_load_exporter.txt"))
    assert {a.pid: a.used_memory_mib for a in csv} == {p.pid: p.used_memory_mib for p in reading.processes}


def test_samples_are_read_since_the_last_one_seen() -> None:
    fake = h100_load()
    reader = NvmlProcesses(fake, [0])
    reader.read()
    second = reader.read()  # nothing newer: NOT_FOUND, still sampled, everyone idle
    assert [s for fn, s in fake.calls if fn == "lastSeenTimeStamp"] == [0, 5_000_000]
    assert second.sampled == {MASKED} and [p.sm_util for p in second.processes] == [0.0, 0.0, 0.0]
    fake.gpus[0].samples.append((11327, 6_000_000, 12, 3))
    third = reader.read()
    assert [(p.pid, p.sm_util, p.mem_util) for p in third.processes if p.sm_util] == [(11327, 12.0, 3.0)]


def test_samples_average_over_the_interval_and_wddm_memory_is_unknown() -> None:
    table, pmon = text("nvsmi_rtx2080s_wddm_load_exporter.txt"), text("pmon_rtx2080s_wddm_load_exporter.txt")
    processes = read(FakeNvml(host_from_capture(table, pmon=pmon, uuids=(MASKED,))))
    assert len(processes) == 12 and all(p.used_memory_mib is None for p in processes)
    by_pid = {p.pid: p for p in processes}
    assert (by_pid[25704].sm_util, by_pid[25704].mem_util) == pytest.approx((5.4, 1.6))  # 3, 3, 7, 7, 7
    assert (by_pid[26660].sm_util, by_pid[26660].mem_util) == pytest.approx((1.2, 0.4))  # encoder-only cycles: 0
    assert by_pid[2056].sm_util == 0.0


def test_mps_clients_are_marked_and_the_gpu_is_not_sampled() -> None:
    fake = FakeNvml(host_from_capture(text("nvsmi_t4_mps_azure.txt"), uuids=(T4,), name="Tesla T4"))
    reading = NvmlProcesses(fake, [0]).read()
    assert reading.sampled == frozenset()
    assert reading.processes == (
        GpuProcess(144377, T4, None, 107.0, mps=True, name="/tmp/nbody"),
        GpuProcess(144379, T4, None, 107.0, mps=True, name="/tmp/nbody"),
        GpuProcess(144443, T4, None, 25.0, mps=False, name="nvidia-cuda-mps-server"),
    )


def test_an_mps_client_only_in_the_mps_list_is_kept() -> None:
    gpus = host_from_capture(text("nvsmi_t4_mps_azure.txt"), uuids=(T4,))
    gpus[0].processes[0].compute = False  # type M: an MPS context only
    assert [(p.pid, p.mps) for p in read(FakeNvml(gpus))] == [(144379, True), (144443, False), (144377, True)]


def test_not_found_means_sampled_and_idle() -> None:
    fake = FakeNvml(host_from_capture(text("nvsmi_t4_timeslicing_azure.txt"), uuids=(T4,)))
    reading = NvmlProcesses(fake, [0]).read()
    assert reading.sampled == {T4} and [(p.pid, p.sm_util) for p in reading.processes] == [(197976, 0.0), (198051, 0.0)]


def test_not_supported_means_not_sampled_and_is_not_a_failure(caplog: pytest.LogCaptureFixture) -> None:
    gpus = host_from_capture(text("nvsmi_t4_timeslicing_azure.txt"), uuids=(T4,))
    gpus[0].sampling = False  # a GPU before Maxwell
    with caplog.at_level(logging.WARNING, logger="gpufleet.nvml"):
        reading = NvmlProcesses(FakeNvml(gpus), [0]).read()
    assert reading.sampled == frozenset() and [p.sm_util for p in reading.processes] == [None, None]
    assert not caplog.records


def test_mig_processes_are_placed_in_their_gpu_instance() -> None:
    fake = a100_mig()
    reading = NvmlProcesses(fake, [0, 1, 2, 3]).read()
    assert reading.sampled == frozenset()  # MIG mode keeps no per-process samples
    assert [(p.pid, p.gpu_uuid, p.gpu_instance_id, p.used_memory_mib) for p in reading.processes] == [
        (53522, A100[0], 1, 16197.0),
        (111478, A100[1], 2, 15077.0),
        (1128, A100[2], 0, 15351.0),
        (10179, A100[3], 0, 21149.0),
    ]
    assert not any(fn == "nvmlDeviceGetMigDeviceHandleByIndex" for fn, _ in fake.calls)  # the parent's list sufficed
    assert not any(fn == "nvmlDeviceGetProcessUtilization" for fn, _ in fake.calls)


def test_a_parent_list_without_instance_ids_is_completed_per_mig_device() -> None:
    fake = a100_mig()
    for gpu in fake.gpus:
        gpu.instance_ids_in_list = False  # bindings of the v1 struct: pid and memory only
    processes = read(fake)
    assert [(p.pid, p.gpu_instance_id, p.used_memory_mib) for p in processes] == [
        (53522, 1, 16197.0),
        (111478, 2, 15077.0),
        (1128, 0, 15351.0),
        (10179, 0, 21149.0),
    ]


def test_an_unprivileged_caller_reads_each_mig_device() -> None:
    gpus = host_from_capture(text("nvsmi_h200_mig_load_exporter.txt"), text("nvsmi_L_h200_mig_exporter.txt"))
    # NVML lists a MIG GPU's processes on its own handle only to a privileged caller
    gpus[0].failing_parent["nvmlDeviceGetComputeRunningProcesses"] = pynvml.NVML_ERROR_NO_PERMISSION
    fake = FakeNvml(gpus)
    processes = read(fake)
    # GI 2 is split in two compute instances; the processes run in CI 1, the second MIG device
    assert [(p.pid, p.gpu_instance_id, p.used_memory_mib) for p in processes] == [
        (12249, 2, 2194.0),
        (12250, 2, 1170.0),
        (12267, 2, 13526.0),
    ]
    assert ("nvmlDeviceGetComputeRunningProcesses", (0, 1)) in fake.calls
    gpus[0].failing["nvmlDeviceGetComputeRunningProcesses"] = pynvml.NVML_ERROR_NO_PERMISSION
    assert read(FakeNvml(gpus)) == ()  # neither would list: nothing is claimed for the GPU


def test_bindings_newer_than_the_driver_fall_back_to_v2() -> None:
    fake = h100_load()
    fake.gpus[0].mismatched.add("nvmlDeviceGetComputeRunningProcesses")  # a driver before R510 has no _v3 entry point
    assert [p.pid for p in read(fake)] == [11327, 11328, 11345]
    assert ("nvmlDeviceGetComputeRunningProcesses_v2", 0) in fake.calls


def test_one_failing_gpu_loses_only_its_own_processes(caplog: pytest.LogCaptureFixture) -> None:
    fake = a100_mig()
    fake.gpus[1].failing["nvmlDeviceGetComputeRunningProcesses"] = pynvml.NVML_ERROR_GPU_IS_LOST
    fake.gpus[2].failing["nvmlDeviceGetUUID"] = pynvml.NVML_ERROR_UNKNOWN
    reader = NvmlProcesses(fake, [0, 1, 2, 3])
    with caplog.at_level(logging.WARNING, logger="gpufleet.nvml"):
        first = reader.read()
        said = [r.getMessage() for r in caplog.records]
        second = reader.read()
    assert [p.pid for p in first.processes] == [53522, 10179] == [p.pid for p in second.processes]
    assert said == [
        "GPU 1: compute processes unavailable: GPU is lost",
        "GPU 1: compute processes of MIG device 0 unavailable: GPU is lost",  # its MIG devices were tried too
        "GPU 1: compute processes of MIG device 1 unavailable: GPU is lost",
        "GPU 2: UUID unavailable: Unknown Error",
    ]
    assert len(caplog.records) == len(said)  # said once, not every collection
    fake.gpus[1].failing = {}
    assert [p.pid for p in reader.read().processes] == [53522, 111478, 10179]


def test_a_name_nvml_cannot_resolve_stays_empty_and_is_asked_once() -> None:
    fake = h100_load()
    fake.unnamed.add(11345)
    reader = NvmlProcesses(fake, [0])
    reader.read()
    processes = reader.read().processes
    assert [p.name for p in processes] == ["/root/tools/memhog", "/root/tools/memhog", ""]
    assert [a for fn, a in fake.calls if fn == "nvmlSystemGetProcessName"].count(11345) == 1


def test_of_reads_an_nvml_sources_gpus() -> None:
    source = NvmlSource("node-1", h100_load())
    reader = NvmlProcesses.of(source)
    assert reader.name == "nvml-processes" and [p.pid for p in reader.read().processes] == [11327, 11328, 11345]


# ---- NvmlSource: MIG instances as entities ---------------------------------------------------------------------


def test_a_mig_gpu_is_one_entity_per_gpu_instance() -> None:
    gpus = host_from_capture(text("nvsmi_h100_mig_load_exporter.txt"), text("nvsmi_L_h100_mig_exporter.txt"))
    source = NvmlSource("node-1", FakeNvml(gpus))
    entities = source.entities()
    assert [(e.gpu, e.uuid, e.mig_profile, e.gpu_instance_id, e.mig_uuid) for e in entities] == [
        (0, MASKED, "3g.40gb", 2, "MIG-00000000-0000-0000-0000-000000000000"),
        (0, MASKED, "2g.20gb", 3, "MIG-00000001-0000-0000-0000-000000000001"),
        (0, MASKED, "1g.10gb", 9, "MIG-00000002-0000-0000-0000-000000000002"),
        (0, MASKED, "1g.10gb", 10, "MIG-00000003-0000-0000-0000-000000000003"),
    ]
    assert {(e.device, e.model_name, e.pci_bus_id) for e in entities} == {
        ("nvidia0", "NVIDIA H100 80GB HBM3", "00000000:00:00.0")
    }
    frame = source.new_frame()
    source.collect(frame)
    assert frame.gpu("DCGM_FI_DEV_FB_USED").tolist() == [11091.0, 17.0, 9.0, 9.0]
    assert frame.gpu("DCGM_FI_DEV_FB_FREE").tolist() == [40448 - 11091.0, 20096 - 17.0, 9984 - 9.0, 9984 - 9.0]
    assert all(math.isnan(v) for v in frame.gpu("DCGM_FI_DEV_GPU_UTIL"))  # no reading in MIG mode
    gpus[0].temperature_c = 41
    source.collect(frame)
    assert frame.gpu("DCGM_FI_DEV_GPU_TEMP").tolist() == [41.0] * 4  # the GPU's, on each instance as dcgm-exporter


def test_a_split_gpu_instance_takes_its_gpu_instance_profile_and_first_mig_device() -> None:
    gpus = host_from_capture(text("nvsmi_h200_mig_load_exporter.txt"), text("nvsmi_L_h200_mig_exporter.txt"))
    first = NvmlSource("n", FakeNvml(gpus)).entities()[0]
    assert (first.mig_profile, first.gpu_instance_id) == ("3g.71gb", 2)  # its MIG devices are 1c.3g.71gb, 2c...
    assert first.mig_uuid == "MIG-00000000-0000-0000-0000-000000000000"  # compute instance 0's


def test_legacy_mig_uuids_and_a_whole_gpu_instance() -> None:
    entities = NvmlSource("n", a100_mig()).entities()
    assert [(e.gpu, e.mig_profile, e.gpu_instance_id, e.mig_uuid) for e in entities] == [
        (0, "3g.20gb", 1, f"MIG-{A100[0]}/1/0"),
        (0, "3g.20gb", 2, f"MIG-{A100[0]}/2/0"),
        (1, "3g.20gb", 1, f"MIG-{A100[1]}/1/0"),
        (1, "3g.20gb", 2, f"MIG-{A100[1]}/2/0"),
        (2, "7g.40gb", 0, f"MIG-{A100[2]}/0/0"),
        (3, "7g.40gb", 0, f"MIG-{A100[3]}/0/0"),
    ]


def test_a_mig_device_without_a_profile_in_its_name_takes_the_profile_info() -> None:
    gpus = host_from_capture(text("nvsmi_h100_mig_load_exporter.txt"), text("nvsmi_L_h100_mig_exporter.txt"))
    for mig in gpus[0].migs:
        mig.name = "NVIDIA H100 80GB HBM3"  # a name without "MIG <profile>"
    entities = NvmlSource("n", FakeNvml(gpus)).entities()
    # nvmlGpuInstanceGetInfo's profile id, then that profile's info ("MIG 3g.40gb" as -L names it)
    assert [e.mig_profile for e in entities] == ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]


def test_whole_gpus_stay_as_before_beside_a_mig_gpu() -> None:
    mig = host_from_capture(text("nvsmi_h100_mig_load_exporter.txt"), text("nvsmi_L_h100_mig_exporter.txt"))[0]
    whole = FakeGpu("GPU-1f2e3d4c-0000-4000-8000-000000000001", "NVIDIA H100 80GB HBM3", "00000000:18:00.0", 1)
    whole.used_mib, whole.total_mib = 19818.0, 81559.0
    pending = FakeGpu("GPU-1f2e3d4c-0000-4000-8000-000000000002", "NVIDIA H100 80GB HBM3", "00000000:2A:00.0", 2)
    pending.mig_mode = (0, 1)  # enabled at the next reset: still a whole GPU
    source = NvmlSource("node-1", FakeNvml([mig, whole, pending]))
    entities = source.entities()
    assert entities[4:] == [
        GpuEntity(
            gpu=1, uuid=whole.uuid, model_name=whole.name, hostname="node-1", pci_bus_id="00000000:18:00.0",
            device="nvidia1", label_fields=(("DCGM_FI_DRIVER_VERSION", "590.48.01"),),
        ),
        GpuEntity(
            gpu=2, uuid=pending.uuid, model_name=pending.name, hostname="node-1", pci_bus_id="00000000:2A:00.0",
            device="nvidia2", label_fields=(("DCGM_FI_DRIVER_VERSION", "590.48.01"),),
        ),
    ]  # fmt: skip
    frame = source.new_frame()
    source.collect(frame)
    assert frame.gpu("DCGM_FI_DEV_FB_USED").tolist()[3:5] == [9.0, 19818.0]


def test_a_failing_instance_reading_is_logged_once_with_its_gpu(caplog: pytest.LogCaptureFixture) -> None:
    gpus = host_from_capture(text("nvsmi_a100_mig_nvgpu.txt"), text("nvsmi_L_a100_mig_nvgpu.txt"))
    source = NvmlSource("n", FakeNvml(gpus))
    frame = source.new_frame()
    gpus[1].failing["nvmlDeviceGetMemoryInfo"] = pynvml.NVML_ERROR_GPU_IS_LOST
    with caplog.at_level(logging.WARNING, logger="gpufleet.nvml"):
        source.collect(frame)
        source.collect(frame)
    used = frame.gpu("DCGM_FI_DEV_FB_USED").tolist()
    assert used[:2] == [16214.0, 11.0] and math.isnan(used[2]) and math.isnan(used[3]) and used[4:] == [15356, 21156]
    assert sorted(r.getMessage() for r in caplog.records if "GPU instance" in r.getMessage()) == [
        "GPU 1: DCGM_FI_DEV_FB_FREE of GPU instance 1 unavailable: GPU is lost",
        "GPU 1: DCGM_FI_DEV_FB_FREE of GPU instance 2 unavailable: GPU is lost",
        "GPU 1: DCGM_FI_DEV_FB_USED of GPU instance 1 unavailable: GPU is lost",
        "GPU 1: DCGM_FI_DEV_FB_USED of GPU instance 2 unavailable: GPU is lost",
    ]


def test_processes_land_in_their_mig_entity_for_attribution() -> None:
    gpus = host_from_capture(text("nvsmi_h100_mig_load_exporter.txt"), text("nvsmi_L_h100_mig_exporter.txt"))
    source = NvmlSource("n", FakeNvml(gpus))
    entities = source.entities()
    reading = NvmlProcesses.of(source).read()
    result = attribute(entities, [DeviceReading(memory_used_mib=11091.0)] * 4, AttributionInputs(processes=reading))
    assert result.notes == []
    gi2 = result.devices[0]
    assert gi2 is not None and gi2.unattributed_memory_mib == 11091.0  # no holder: every process is the remainder
    assert result.devices[1:] == [None, None, None]


def test_a_v1_process_without_memory_is_none() -> None:
    gpu = FakeGpu(T4, "Tesla T4", processes=[FakeProcess(4242, None, name="python")], instance_ids_in_list=False)
    assert read(FakeNvml([gpu])) == (GpuProcess(4242, T4, None, None, 0.0, 0.0, name="python"),)


# ---- damaged input ---------------------------------------------------------------------------------------------

CAPTURES = sorted(p.name for p in DATA.glob("*.txt") if not p.name.endswith(".source.txt"))


@pytest.mark.parametrize("name", CAPTURES)
def test_every_capture_has_its_provenance_and_reads(name: str) -> None:
    assert (DATA / name.replace(".txt", ".source.txt")).exists()
    if not name.startswith("nvsmi_L_"):
        report = parse_processes(text(name), name)
        assert report.processes or report.compute_apps or report.pmon, name


@pytest.mark.parametrize("name", [n for n in CAPTURES if not n.startswith("nvsmi_L_")])
def test_damaged_captures_fail_only_as_parse_errors(name: str) -> None:
    for copy in damaged(text(name), name, 80, (*JUNK, "MiB", "²")):
        with contextlib.suppress(ParseError):
            parse_processes(copy, name)


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=300))
def test_random_text_fails_only_as_parse_errors(noise: str) -> None:
    for parse in (parse_processes, parse_process_table, parse_mig_devices, parse_compute_apps_csv, parse_pmon):
        with contextlib.suppress(ParseError):
            parse(noise)
