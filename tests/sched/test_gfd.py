"""GPU Feature Discovery labels derived from the model."""

from __future__ import annotations

from gpufleet.sched.framework.snapshot import parse_node
from gpufleet.sched.partition.device_plugin import MigStrategy, build_config
from gpufleet.sched.partition.gfd import apply_gfd_labels, gfd_labels
from tests.sched.k8s_objects import fabric_cluster, knode


def test_h100_labels() -> None:
    node = fabric_cluster(nodes=1, per_su=1).nodes[0]
    labels = gfd_labels(node)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels["nvidia.com/gpu.count"] == "8"
    assert labels["nvidia.com/gpu.memory"] == "81559"
    assert labels["nvidia.com/gpu.family"] == "hopper"
    assert (labels["nvidia.com/gpu.compute.major"], labels["nvidia.com/gpu.compute.minor"]) == ("9", "0")
    assert labels["nvidia.com/cuda.driver-version.full"] == "550.90.07"
    assert labels["nvidia.com/cuda.driver-version.major"] == "550"
    assert labels["nvidia.com/cuda.driver-version.minor"] == "90"
    assert labels["nvidia.com/cuda.driver-version.revision"] == "07"
    assert labels["nvidia.com/cuda.runtime-version.full"] == "12.4"
    assert labels["nvidia.com/mig.capable"] == "true"
    assert labels["nvidia.com/mps.capable"] == "false"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "none"
    assert labels["nvidia.com/gpu.replicas"] == "1"
    # GFD also writes the deprecated version names, the machine type and the GPU mode
    assert (labels["nvidia.com/cuda.driver.major"], labels["nvidia.com/cuda.driver.rev"]) == ("550", "07")
    assert labels["nvidia.com/cuda.runtime.minor"] == "4"
    assert (labels["nvidia.com/gpu.machine"], labels["nvidia.com/gpu.mode"]) == ("unknown", "compute")


def test_sharing_changes_product_and_replicas() -> None:
    node = fabric_cluster(nodes=1, per_su=1, model="t4", gpus=4).nodes[0]
    ts = gfd_labels(node, build_config(time_slicing=4))
    assert ts["nvidia.com/gpu.product"] == "Tesla-T4-SHARED"
    assert ts["nvidia.com/gpu.replicas"] == "4"
    assert ts["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert ts["nvidia.com/mig.capable"] == "false"
    renamed = gfd_labels(node, build_config(time_slicing=4, rename=True))
    assert renamed["nvidia.com/gpu.product"] == "Tesla-T4"
    mps = gfd_labels(node, build_config(mps=2))
    assert mps["nvidia.com/mps.capable"] == "true"
    assert gfd_labels(fabric_cluster(nodes=1, per_su=1).nodes[0], build_config(mig_strategy=MigStrategy.mixed))[
        "nvidia.com/mig.strategy"
    ] == ("mixed")


def test_labels_round_trip_through_the_node_parser() -> None:
    """The product label GFD writes is what the snapshot parser resolves back to the catalog model."""
    model_node = fabric_cluster(nodes=1, per_su=1, model="h100-nvl", gpus=4).nodes[0]
    labels = apply_gfd_labels(model_node)
    parsed = parse_node(knode("x", gpus=4, product=labels["nvidia.com/gpu.product"]))
    assert parsed.node.gpus[0].model.name == "h100-nvl"
    assert gfd_labels(parse_node(knode("cpu", gpus=0)).node) == {}
