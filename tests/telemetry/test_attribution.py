"""The attribution rules: who used what of each GPU or MIG instance, measured or estimated, and the remainder."""

from __future__ import annotations

import math

import pytest

from gpufleet.model.attribution import Allotment, Attribution, GpuProcess, ProcessReading, Sharing
from gpufleet.telemetry.attribution import (
    COMPUTE_TOLERANCE_PCT,
    ESTIMATED,
    MEASURED,
    AttributionInputs,
    Attributor,
    DeviceReading,
    DeviceRef,
    attribute,
    parse_device_id,
)
from gpufleet.telemetry.frame import GpuEntity

A = Attribution("nb-a", "team-a", "lab")
B = Attribution("nb-b", "team-b", "lab")
C = Attribution("nb-c", "team-b", "lab")
GPU = GpuEntity(0, "GPU-aaaa", "NVIDIA H100 80GB HBM3", "n1")
MIG1 = GpuEntity(
    1, "GPU-bbbb", "NVIDIA A100-SXM4-80GB", "n1", mig_profile="1g.10gb", gpu_instance_id=7, mig_uuid="MIG-1"
)
MIG2 = GpuEntity(
    1, "GPU-bbbb", "NVIDIA A100-SXM4-80GB", "n1", mig_profile="3g.40gb", gpu_instance_id=2, mig_uuid="MIG-2"
)


@pytest.mark.parametrize(
    ("device_id", "ref"),
    [
        ("GPU-aaaa", DeviceRef("GPU-aaaa")),
        ("GPU-aaaa::3", DeviceRef("GPU-aaaa", 3)),
        ("MIG-1", DeviceRef("MIG-1")),
        ("MIG-1::0", DeviceRef("MIG-1", 0)),
        ("MIG-GPU-bbbb/7/0", DeviceRef("MIG-GPU-bbbb/7/0", parent="GPU-bbbb", gpu_instance_id=7)),
        ("2", DeviceRef("", index=2)),
        ("2.7", DeviceRef("", gpu_instance_id=7, index=2)),
        ("gpu-5", DeviceRef("", minor=5)),
        ("GPU-aaaa::x", DeviceRef("GPU-aaaa")),
    ],
)
def test_device_ids_as_the_device_plugins_write_them(device_id: str, ref: DeviceRef) -> None:
    assert parse_device_id(device_id) == ref


def _proc(
    pid: int, gpu: str = "GPU-aaaa", mem: float | None = 1000.0, sm: float | None = None, **kw: object
) -> GpuProcess:
    return GpuProcess(pid, gpu, used_memory_mib=mem, sm_util=sm, **kw)  # type: ignore[arg-type]


def test_an_exclusive_gpu_gives_its_holder_the_device_values_measured() -> None:
    inputs = AttributionInputs(
        allotments=(Allotment("GPU-aaaa", A),),
        processes=ProcessReading((_proc(10, mem=30_000), _proc(11, mem=2_000))),
        owners={10: A, 11: A},
    )
    (dev,) = attribute([GPU], [DeviceReading(33_000, 87, 40, 610)], inputs).devices
    assert dev is not None and dev.sharing is Sharing.exclusive and dev.replicas == 1
    (share,) = dev.shares
    assert (share.memory_mib, share.compute_pct, share.compute_method) == (32_000, 87, MEASURED)
    assert (share.power_w, share.power_method, share.mem_util_pct, share.processes) == (610, MEASURED, 40, 2)
    assert dev.unattributed_memory_mib == 1_000 and dev.unattributed_compute_pct == 0


def test_time_slicing_splits_by_each_process_own_samples_never_the_device_value() -> None:
    inputs = AttributionInputs(
        allotments=(Allotment("GPU-aaaa::0", A), Allotment("GPU-aaaa::1", B), Allotment("GPU-aaaa::2", C)),
        processes=ProcessReading(
            (_proc(10, mem=4_000, sm=30), _proc(11, mem=6_000, sm=25), _proc(12, mem=500)), frozenset({"GPU-aaaa"})
        ),
        owners={10: A, 11: B, 12: C},
        replicas={"GPU-aaaa": 4},
    )
    (dev,) = attribute([GPU], [DeviceReading(11_000, 57, math.nan, 300)], inputs).devices
    assert dev is not None and dev.sharing is Sharing.time_slicing and dev.replicas == 4
    assert [(s.holder, s.memory_mib, s.compute_pct, s.compute_method) for s in dev.shares] == [
        (A, 4_000, 30, MEASURED),
        (B, 6_000, 25, MEASURED),
        (C, 500, 0, MEASURED),  # sampled GPU, no sample: it ran no kernel
    ]
    assert dev.unattributed_memory_mib == 500 and dev.unattributed_compute_pct == 2
    assert [s.power_method for s in dev.shares] == [ESTIMATED] * 3
    assert sum(s.power_w for s in dev.shares) == pytest.approx(300)


def test_measured_parts_beyond_the_tolerance_are_scaled_to_the_device() -> None:
    inputs = AttributionInputs(
        allotments=(Allotment("GPU-aaaa::0", A), Allotment("GPU-aaaa::1", B)),
        processes=ProcessReading((_proc(10, sm=60), _proc(11, sm=60)), frozenset({"GPU-aaaa"})),
        owners={10: A, 11: B},
    )
    (dev,) = attribute([GPU], [DeviceReading(2_000, 90)], inputs).devices
    assert dev is not None
    assert [s.compute_pct for s in dev.shares] == [45, 45]
    assert dev.compute_excess_pct == 30 > COMPUTE_TOLERANCE_PCT


def test_mps_clients_have_no_samples_of_their_own_so_compute_is_estimated() -> None:
    inputs = AttributionInputs(
        allotments=(Allotment("GPU-aaaa::0", A), Allotment("GPU-aaaa::1", B), Allotment("GPU-aaaa::2", C)),
        processes=ProcessReading(
            (_proc(9, mem=30, sm=80, name="nvidia-cuda-mps-server"), _proc(10, mps=True), _proc(11, mps=True)),
            frozenset({"GPU-aaaa"}),  # the samples NVML keeps are the server's
        ),
        owners={10: A, 11: B},
    )
    (dev,) = attribute([GPU], [DeviceReading(2_100, 80)], inputs).devices
    assert dev is not None and dev.sharing is Sharing.mps
    assert [(s.compute_pct, s.compute_method) for s in dev.shares] == [(40, ESTIMATED), (40, ESTIMATED), (0, ESTIMATED)]
    assert [s.memory_mib for s in dev.shares] == [1_000, 1_000, 0]
    assert dev.unattributed_memory_mib == 100  # the MPS server and the driver


def test_mig_instances_are_attributed_each_to_its_own_pod() -> None:
    inputs = AttributionInputs(
        allotments=(Allotment("MIG-1", A), Allotment("MIG-GPU-bbbb/2/0", B)),
        processes=ProcessReading(
            (_proc(10, "GPU-bbbb", 5_000, gpu_instance_id=7), _proc(11, "GPU-bbbb", 20_000, gpu_instance_id=2)),
            frozenset({"GPU-bbbb"}),  # samples on the parent mean nothing for an instance
        ),
        owners={10: A, 11: B},
    )
    one, two = attribute([MIG1, MIG2], [DeviceReading(5_300, 60), DeviceReading(20_100)], inputs).devices
    assert one is not None and one.sharing is Sharing.mig and one.shares[0].holder == A
    assert (one.shares[0].memory_mib, one.shares[0].compute_pct, one.shares[0].compute_method) == (5_000, 60, MEASURED)
    assert math.isnan(one.shares[0].power_w)  # an instance has no power reading of its own
    assert two is not None and two.shares[0].holder == B and math.isnan(two.shares[0].compute_pct)


def test_a_time_sliced_mig_instance_is_split_evenly_and_said_estimated() -> None:
    inputs = AttributionInputs(
        allotments=(Allotment("MIG-2::0", A), Allotment("MIG-2::1", B)),
        processes=ProcessReading((_proc(10, "GPU-bbbb", 1_000, sm=90, gpu_instance_id=2),)),
        owners={10: A},
    )
    (_, dev) = attribute([MIG1, MIG2], [DeviceReading(), DeviceReading(1_200, 50)], inputs).devices
    assert dev is not None and dev.sharing is Sharing.mig_shared
    assert [(s.compute_pct, s.compute_method) for s in dev.shares] == [(50, ESTIMATED), (0, ESTIMATED)]


def test_without_a_pid_map_a_shared_gpu_memory_is_unknown_and_compute_estimated() -> None:
    inputs = AttributionInputs(
        allotments=(Allotment("GPU-aaaa::0", A), Allotment("GPU-aaaa::1", B)),
        processes=ProcessReading((_proc(10, sm=30), _proc(11, sm=20)), frozenset({"GPU-aaaa"})),
        owners=None,
    )
    (dev,) = attribute([GPU], [DeviceReading(2_500, 50)], inputs).devices
    assert dev is not None
    assert all(math.isnan(s.memory_mib) for s in dev.shares)
    assert [(s.compute_pct, s.compute_method) for s in dev.shares] == [(25, ESTIMATED), (25, ESTIMATED)]
    assert math.isnan(dev.unattributed_memory_mib)


def test_without_a_pid_map_a_single_holder_still_owns_every_process() -> None:
    inputs = AttributionInputs(allotments=(Allotment("GPU-aaaa", A),), processes=ProcessReading((_proc(10),)))
    (dev,) = attribute([GPU], [DeviceReading(1_200, 10)], inputs).devices
    assert dev is not None and dev.shares[0].memory_mib == 1_000


def test_a_process_of_no_workload_is_the_devices_remainder() -> None:
    inputs = AttributionInputs(
        allotments=(Allotment("GPU-aaaa", A),),
        processes=ProcessReading((_proc(10, mem=1_000), _proc(99, mem=700))),
        owners={10: A},
    )
    (dev,) = attribute([GPU], [DeviceReading(2_000, 10)], inputs).devices
    assert dev is not None and dev.shares[0].memory_mib == 1_000 and dev.unattributed_memory_mib == 1_000


def test_a_pod_using_a_gpu_it_was_not_given_is_named_and_flagged() -> None:
    inputs = AttributionInputs(
        allotments=(Allotment("GPU-aaaa", A),),
        processes=ProcessReading((_proc(10, sm=10), _proc(20, mem=500, sm=5)), frozenset({"GPU-aaaa"})),
        owners={10: A, 20: B},
    )
    (dev,) = attribute([GPU], [DeviceReading(1_600, 15)], inputs).devices
    assert dev is not None
    assert [(s.holder, s.allotted, s.memory_mib, s.compute_pct) for s in dev.shares] == [
        (A, True, 1_000, 10),
        (B, False, 500, 5),
    ]


def test_slurm_jobs_hold_gpus_by_index_and_instance() -> None:
    j1, j2 = Attribution(hpc_job="4101"), Attribution(hpc_job="4102")
    inputs = AttributionInputs(
        allotments=(Allotment("0", j1), Allotment("0", j2), Allotment("1.7", j2)),
        processes=ProcessReading(
            (_proc(10, sm=40), _proc(11, mem=3_000, sm=20), _proc(12, "GPU-bbbb", 900, gpu_instance_id=7)),
            frozenset({"GPU-aaaa"}),
        ),
        owners={10: j1, 11: j2, 12: j2},
    )
    gpu, mig, other = attribute(
        [GPU, MIG1, MIG2], [DeviceReading(4_500, 60), DeviceReading(1_000), DeviceReading()], inputs
    ).devices
    assert gpu is not None and [(s.holder.hpc_job, s.memory_mib, s.compute_pct) for s in gpu.shares] == [
        ("4101", 1_000, 40),
        ("4102", 3_000, 20),
    ]
    assert mig is not None and mig.shares[0].holder == j2 and mig.shares[0].memory_mib == 900
    assert other is None


def test_without_process_data_compute_is_split_among_all_holders() -> None:
    inputs = AttributionInputs(allotments=(Allotment("GPU-aaaa::0", A), Allotment("GPU-aaaa::1", B)))
    (dev,) = attribute([GPU], [DeviceReading(2_000, 40)], inputs).devices
    assert dev is not None and [(s.compute_pct, s.compute_method) for s in dev.shares] == [(20, ESTIMATED)] * 2
    assert all(math.isnan(s.memory_mib) for s in dev.shares)


def test_a_holder_given_two_replicas_of_one_gpu_is_one_workload() -> None:
    inputs = AttributionInputs(allotments=(Allotment("GPU-aaaa::0", A), Allotment("GPU-aaaa::1", A)))
    (dev,) = attribute([GPU], [DeviceReading(0, 0)], inputs).devices
    assert dev is not None and dev.holders == (A,) and dev.sharing is Sharing.time_slicing and dev.replicas == 2


def test_unknown_devices_and_processes_are_noted_not_guessed() -> None:
    inputs = AttributionInputs(
        allotments=(Allotment("GPU-zzzz", A),), processes=ProcessReading((_proc(1, "GPU-yyyy"),)), owners={}
    )
    result = attribute([GPU], [DeviceReading()], inputs)
    assert result.devices == [None]
    assert len(result.notes) == 2 and "GPU-zzzz" in result.notes[0] and "GPU-yyyy" in result.notes[1]


def test_idle_gpu_with_no_holder_and_no_process_has_no_attribution() -> None:
    assert attribute([GPU], [DeviceReading(0, 0)], AttributionInputs(allotments=(), owners={})).devices == [None]


def test_without_an_allotment_reader_no_workload_is_said_to_use_a_gpu_it_was_not_given() -> None:
    inputs = AttributionInputs(processes=ProcessReading((_proc(10), _proc(20))), owners={10: A, 20: B})
    (dev,) = attribute([GPU], [DeviceReading(2_400, 10)], inputs).devices
    assert dev is not None and [(s.holder, s.allotted) for s in dev.shares] == [(A, True), (B, True)]


def test_the_mps_server_is_the_devices_own_not_a_workload_using_it() -> None:
    daemon = Attribution("mps-control-daemon-x", "gpu-operator", "mps-control-daemon-ctr")
    inputs = AttributionInputs(
        allotments=(Allotment("GPU-aaaa::0", A), Allotment("GPU-aaaa::1", B)),
        processes=ProcessReading((_proc(9, mem=25, name="nvidia-cuda-mps-server"), _proc(10, mps=True))),
        owners={9: daemon, 10: A},
    )
    (dev,) = attribute([GPU], [DeviceReading(1_500, 40)], inputs).devices
    assert dev is not None and dev.holders == (A, B) and dev.unattributed_memory_mib == 500


def test_a_holder_takes_its_workload_name_from_the_pod_list() -> None:
    named = Attribution("nb-a", "team-a", "lab", workload="notebooks")
    inputs = AttributionInputs(
        allotments=(Allotment("GPU-aaaa", A),), processes=ProcessReading((_proc(10),)), owners={10: named}
    )
    (dev,) = attribute([GPU], [DeviceReading(1_200, 10)], inputs).devices
    assert dev is not None and dev.holders == (named,) and dev.shares[0].allotted


def test_an_attributor_joins_once_while_holders_processes_and_owners_stay_and_splits_each_new_reading() -> None:
    """The join is kept while its inputs are equal; the numbers of every collection are split as `attribute` does."""
    attributor = Attributor([GPU, MIG1, MIG2])
    allotments = (Allotment("GPU-aaaa::0", A), Allotment("GPU-aaaa::1", B), Allotment("MIG-2", C))
    owners = {10: A, 11: B, 12: C}
    results = []
    for tick, (sm_a, sm_b, util) in enumerate([(30, 20, 55), (10, 60, 72), (0, 5, 5)]):
        inputs = AttributionInputs(
            allotments=allotments,
            processes=ProcessReading(
                (
                    _proc(10, mem=4_000 + tick, sm=sm_a),
                    _proc(11, mem=6_000, sm=sm_b),
                    _proc(12, "GPU-bbbb", mem=900, gpu_instance_id=2),
                ),
                frozenset({"GPU-aaaa"}),
            ),
            owners=dict(owners),  # a new mapping each collection, as the readers give it
            replicas={"GPU-aaaa": 4},
        )
        readings = [DeviceReading(11_000, util, math.nan, 300), DeviceReading(), DeviceReading(1_000, 40)]
        result = attributor.attribute(readings, inputs)
        assert result == attribute([GPU, MIG1, MIG2], readings, inputs)
        results.append(result)
    assert attributor.joins == 1
    assert [s.compute_pct for s in results[1].devices[0].shares] == [10, 60]  # type: ignore[union-attr]
    assert results[2].devices[0].shares[0].memory_mib == 4_002  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "change",
    ["a process starts", "a process moves to another instance", "an owner changes", "an allotment ends", "replicas"],
)
def test_an_attributor_joins_again_when_who_holds_what_changes(change: str) -> None:
    attributor = Attributor([GPU, MIG1, MIG2])
    procs = (_proc(10, sm=30), _proc(12, "GPU-bbbb", gpu_instance_id=2))
    first = AttributionInputs(
        allotments=(Allotment("GPU-aaaa::0", A), Allotment("GPU-aaaa::1", B), Allotment("MIG-2", C)),
        processes=ProcessReading(procs, frozenset({"GPU-aaaa"})),
        owners={10: A, 12: C},
    )
    readings = [DeviceReading(2_000, 30), DeviceReading(), DeviceReading(1_000, 40)]
    attributor.attribute(readings, first)
    then = {
        "a process starts": AttributionInputs(
            first.allotments, ProcessReading((*procs, _proc(11, sm=5)), frozenset({"GPU-aaaa"})), {10: A, 11: B, 12: C}
        ),
        "a process moves to another instance": AttributionInputs(
            first.allotments,
            ProcessReading((procs[0], _proc(12, "GPU-bbbb", gpu_instance_id=7)), frozenset({"GPU-aaaa"})),
            first.owners,
        ),
        "an owner changes": AttributionInputs(first.allotments, first.processes, {10: B, 12: C}),
        "an allotment ends": AttributionInputs(first.allotments[1:], first.processes, first.owners),
        "replicas": AttributionInputs(first.allotments, first.processes, first.owners, {"GPU-aaaa": 2}),
    }[change]
    result = attributor.attribute(readings, then)
    assert attributor.joins == 2
    assert result == attribute([GPU, MIG1, MIG2], readings, then)
