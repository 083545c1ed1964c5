"""A scenario's `sharing:` section, and the agent's attribution on its twin: the readers a real node has
(pod-resources, NVML's processes, cgroups and the pod list), answered by the twin, through AttributionSource, give
each workload exactly the memory its processes use, its measured share of a time-sliced GPU, its share of a MIG
instance, and nothing once its pod is gone."""

from __future__ import annotations

import math
from pathlib import Path

import httpx
import pytest

from gpufleet.errors import ManifestError
from gpufleet.model.attribution import Attribution, DeviceAttribution, Sharing
from gpufleet.sim.attribution_source import TwinOwners, TwinPodResources, attribution_source
from gpufleet.sim.gpu_holder_answers import MPS_DAEMON, MPS_NAMESPACE
from gpufleet.sim.gpu_state import FB_RESERVED_MIB
from gpufleet.sim.pods import MIG_INSTANCE_OVERHEAD_MIB, MPS_SERVER_MIB, SimPod
from gpufleet.sim.scenario import build_twin
from gpufleet.sim.source import TwinSource
from gpufleet.sim.twin import Twin
from gpufleet.spec.scenario_spec import SharingMode
from gpufleet.telemetry.attribution import COMPUTE_TOLERANCE_PCT, MEASURED
from gpufleet.telemetry.frame import MetricFrame

EXAMPLE = Path(__file__).parents[2] / "src" / "gpufleet" / "examples" / "scenarios" / "gpu-sharing.yaml"


def _scenario(tmp_path: Path, sharing: str, *, mig: str = "[]", workload: str = "{}", model: str = "h100-sxm") -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(
        f"""apiVersion: gpufleet.io/v1
kind: Scenario
metadata: {{name: s}}
spec:
  cluster:
    nodePools: [{{name: n, count: 2, gpu: {{model: {model}, count: 4}}, nics: {{count: 1}}}}]
  duration: 1h
  mig: {mig}
  sharing:
{sharing}
  workload: {workload}
"""
    )
    return path


CARVED = "[{nodes: [n-000], gpus: [0], devices: {3g.40gb: 2}}]"


@pytest.mark.parametrize(
    ("sharing", "mig", "said"),
    [
        ("  - {nodes: [n-009], mode: time-slicing, replicas: 2}", "[]", "no node named 'n-009'"),
        ("  - {nodes: [n-000], gpus: [4], mode: mps, replicas: 2}", "[]", "n-000 has no GPU 4"),
        ("  - {nodes: [n-000], mode: time-slicing, replicas: 1}", "[]", "needs `replicas` between 2 and 48"),
        ("  - {nodes: [n-000], mode: mps, replicas: 49}", "[]", "needs `replicas` between 2 and 48"),
        ("  - {nodes: [n-000], mode: mps}", "[]", "needs `replicas`"),
        ("  - {nodes: [n-000], mode: mig, replicas: 49}", CARVED, "replicas of a MIG instance must be 1..48"),
        ("  - {nodes: [n-000], gpus: [1], mode: mig}", CARVED, "n-000 GPU 1 is not carved into MIG instances"),
        (
            "  - {nodes: [n-000], gpus: [0], mode: mps, replicas: 4}",
            CARVED,
            "MPS is not supported on devices with MIG enabled",
        ),
        ("  - {nodes: [n-000], gpus: [0], mode: time-slicing, replicas: 4}", CARVED, "use `mode: mig` with `replicas`"),
        ("  - {nodes: [n-000], gpus: [0], mode: mig, profiles: [1g.10gb]}", CARVED, "no device matches"),
        ("  - {nodes: [n-000], mode: time-slicing, replicas: 2, profiles: [1g.10gb]}", "[]", "for `mode: mig` only"),
        (
            "  - {nodes: [n-000], mode: time-slicing, replicas: 4, pods: {processes: [1, 2], memoryMib: [1, 12e3]}}",
            "[]",
            r"keep pods.memoryMib at most 10123 MiB",
        ),
        (
            "  - {nodes: [n-000], gpus: [0], mode: mig, replicas: 2, pods: {memoryMib: [100, 30000]}}",
            CARVED,
            r"MIG 3g.40gb \(GI 1\): 2 replicas x 1 processes x 30000 MiB do not fit",
        ),
        (
            "  - {nodes: [n-000], mode: mps, replicas: 2}\n  - {nodes: [n-000], gpus: [1], mode: mps, replicas: 4}",
            "[]",
            "n-000 GPU 1 is in two entries",
        ),
        (
            "  - {nodes: [n-000], mode: mps, replicas: 2, pods: {containers: [1, 2], gpuContainers: [3, 3]}}",
            "[]",
            "gpuContainers",
        ),
        ("  - {nodes: [n-000], mode: mps, replicas: 2, pods: {smPct: [50, 10]}}", "[]", "min first"),
    ],
)
def test_a_sharing_that_cannot_be_is_a_manifest_error(tmp_path: Path, sharing: str, mig: str, said: str) -> None:
    path = _scenario(tmp_path, sharing, mig=mig)
    with pytest.raises(ManifestError, match=said) as err:
        build_twin(path)
    assert str(path) in str(err.value)


def test_mps_before_volta_takes_sixteen_clients(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="at most 16 clients") as err:
        build_twin(_scenario(tmp_path, "  - {nodes: [n-000], mode: mps, replicas: 20}", model="p100"))
    assert err.value.fix == "set replicas to 16 or fewer"
    build_twin(_scenario(tmp_path, "  - {nodes: [n-000], mode: mps, replicas: 16, pods: {memoryMib: [100, 900]}}",
                         model="p100"))  # fmt: skip


def test_training_and_services_stay_off_shared_gpus(tmp_path: Path) -> None:
    shared = "  - {nodes: [n-000], gpus: [2, 3], mode: mps, replicas: 2}"
    with pytest.raises(ManifestError, match="'big' names n-000, whose GPUs are shared"):
        build_twin(_scenario(tmp_path, shared, workload="{trainingJobs: [{name: big, nodes: [n-000, n-001]}]}"))
    with pytest.raises(ManifestError, match=r"would take GPUs 0\.\.2 of n-000, which are shared"):
        build_twin(_scenario(tmp_path, shared, workload="{inference: [{name: chat, node: n-000, gpus: 3}]}"))
    twin, _ = build_twin(
        _scenario(
            tmp_path,
            shared,
            workload="{autoTrainingNodesPerJob: 1, autoTrainingFill: 1.0, inference: [{name: chat, node: n-000}]}",
        )
    )
    assert [j.nodes for j in twin.training.jobs] == [["n-001"]]  # laid out by count, off the sharing node
    assert [s.gpu_indices for s in twin.cluster.services] == [(0,)]  # the whole GPUs beside the shared ones


# ---- the agent's attribution on the example scenario -------------------------------------------------------------


@pytest.fixture(scope="module")
def example() -> Twin:
    twin, _ = build_twin(EXAMPLE)
    twin.run(900)
    return twin


class Node:
    """One twin node read as its agent reads it: the twin source (MIG instances as entities) and attribution."""

    def __init__(self, twin: Twin, node: str) -> None:
        self.twin = twin
        self.source = TwinSource(twin, node, mig_instances=True, attribution=False)
        self.attribution = attribution_source(twin, node)
        self.frame: MetricFrame = self.source.new_frame()

    def collect(self) -> MetricFrame:
        self.frame.clear_values()
        self.source.collect(self.frame)
        self.attribution.collect(self.frame)
        return self.frame


def _containers(twin: Twin) -> dict[tuple[str, str, str], list[float]]:
    """(namespace, pod, container) -> its processes' memory, as the twin runs them."""
    out: dict[tuple[str, str, str], list[float]] = {}
    for pod in twin.pods.running_pods():
        for c in pod.containers:
            if c.device is not None:
                out[(pod.namespace, pod.name, c.name)] = [p.memory_mib for p in c.processes]
    return out


def _shares(frame: MetricFrame) -> list[tuple[int, DeviceAttribution]]:
    return [(i, d) for i, d in enumerate(frame.shares) if d is not None]


def test_each_workload_gets_exactly_its_processes_memory(example: Twin) -> None:
    memory = _containers(example)
    checked = 0
    for node in ("ts-000", "mps-000", "mig-000", "mixed-000"):
        frame = Node(example, node).collect()
        fb = frame.gpu("DCGM_FI_DEV_FB_USED")
        for i, device in _shares(frame):
            for share in device.shares:
                key = (share.holder.namespace, share.holder.pod, share.holder.container)
                if key in memory:
                    assert share.memory_mib == pytest.approx(sum(memory[key]))
                    checked += 1
            # parts and remainder make up the device's own reading; the remainder is what the device keeps
            total = sum(s.memory_mib for s in device.shares) + device.unattributed_memory_mib
            assert total == pytest.approx(fb[i])
            overhead = MIG_INSTANCE_OVERHEAD_MIB if frame.entities[i].mig_profile else FB_RESERVED_MIB
            if device.sharing is Sharing.mps:
                overhead += MPS_SERVER_MIB  # the MPS server belongs to the device, not to a workload
            assert device.unattributed_memory_mib == pytest.approx(overhead)
    assert checked > 20


def test_time_sliced_compute_is_measured_per_workload(example: Twin) -> None:
    frame = Node(example, "ts-000").collect()
    util = frame.gpu("DCGM_FI_DEV_GPU_UTIL")
    sm: dict[tuple[str, str, str], float] = {}
    for pod in example.pods.running_pods("ts-000"):
        for c in pod.containers:
            sm[(pod.namespace, pod.name, c.name)] = sum(p.sm_util for p in c.processes)
    shared = [(i, d) for i, d in _shares(frame) if len(d.shares) > 1]
    assert shared  # some GPU has several holders now
    for i, device in _shares(frame):
        assert device.sharing in (Sharing.time_slicing, Sharing.exclusive) and device.replicas == 4
        assert all(s.compute_method == MEASURED for s in device.shares)
        parts = sum(s.compute_pct for s in device.shares)
        assert parts <= util[i] + COMPUTE_TOLERANCE_PCT
        for share in device.shares:
            key = (share.holder.namespace, share.holder.pod, share.holder.container)
            assert share.compute_pct == pytest.approx(sm[key], abs=1e-6)
            assert share.allotted


def test_mig_instances_are_entities_with_their_own_shares(example: Twin) -> None:
    frame = Node(example, "mixed-000").collect()
    gpus = example.cluster.node("mixed-000").gpus
    entities = frame.entities
    carved = [e for e in entities if e.mig_profile]
    assert len(carved) == sum(len(g.mig_instances) for g in gpus[:2]) == 8
    assert len(entities) == 8 + 6  # the six uncarved GPUs stay whole
    assert {e.mig_uuid for e in carved} == {i.uuid for g in gpus[:2] for i in g.mig_instances}
    engine = frame.gpu("DCGM_FI_PROF_GR_ENGINE_ACTIVE")
    util = frame.gpu("DCGM_FI_DEV_GPU_UTIL")
    temp = frame.gpu("DCGM_FI_DEV_GPU_TEMP")
    inst = example.pods.instances
    for i, e in enumerate(entities):
        if not e.mig_profile:
            assert not math.isnan(util[i]) and math.isnan(engine[i])
            continue
        j = next(j for j, u in enumerate(inst.uuid) if u == e.mig_uuid)
        assert math.isnan(util[i]) and engine[i] == pytest.approx(inst.util[j] / 100.0)  # no GPU_UTIL on MIG
        assert temp[i] == pytest.approx(example.gpus.temp_c[inst.k[j]])  # device-wide fields repeat the GPU's
        device = frame.shares[i]
        if device is None:
            continue
        assert device.sharing in (Sharing.mig, Sharing.mig_shared)
        assert device.replicas == (3 if e.mig_profile == "3g.40gb" else 1)
        assert all(math.isnan(s.power_w) for s in device.shares)  # an instance has no power reading of its own
        if len(device.shares) == 1:
            assert device.shares[0].compute_pct == pytest.approx(inst.util[j])


def test_mps_clients_are_estimated_and_whole_gpu_holders_measured(example: Twin) -> None:
    frame = Node(example, "mps-000").collect()
    mps = [(i, d) for i, d in _shares(frame) if d.sharing is Sharing.mps]
    assert mps and all(d.replicas == 10 for _, d in mps)
    for _, device in mps:
        allotted = [s for s in device.shares if s.allotted]
        assert allotted and all(s.compute_method == "estimated" for s in device.shares)
        # the MPS server runs in the device plugin's daemon pod, which was given no device: it is the device's own
        # (its remainder), not a workload using a GPU it was not given
        assert all(s.allotted for s in device.shares)
        assert not any(
            s.holder.namespace == MPS_NAMESPACE or s.holder.pod.startswith(MPS_DAEMON) for s in device.shares
        )
    service = [d for _, d in _shares(frame) if d.sharing is Sharing.exclusive]
    assert len(service) == 2 and {d.shares[0].holder.pod for d in service} == {"embed-api-0"}
    assert all(d.shares[0].compute_method == MEASURED for d in service)
    training = Node(example, "dgx-000").collect()
    held = [d for _, d in _shares(training)]
    assert len(held) == 8 and {d.shares[0].holder.pod for d in held} == {"llm-small-dgx-000"}
    assert all(d.shares[0].processes == 1 for d in held)  # one process per GPU


def _pod_of(twin: Twin, group_mode: SharingMode, linger: bool) -> SimPod:
    return next(
        p
        for p in twin.pods.running_pods()
        if twin.pods.groups[p.group].spec.mode is group_mode
        and twin.pods.groups[p.group].spec.linger_terminated is linger
        and p.processes
    )


def test_a_pod_that_ends_has_no_share_at_the_next_collection() -> None:
    twin, _ = build_twin(EXAMPLE)
    twin.run(120)
    node = Node(twin, "ts-000")
    pod = _pod_of(twin, SharingMode.time_slicing, False)
    holders = {s.holder.pod for d in node.collect().shares if d for s in d.shares}
    assert pod.name in holders
    twin.pods.finish(pod, twin.time, "Succeeded")
    twin.step()
    holders = {s.holder.pod for d in node.collect().shares if d for s in d.shares}
    assert pod.name not in holders


def test_a_terminated_pod_that_lingers_in_pod_resources_is_dropped() -> None:
    twin, _ = build_twin(EXAMPLE)
    twin.run(120)
    node = Node(twin, "mig-000")
    pod = _pod_of(twin, SharingMode.mig, True)
    twin.pods.finish(pod, twin.time, "Succeeded")
    twin.step()
    # what a kubelet of kubernetes#119423 answers: still in List with its device, Succeeded in the pod list
    listed = {a.holder.pod for a in TwinPodResources(twin, "mig-000").read().allotments}
    assert pod.name in listed
    owners = TwinOwners(twin, "mig-000")
    assert not owners.running(pod.namespace, pod.name)
    assert owners.ended(Attribution(pod.name, pod.namespace, "main"))
    holders = {s.holder.pod for d in node.collect().shares if d for s in d.shares}
    assert pod.name not in holders
    assert holders  # the instances' other pods are still there


def test_the_agent_serves_per_workload_series_for_a_sharing_node(tmp_path: Path) -> None:
    from gpufleet.sim.agent import sim_agent

    agent = sim_agent(
        EXAMPLE, node="mixed-000", host="127.0.0.1", port=0, interval=0.2, speed=1.0,
        data_dir=tmp_path / "agent", control_plane=None, token=lambda: None,
    )  # fmt: skip
    agent.start()
    try:
        agent.collector.collect_once()
        metrics = httpx.get(f"http://127.0.0.1:{agent.port}/metrics", timeout=5).text
    finally:
        agent.stop()
    assert metrics.count('DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0"') == 4  # one per MIG instance of GPU 0
    assert 'GPU_I_PROFILE="3g.40gb"' in metrics
    assert 'gpufleet_attribution_input{input="owners",reader="cgroups",state="up"}' in metrics
    assert 'namespace="research"' in metrics


def test_the_example_scenario_loads_as_shipped() -> None:
    twin, duration = build_twin(EXAMPLE)
    assert duration == 6 * 3600 and len(twin.cluster.nodes) == 5
    modes = {twin.pods.groups[d.group].spec.mode for d in twin.pods.devices}
    assert modes == {SharingMode.time_slicing, SharingMode.mps, SharingMode.mig}
    assert any(g.spec.linger_terminated for g in twin.pods.groups)
    assert twin.pods.running_pods()  # pods at t=0, as in a cluster already running
