"""Device-plugin resources per MIG strategy and sharing config, GFD labels, admission, MPS limits, milli-shares."""

from __future__ import annotations

import kubernetes_validate
import pytest
import yaml

from gpufleet.errors import ManifestError, UserError
from gpufleet.model import GpuHealth, GpuRequest, GpuSharing, Node, Pod
from gpufleet.sched.partition.device_plugin import (
    DevicePluginConfig,
    MigStrategy,
    build_config,
    configmap,
    dump_manifests,
    load_config,
    mig_resource_name,
    render_config,
)
from gpufleet.sched.partition.gfd import gfd_labels
from gpufleet.sched.partition.mig import MigLayout
from gpufleet.sched.partition.sharing import (
    MilliShares,
    admit,
    admit_pod,
    advertise,
    extended_resource_count,
    mps_limits,
    pod_extended_resources,
)
from gpufleet.spec.builder import build_cluster
from gpufleet.spec.cluster_spec import ClusterBody

H100 = "H100-SXM5-80GB"


def h100_node(gpus: int = 8) -> Node:
    body = ClusterBody.model_validate(
        {"nodePools": [{"name": "n", "count": 1, "gpu": {"model": "h100", "count": gpus}}]}
    )
    return build_cluster("t", body).nodes[0]


def partition(node: Node, index: int, layout: list[tuple[str, int]]) -> None:
    gpu = node.gpus[index]
    gpu.mig_enabled = True
    gpu.mig_instances = MigLayout.of(H100, layout).to_instances(gpu.uuid)


SEVEN_1G = [("1g.10gb", s) for s in range(7)]
REFERENCE_CONFIG = """
version: v1
flags:
  migStrategy: "none"
  failOnInitError: true
  nvidiaDriverRoot: "/"
  plugin:
    passDeviceSpecs: false
    deviceListStrategy: envvar
    deviceIDStrategy: uuid
sharing:
  timeSlicing:
    renameByDefault: false
    failRequestsGreaterThanOne: false
    resources:
    - name: nvidia.com/gpu
      replicas: 10
"""


def test_time_slicing_8_gpus_by_10_replicas_advertises_80() -> None:
    node = h100_node()
    config = load_config(REFERENCE_CONFIG)
    adv = advertise(node, config)
    assert adv.capacity == {"nvidia.com/gpu": 80} and adv.allocatable == {"nvidia.com/gpu": 80}
    labels = gfd_labels(node, config)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-SHARED"
    assert labels["nvidia.com/gpu.replicas"] == "10"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert labels["nvidia.com/gpu.count"] == "8"


def test_rename_by_default_advertises_gpu_shared_and_drops_the_shared_suffix() -> None:
    node = h100_node()
    config = build_config(time_slicing=10, rename=True)
    assert advertise(node, config).capacity == {"nvidia.com/gpu.shared": 80}
    assert gfd_labels(node, config)["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"


def test_unhealthy_gpus_reduce_allocatable_not_capacity() -> None:
    node = h100_node()
    node.gpus[3].health = GpuHealth.unhealthy
    adv = advertise(node, build_config(time_slicing=4))
    assert adv.capacity["nvidia.com/gpu"] == 32 and adv.allocatable["nvidia.com/gpu"] == 28


def test_fail_requests_greater_than_one_uses_the_plugin_message() -> None:
    node = h100_node()
    two = GpuRequest(GpuSharing.time_slicing, 2)
    assert admit(two, node, build_config(time_slicing=4)) == ("nvidia.com/gpu", 2)  # default false for time-slicing
    strict = build_config(time_slicing=4, fail_requests_greater_than_one=True)
    with pytest.raises(UserError) as err:
        admit(two, node, strict)
    assert err.value.message == (
        "request for 'nvidia.com/gpu: 2' too large: maximum request size for shared resources is 1"
    )
    renamed = build_config(time_slicing=4, rename=True, fail_requests_greater_than_one=True)
    with pytest.raises(UserError, match=r"'nvidia.com/gpu.shared: 2' too large"):
        admit(two, node, renamed)


def test_mps_defaults_to_failing_requests_above_one_and_splits_memory_and_sms() -> None:
    node = h100_node()
    config = build_config(mps=4)
    assert config.sharing.fail_requests_greater_than_one is True
    with pytest.raises(UserError, match=r"maximum request size for shared resources is 1"):
        admit(GpuRequest(GpuSharing.mps, 2), node, config)
    assert admit(GpuRequest(GpuSharing.mps, 1), node, config) == ("nvidia.com/gpu", 1)
    assert advertise(node, config).capacity == {"nvidia.com/gpu": 32}
    limits = mps_limits(node.gpus[0], 4)
    assert (limits.pinned_memory_limit_mib, limits.active_thread_percentage) == (81559 // 4, 25)
    assert limits.control_commands(0)[1] == "set_default_device_pinned_mem_limit 0 20389M"
    assert gfd_labels(node, config)["nvidia.com/mps.capable"] == "true"
    partition(node, 0, SEVEN_1G)
    assert advertise(node, build_config(mps=4, mig_strategy=MigStrategy.mixed)).errors == [
        "MPS sharing is not supported on devices with MIG enabled"
    ]


def test_mixed_strategy_names_each_profile_with_plus_as_dot() -> None:
    node = h100_node()
    partition(node, 0, SEVEN_1G)
    partition(node, 1, [("1g.10gb+me", 0), ("3g.40gb", 4), ("2g.20gb", 2)])
    adv = advertise(node, build_config(mig_strategy=MigStrategy.mixed))
    assert adv.capacity == {
        "nvidia.com/gpu": 6,
        "nvidia.com/mig-1g.10gb": 7,
        "nvidia.com/mig-1g.10gb.me": 1,
        "nvidia.com/mig-2g.20gb": 1,
        "nvidia.com/mig-3g.40gb": 1,
    }
    assert mig_resource_name("1g.10gb+me") == "nvidia.com/mig-1g.10gb.me"
    labels = gfd_labels(node, build_config(mig_strategy=MigStrategy.mixed))
    assert labels["nvidia.com/mig.strategy"] == "mixed"
    assert labels["nvidia.com/gpu.count"] == "8"  # GFD counts every GPU of the model, MIG-enabled or not
    assert labels["nvidia.com/mig-1g.10gb.count"] == "7"
    assert labels["nvidia.com/mig-3g.40gb.product"] == "NVIDIA-H100-80GB-HBM3-MIG-3g.40gb"
    assert labels["nvidia.com/mig-3g.40gb.multiprocessors"] == "60"
    assert admit(GpuRequest(GpuSharing.mig, 1, "3g.40gb"), node, build_config(mig_strategy=MigStrategy.mixed)) == (
        "nvidia.com/mig-3g.40gb",
        1,
    )
    with pytest.raises(UserError, match=r"Requested: 2, Available: 1"):
        admit(GpuRequest(GpuSharing.mig, 2, "3g.40gb"), node, build_config(mig_strategy=MigStrategy.mixed))


def test_none_strategy_advertises_whole_gpus_even_when_mig_is_on() -> None:
    node = h100_node()
    partition(node, 0, SEVEN_1G)
    assert advertise(node, build_config()).capacity == {"nvidia.com/gpu": 8}
    with pytest.raises(UserError, match=r"migStrategy=none"):
        admit(GpuRequest(GpuSharing.mig, 1, "1g.10gb"), node, build_config())


def test_single_strategy_advertises_mig_devices_as_gpus_when_uniform() -> None:
    node = h100_node(2)
    partition(node, 0, SEVEN_1G)
    partition(node, 1, SEVEN_1G)
    config = build_config(mig_strategy=MigStrategy.single)
    assert advertise(node, config).capacity == {"nvidia.com/gpu": 14}
    labels = gfd_labels(node, config)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"
    assert labels["nvidia.com/gpu.count"] == "14"
    assert labels["nvidia.com/gpu.memory"] == str(round(9.75 * 1024))
    assert labels["nvidia.com/mig.strategy"] == "single"


@pytest.mark.parametrize(
    ("setup", "error"),
    [
        ("empty", "device 1 has no MIG devices configured"),
        ("mixed-enabled", "all devices on the node must be configured with the same migEnabled value"),
        ("two-types", "more than one MIG device type present on node"),
    ],
)
def test_single_strategy_invalid_configurations(setup: str, error: str) -> None:
    node = h100_node(2)
    partition(node, 0, SEVEN_1G)
    if setup == "empty":
        node.gpus[1].mig_enabled = True
    elif setup == "two-types":
        partition(node, 1, [("3g.40gb", 0), ("3g.40gb", 4)])
    config = build_config(mig_strategy=MigStrategy.single)
    adv = advertise(node, config)
    assert adv.capacity == {} and error in adv.errors[0]
    labels = gfd_labels(node, config)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-MIG-INVALID"
    assert (labels["nvidia.com/gpu.count"], labels["nvidia.com/gpu.replicas"]) == ("0", "0")
    with pytest.raises(UserError, match=r"advertises nothing"):
        admit(GpuRequest(GpuSharing.exclusive, 1), node, config)


def test_extended_resources_are_integers_in_limits() -> None:
    assert extended_resource_count("nvidia.com/gpu", "2") == 2
    assert extended_resource_count("nvidia.com/gpu", 1) == 1
    for bad in ("0.5", "500m", 1.5):
        with pytest.raises(UserError, match=r"must be an integer"):
            extended_resource_count("nvidia.com/gpu", bad)
    assert pod_extended_resources({"cpu": "2"}, {"nvidia.com/gpu": "1", "cpu": "2"}) == {"nvidia.com/gpu": 1}
    with pytest.raises(UserError, match=r"must be equal to nvidia.com/gpu limit"):
        pod_extended_resources({"nvidia.com/gpu": "1"}, {"nvidia.com/gpu": "2"})
    with pytest.raises(UserError, match=r"must be set in limits"):
        pod_extended_resources({"nvidia.com/gpu": "1"}, {})


def test_pods_are_admitted_or_told_why() -> None:
    node = h100_node()
    config = build_config(time_slicing=4, fail_requests_greater_than_one=True)
    assert admit_pod(Pod("one", gpu=GpuRequest(GpuSharing.time_slicing, 1)), node, config) == "nvidia.com/gpu"
    with pytest.raises(UserError, match=r"pod default/two: request for 'nvidia.com/gpu: 2' too large"):
        admit_pod(Pod("two", gpu=GpuRequest(GpuSharing.time_slicing, 2)), node, config)
    with pytest.raises(UserError, match=r"Requested: 40, Available: 32"):
        admit_pod(Pod("big", gpu=GpuRequest(GpuSharing.exclusive, 40)), node, build_config(time_slicing=4))
    assert admit_pod(Pod("cpu"), node, config) == ""
    assert admit_pod(Pod("half", gpu=GpuRequest(GpuSharing.milli, 1, milli=500)), node, config) == "gpu-milli"


def test_milli_shares_best_fit_like_the_openb_trace() -> None:
    shares = MilliShares([1000, 1000, 1000, 0])
    assert shares.take(GpuRequest(GpuSharing.milli, 1, milli=600)) == [0]
    assert shares.take(GpuRequest(GpuSharing.milli, 1, milli=300)) == [0]  # best fit: the fuller GPU
    assert shares.free == [100, 1000, 1000, 0]
    assert shares.fit(GpuRequest(GpuSharing.exclusive, 2)) == [1, 2]
    assert shares.fit(GpuRequest(GpuSharing.exclusive, 3)) is None
    with pytest.raises(UserError, match=r"share is of one GPU"):
        shares.fit(GpuRequest(GpuSharing.milli, 2, milli=500))
    node = h100_node(2)
    node.gpus[1].health = GpuHealth.lost
    assert MilliShares.for_node(node).free == [1000, 0]


def test_device_plugin_config_round_trips_and_rejects_bad_input() -> None:
    config = load_config(REFERENCE_CONFIG)
    assert load_config(render_config(config)) == config
    with pytest.raises(ManifestError, match=r"unknown field 'sharing.timeSlicing.renameByDefualt'"):
        load_config(REFERENCE_CONFIG.replace("renameByDefault", "renameByDefualt"))
    with pytest.raises(ManifestError, match=r"unknown version"):
        load_config("version: v2\n")
    with pytest.raises(ManifestError, match=r"mutually exclusive"):
        load_config(
            "version: v1\nsharing:\n  timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 2}]}\n"
            "  mps: {resources: [{name: nvidia.com/gpu, replicas: 2}]}\n"
        )
    with pytest.raises(ManifestError, match=r"replicas"):
        build_config(time_slicing=1)


def test_configmap_is_a_valid_kubernetes_object() -> None:
    cm = configmap("time-slicing-config", {"any": build_config(time_slicing=4, rename=True)})
    kubernetes_validate.validate(cm, "1.30.0", strict=True)
    reloaded = yaml.safe_load(dump_manifests([cm]))
    assert DevicePluginConfig.model_validate(yaml.safe_load(reloaded["data"]["any"])).sharing.time_slicing
