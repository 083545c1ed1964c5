"""The labels AMD's node labeller and Gaudi feature discovery write, in their exact key forms."""

from __future__ import annotations

import re

from gpufleet.model import Cluster, Node
from gpufleet.sched.framework.snapshot import parse_node
from gpufleet.sched.partition.amd_partition import advertised, mode
from gpufleet.sched.partition.gfd import gfd_labels
from gpufleet.sched.partition.vendor_labels import GaudiHost, amd_labels, discovery_labels, gaudi_labels
from gpufleet.spec.builder import build_cluster
from gpufleet.spec.cluster_spec import ClusterBody
from tests.sched.k8s_objects import knode

# Kubernetes label rules: an optional DNS-subdomain prefix, a name of at most 63, a value of at most 63
_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]"
_KEY = re.compile(rf"^([a-z0-9]([-a-z0-9.]{{0,251}}[a-z0-9])?/)?{_NAME}$")
_VALUE = re.compile(rf"^({_NAME})?$")


def nodes(model: str, driver: str, count: int = 8) -> Node:
    pool = {"name": "p", "count": 1, "gpu": {"model": model, "count": count}, "software": {"driverVersion": driver}}
    cluster: Cluster = build_cluster("t", ClusterBody.model_validate({"nodePools": [pool]}))
    return cluster.nodes[0]


def valid(labels: dict[str, str]) -> bool:
    return all(_KEY.match(k) and len(k.split("/")[-1]) <= 63 and _VALUE.match(v) for k, v in labels.items())


def test_amd_labels_of_a_whole_gpu_node_match_the_labellers_own_test_values() -> None:
    # ROCm/k8s-device-plugin cmd/k8s-node-labeller main_test.go: an MI210 node
    labels = amd_labels(nodes("mi210", "6.10.5", count=1))
    assert labels == {
        "amd.com/gpu.cu-count": "104",
        "amd.com/gpu.device-id": "740f",
        "amd.com/gpu.driver-version": "6.10.5",
        "amd.com/gpu.family": "AI",
        "amd.com/gpu.product-name": "Instinct_MI210",
        "amd.com/gpu.simd-count": "416",
        "amd.com/gpu.vram": "64G",
        "beta.amd.com/gpu.cu-count": "104",
        "beta.amd.com/gpu.cu-count.104": "1",
        "beta.amd.com/gpu.device-id": "740f",
        "beta.amd.com/gpu.device-id.740f": "1",
        "beta.amd.com/gpu.family": "AI",
        "beta.amd.com/gpu.family.AI": "1",
        "beta.amd.com/gpu.product-name": "Instinct_MI210",
        "beta.amd.com/gpu.product-name.Instinct_MI210": "1",
        "beta.amd.com/gpu.simd-count": "416",
        "beta.amd.com/gpu.simd-count.416": "1",
        "beta.amd.com/gpu.vram": "64G",
        "beta.amd.com/gpu.vram.64G": "1",
    }
    assert valid(labels)


def test_amd_labels_count_partitions_and_split_values_that_differ() -> None:
    node = nodes("mi300x", "6.10.5")
    spx = amd_labels(node, partition_labels=True)
    assert spx["amd.com/gpu.vram"] == "192G" and spx["beta.amd.com/gpu.cu-count.304"] == "8"
    assert spx["amd.com/gpu.compute-memory-partition"] == "spx_nps1"
    assert spx["amd.com/gpu.compute-partitioning-supported"] == "true"
    cpx = amd_labels(node, mode("mi300x", "CPX", "NPS4"), partition_labels=True)
    assert cpx["beta.amd.com/gpu.product-name.Instinct_MI300X"] == "64"
    assert (cpx["amd.com/gpu.cu-count"], cpx["amd.com/gpu.simd-count"], cpx["amd.com/gpu.vram"]) == ("38", "152", "24G")
    assert cpx["amd.com/gpu.compute-memory-partition"] == "cpx_nps4"
    half = [mode("mi300x", "SPX", "NPS1")] * 4 + [mode("mi300x", "CPX", "NPS1")] * 4
    mixed = amd_labels(node, half, partition_labels=True)
    assert mixed["amd.com/gpu.cu-count.304"] == "4" and mixed["amd.com/gpu.cu-count.38"] == "32"
    assert "amd.com/gpu.cu-count" not in mixed and "beta.amd.com/gpu.cu-count" not in mixed
    assert mixed["beta.amd.com/gpu.cu-count.38"] == "32"
    assert mixed["amd.com/gpu.product-name"] == "Instinct_MI300X"  # one value across all 36 logical GPUs
    assert "amd.com/gpu.compute-memory-partition" not in mixed  # only on a node in one mode
    assert "amd.com/gpu.compute-memory-partition" not in amd_labels(node)  # partition labels are opt-in
    assert valid(cpx) and valid(mixed)


def test_the_labels_read_back_as_the_node_they_describe() -> None:
    node = nodes("mi300x", "6.10.5")
    cpx = mode("mi300x", "CPX", "NPS4")
    obj = knode("m", gpus=0, labels=amd_labels(node, cpx, partition_labels=True))
    for key in ("capacity", "allocatable"):
        obj["status"][key].update({k: str(v) for k, v in advertised("mi300x", [cpx] * 8, "mixed").items()})
    info = parse_node(obj)
    assert (info.node.gpu_model, len(info.node.gpus), info.allocatable["amd.com/cpx_nps4"]) == ("mi300x", 64, 64)


def test_gaudi_labels_in_feature_discoverys_key_forms() -> None:
    node = nodes("gaudi2", "1.17.0-987abcd")
    node.software.kernel = "5.15.0-107-generic\n"  # as `uname -r` prints it
    host = GaudiHost(
        revision="01", fw_version="hl-gaudi2-1.16.0-fw-50.0.0", fw_os="Zephyr", product_name="HLS2_B81.04B01.0013",
        product_serial="SN 123/4", sys_vendor="Supermicro", distro="ubuntu_22.04",
    )  # fmt: skip
    labels = gaudi_labels(node, host, timestamp=1_700_000_000.9)
    assert labels == {
        "habana.ai/device.count": "8",
        "habana.ai/device.family": "gaudi",
        "habana.ai/device.id": "1020",
        "habana.ai/device.revision": "01",
        "habana.ai/device.type": "GAUDI2",
        "habana.ai/distro.ostree-version": "",
        "habana.ai/distro.type": "ubuntu_22.04",
        "habana.ai/driver.hash": "987abcd",
        "habana.ai/driver.version": "1.17.0",
        "habana.ai/fw.os": "Zephyr",
        "habana.ai/fw.version": "hl-gaudi2-1.16.0-fw-50.0.0",
        "habana.ai/hfd.timestamp": "1700000000",
        "habana.ai/kernel.version": "5.15.0-107-generic",
        "habana.ai/product.name": "HLS2_B81.04B01.0013",
        "habana.ai/product.serial": "SN_123_4",
        "habana.ai/sys.vendor": "Supermicro",
    }
    assert valid(labels)
    bare = nodes("gaudi3", "")
    no_driver = gaudi_labels(bare, host)
    assert no_driver["habana.ai/device.id"] == "1060" and no_driver["habana.ai/device.count"] == "8"
    assert all(
        no_driver[k] == "" for k in ("habana.ai/device.type", "habana.ai/driver.version", "habana.ai/fw.version")
    )
    assert "habana.ai/hfd.timestamp" not in no_driver


def test_each_node_gets_its_own_vendors_discovery_labels() -> None:
    h100, mi300x, gaudi3 = nodes("h100-sxm", "550.90.07"), nodes("mi300x", "6.10.5"), nodes("gaudi3", "1.21.0")
    assert discovery_labels(h100)["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert discovery_labels(mi300x)["amd.com/gpu.product-name"] == "Instinct_MI300X"
    assert discovery_labels(gaudi3)["habana.ai/device.type"] == "GAUDI3"
    assert gfd_labels(mi300x) == {} and amd_labels(h100) == {} and gaudi_labels(mi300x) == {}
