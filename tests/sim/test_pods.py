"""Pods on the twin's shared GPUs: each container's devices as the device plugin gives them (never one replica to two
pods), processes whose memory fits their device and whose PIDs are unique, device readings that are the sum of
their processes, and the node's answers (cgroups, pod list, pod-resources) that the real parsers read back."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from gpufleet.parsers.cgroups import parse_proc_cgroup
from gpufleet.sim.gpu_holder_answers import NodeAnswers
from gpufleet.sim.gpu_state import FB_RESERVED_MIB
from gpufleet.sim.pods import (
    MIG_INSTANCE_OVERHEAD_MIB,
    MPS_SERVER_MIB,
    SharedDevice,
    SimPod,
    holder_pid,
    time_share,
)
from gpufleet.sim.scenario import build_twin
from gpufleet.sim.twin import Twin
from gpufleet.sources.workload.kubelet_pods import PodIndex
from gpufleet.sources.workload.podresources import allotments_from_list, replicas_from_allocatable
from gpufleet.spec.scenario_spec import SharingMode

SCENARIO = """apiVersion: gpufleet.io/v1
kind: Scenario
metadata: {{name: pods}}
spec:
  cluster:
    nodePools:
    - {{name: ts, count: 2, gpu: {{model: h100-sxm, count: 4}}, nics: {{count: 1}}}}
    - {{name: mps, count: 1, gpu: {{model: h100-sxm, count: 4}}, nics: {{count: 1}}}}
    - {{name: mig, count: 1, gpu: {{model: a100-80gb, count: 2}}, nics: {{count: 1}}}}
    - {{name: dgx, count: 1, gpu: {{model: h100-sxm, count: 4}}, nics: {{count: 1}}}}
  duration: 2h
  seed: {seed}
  mig:
  - {{nodes: [mig-000], devices: {{3g.40gb: 1, 2g.20gb: 1, 1g.10gb: 2}}}}
  sharing:
  - nodes: [ts-000, ts-001]
    mode: time-slicing
    replicas: 4
    pods: {{arrivalsPerHour: 120, meanLifetime: 5m, containers: [1, 3], gpuContainers: [1, 2], processes: [1, 2],
           memoryMib: [1000, 9000], smPct: [20, 90], namespaces: [a, b], workloads: [nb, web]}}
  - nodes: [mps-000]
    gpus: [2, 3]
    mode: mps
    replicas: 8
    renameByDefault: true
    pods: {{arrivalsPerHour: 90, meanLifetime: 5m, memoryMib: [500, 9000], smPct: [5, 60], kind: StatefulSet}}
  - nodes: [mig-000]
    mode: mig
    profiles: [3g.40gb]
    replicas: 2
    lingerTerminated: true
    lingerFor: 2m
    pods: {{arrivalsPerHour: 60, meanLifetime: 3m, processes: [1, 2], memoryMib: [1000, 9000], kind: Job}}
  - nodes: [mig-000]
    mode: mig
    profiles: [2g.20gb, 1g.10gb]
    pods: {{arrivalsPerHour: 60, meanLifetime: 4m, memoryMib: [1000, 4000]}}
  workload:
    trainingJobs: [{{name: tiny, nodes: [dgx-000], modelParamsB: 0.5}}]
    inference: [{{name: chat, node: mps-000, gpus: 2}}]
"""


def _twin(tmp_path: Path, seed: int = 5) -> Twin:
    path = tmp_path / f"pods-{seed}.yaml"
    path.write_text(SCENARIO.format(seed=seed))
    twin, _ = build_twin(path)
    return twin


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Twin:
    return _twin(tmp_path_factory.mktemp("pods"))


def _held(twin: Twin) -> list[tuple[SharedDevice, str, SimPod]]:
    return [
        (c.device, c.device_id, pod) for pod in twin.pods.running_pods() for c in pod.containers if c.device is not None
    ]


def _check_invariants(twin: Twin) -> None:
    held = _held(twin)
    ids = Counter(device_id for _, device_id, _ in held)
    assert max(ids.values(), default=1) == 1, "a replica given to two containers"
    for device, device_id, pod in held:
        assert device_id in device.device_ids and device.node == pod.node
    pids: Counter[int] = Counter()
    g, inst = twin.gpus, twin.pods.instances
    for d in twin.pods.devices:
        procs = [p for pod in twin.pods.running_pods() for p in pod.processes if p.device is d]
        memory = sum(p.memory_mib for p in procs)
        assert memory <= d.capacity_mib
        sm = [p.sm_util for p in procs]
        assert all(0.0 <= s <= 100.0 for s in sm)
        if d.mode is SharingMode.mps:
            assert all(s <= 100.0 / d.replicas + 1e-9 for s in sm)  # each client's active-thread limit
        if d.instance >= 0:  # the instance reads its own processes
            assert inst.fb_used_mib[d.instance] == pytest.approx(MIG_INSTANCE_OVERHEAD_MIB + memory)
            assert inst.util[d.instance] == pytest.approx(min(100.0, sum(sm)))
        elif g.alive[d.k]:  # the GPU reads its processes: utilization their SM time, memory theirs plus its own
            assert sum(sm) <= 100.0 + 1e-9
            assert g.util[d.k] == pytest.approx(sum(sm))
            server = MPS_SERVER_MIB if d.mode is SharingMode.mps and procs else 0.0
            assert g.fb_used_mib[d.k] == pytest.approx(FB_RESERVED_MIB + memory + server)
    for pod in twin.pods.running_pods():
        pids.update(p.pid for p in pod.processes)
    assert max(pids.values(), default=1) == 1, "a PID used twice"


def test_invariants_hold_through_churn(twin: Twin) -> None:
    seen: set[str] = set()
    versions = twin.pods.version
    for _ in range(40):
        twin.run(60)
        _check_invariants(twin)
        seen |= {p.uid for p in twin.pods.running_pods()}
    assert twin.pods.version > versions + 40  # pods came and went
    assert len(seen) > 60
    kinds = Counter(len(p.containers) for p in twin.pods.running_pods())
    assert set(kinds) > {1}  # multi-container pods
    assert any(c.device is None for p in twin.pods.running_pods() for c in p.containers)  # sidecars without a GPU


def test_device_ids_and_resources_follow_the_device_plugin(twin: Twin) -> None:
    by_mode = {d.mode: d for d in twin.pods.devices if d.instance < 0}
    ts, mps = by_mode[SharingMode.time_slicing], by_mode[SharingMode.mps]
    assert ts.device_ids == [f"{ts.uuid}::{n}" for n in range(4)] and ts.uuid.startswith("GPU-")
    assert ts.resource == "nvidia.com/gpu"
    assert mps.resource == "nvidia.com/gpu.shared" and len(mps.device_ids) == 8  # renameByDefault
    mig = {d.resource: d for d in twin.pods.devices if d.instance >= 0}
    assert set(mig) == {"nvidia.com/mig-3g.40gb", "nvidia.com/mig-2g.20gb", "nvidia.com/mig-1g.10gb"}
    exclusive, sliced = mig["nvidia.com/mig-1g.10gb"], mig["nvidia.com/mig-3g.40gb"]
    assert exclusive.device_ids == [exclusive.mig_uuid] and exclusive.mig_uuid.startswith("MIG-")
    assert sliced.device_ids == [f"{sliced.mig_uuid}::0", f"{sliced.mig_uuid}::1"]


def test_time_slicing_shares_are_max_min_fair() -> None:
    assert time_share([10.0, 80.0, 80.0]) == pytest.approx([10.0, 45.0, 45.0])
    assert time_share([20.0, 30.0]) == pytest.approx([20.0, 30.0])  # no contention: each gets what it asks
    assert sum(time_share([70.0, 60.0, 90.0, 5.0])) == pytest.approx(100.0)


def test_the_same_seed_gives_the_same_pods(tmp_path: Path) -> None:
    a, b, c = _twin(tmp_path, 5), _twin(tmp_path, 5), _twin(tmp_path, 6)
    for t in (a, b, c):
        t.run(600)

    def names(t: Twin) -> list[tuple[str, str, tuple[float, ...]]]:
        return [(p.name, p.uid, tuple(x.sm_util for x in p.processes)) for p in t.pods.pods]

    assert names(a) == names(b)
    assert names(a) != names(c)


def test_cgroup_text_resolves_through_the_pod_list(twin: Twin) -> None:
    answers = NodeAnswers(twin)
    index = PodIndex.from_pod_list(answers.pod_list())
    by_pid = {p.pid: (pod, c) for pod in twin.pods.running_pods() for c in pod.containers for p in c.processes}
    resolved = 0
    for proc in answers.processes():
        text = answers.cgroup(proc.pid)
        assert text is not None and text.startswith("0::/kubepods.slice/")
        ref = parse_proc_cgroup(text)
        assert ref.is_kubernetes and len(ref.container_id) == 64
        owner = index.owner(ref)
        assert owner is not None
        if proc.pid in by_pid:
            pod, container = by_pid[proc.pid]
            assert ref.pod_uid == pod.uid and ref.container_id == container.container_id and ref.qos == "burstable"
            assert (owner.namespace, owner.pod, owner.container) == (pod.namespace, pod.name, container.name)
            assert owner.workload == pod.workload and owner.workload
            resolved += 1
        elif proc.name == "nvidia-cuda-mps-server":
            assert ref.qos == "besteffort" and owner.workload == "nvidia-device-plugin-mps-control-daemon"
        else:  # a whole-GPU holder: Guaranteed, straight under kubepods.slice
            assert ref.qos == "guaranteed" and owner.workload in {"tiny", "chat"}
    assert resolved > 5


def test_workloads_read_from_the_pod_list_as_their_controllers_name_them(twin: Twin) -> None:
    index = PodIndex.from_pod_list(NodeAnswers(twin).pod_list())
    by_name = {(p.namespace, p.name): p for p in index.pods}
    for pod in twin.pods.running_pods():
        info = by_name[(pod.namespace, pod.name)]
        assert info.running and info.uid == pod.uid
        if pod.owner_kind == "ReplicaSet":  # a Deployment's pod: the ReplicaSet read back to the Deployment
            assert info.workload in {"nb", "web", "notebook"} and pod.name.startswith(f"{info.workload}-")
        elif pod.owner_kind == "StatefulSet":
            assert pod.name.rsplit("-", 1)[0] == info.workload == "notebook"
        else:
            assert pod.owner_kind == "Job" and pod.name.startswith(f"{info.workload}-")
    assert by_name[("training", "tiny-dgx-000")].workload == "tiny"
    assert by_name[("inference", "chat-0")].workload == "chat"


def test_pod_resources_answers_parse_back_to_the_devices(twin: Twin) -> None:
    answers = NodeAnswers(twin)
    allotments = allotments_from_list(answers.list_response())
    given = {(a.device_id, a.holder.namespace, a.holder.pod, a.holder.container) for a in allotments}
    for _, device_id, pod in _held(twin):
        container = next(c for c in pod.containers if c.device_id == device_id)
        assert (device_id, pod.namespace, pod.name, container.name) in given
    replicas = replicas_from_allocatable(answers.allocatable_response())
    for d in twin.pods.devices:
        assert replicas[d.mig_uuid or d.uuid] == d.replicas
    dgx = twin.cluster.node("dgx-000").gpus[0]
    assert replicas[dgx.uuid] == 1
    training = [a for a in allotments if a.holder.pod == "tiny-dgx-000"]
    assert len(training) == 4 and {a.resource for a in training} == {"nvidia.com/gpu"}


def test_nvml_processes_carry_what_the_driver_gives(twin: Twin) -> None:
    answers = NodeAnswers(twin)
    procs = answers.processes()
    sampled = answers.sampled()
    mig_uuids = {g.uuid for g in twin.cluster.node("mig-000").gpus}
    mps_uuids = {d.uuid for d in twin.pods.devices if d.mode is SharingMode.mps}
    assert not (mig_uuids | mps_uuids) & sampled
    for p in procs:
        if p.gpu_uuid in mig_uuids:
            assert p.gpu_instance_id is not None and p.sm_util is None
        elif p.gpu_uuid in mps_uuids:
            assert p.sm_util is None and p.mps == (p.name != "nvidia-cuda-mps-server")
        else:
            assert p.gpu_uuid in sampled and p.sm_util is not None and not p.mps
    trainer = [p for p in procs if p.pid in {holder_pid(twin.node_index["dgx-000"], g) for g in range(4)}]
    assert len(trainer) == 4
    k = twin.gpu("dgx-000", 0)
    assert trainer[0].used_memory_mib == pytest.approx(twin.gpus.fb_used_mib[k] - FB_RESERVED_MIB)


def test_an_ended_pod_frees_its_replica_and_a_lingering_one_stays_listed(tmp_path: Path) -> None:
    twin = _twin(tmp_path)
    pods = twin.pods
    plain = next(p for p in pods.running_pods() if p.group == 0)
    lingering = next(p for p in pods.running_pods() if pods.groups[p.group].spec.linger_terminated)
    plain_ids = [c.device_id for c in plain.containers if c.device is not None]
    pods.finish(plain, twin.time, "Succeeded")
    pods.finish(lingering, twin.time, "Succeeded")
    assert plain not in pods.pods and all(c.processes == [] for c in plain.containers)
    assert all(h is not c for c in plain.containers if c.device for h in c.device.holders)
    answers = NodeAnswers(twin)
    listed = {p["name"] for p in answers.list_response()["podResources"]}
    assert plain.name not in listed and lingering.name in listed  # the kubelet of kubernetes#119423
    index = PodIndex.from_pod_list(answers.pod_list())
    assert not index.running(lingering.namespace, lingering.name)
    assert plain_ids  # its replicas are free for the next pod
    twin.run(lingering.gone_at - twin.time + 1)
    assert lingering not in pods.pods


def test_a_lost_gpu_fails_its_pods_and_xids_name_a_process_on_it(tmp_path: Path) -> None:
    twin = _twin(tmp_path)
    pod = next(p for p in twin.pods.running_pods() if p.node == "ts-000" and p.processes)
    device = pod.processes[0].device
    twin.emit_xid(device.k, 13)
    line = twin.kmsg["ts-000"][-1]
    pids = {p.pid for p in NodeAnswers(twin, "ts-000").processes()}
    assert int(line.split("pid=")[1].split(",")[0]) in pids  # the Xid names a process the node lists
    twin.lose_gpu(device.k)
    twin.step()
    assert pod not in twin.pods.pods  # failed, and this group's kubelet does not keep terminated pods
    assert not any(c.device is device for p in twin.pods.running_pods() for c in p.containers)
    assert not [p for p in NodeAnswers(twin, "ts-000").processes() if p.gpu_uuid == device.uuid]
    twin.drain("ts-001")
    assert not twin.pods.running_pods("ts-001")
    twin.run(1800)  # a cordoned node takes no new pods; the other keeps taking them on its live GPUs
    assert not twin.pods.running_pods("ts-001") and twin.pods.running_pods("ts-000")
    assert np.isfinite(twin.gpus.util).all()
