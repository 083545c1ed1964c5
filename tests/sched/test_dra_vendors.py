"""DRA on a mixed node set: AMD's gpu.amd.com slices beside NVIDIA's gpu.nvidia.com, claims that select by vendor,
by either vendor or by memory capacity, and Intel Gaudi, which has no DRA driver."""

from __future__ import annotations

import re
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from gpufleet.errors import UserError
from gpufleet.model import Cluster
from gpufleet.sched.dra.allocator import Allocator
from gpufleet.sched.dra.amd_slices import amd_resource_slices
from gpufleet.sched.dra.objects import DeviceClass, ResourceClaim, parse_dra_object
from gpufleet.sched.dra.vendors import device_classes, node_slices
from gpufleet.sched.partition.amd_partition import mode
from gpufleet.spec.builder import build_cluster
from gpufleet.spec.cluster_spec import ClusterBody

K8S = "1.34.0"


def fleet() -> Cluster:
    pools = [
        {"name": "h100", "count": 1, "gpu": {"model": "h100-sxm", "count": 8}},
        {"name": "mi300x", "count": 2, "gpu": {"model": "mi300x", "count": 8},
         "software": {"driverVersion": "6.10.5", "cudaVersion": "6.4.1"}},
        {"name": "gaudi3", "count": 1, "gpu": {"model": "gaudi3", "count": 8}},
    ]  # fmt: skip
    cluster = build_cluster("t", ClusterBody.model_validate({"nodePools": pools}))
    cluster.node("mi300x-001").labels["amd.com/gpu.compute-memory-partition"] = "cpx_nps4"
    return cluster


def allocator(cluster: Cluster, *extra: DeviceClass) -> Allocator:
    slices = [s for n in cluster.nodes if n.gpu_vendor != "intel" for s in node_slices(n)]
    return Allocator(slices, [*device_classes(), *extra])


def claim(name: str, cls: str, selector: str | None = None, count: int = 1) -> ResourceClaim:
    body: dict[str, object] = {"deviceClassName": cls, "allocationMode": "ExactCount", "count": count}
    if selector:
        body["selectors"] = [{"cel": {"expression": selector}}]
    doc = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
           "spec": {"devices": {"requests": [{"name": "gpu", "exactly": body}]}}}  # fmt: skip
    obj = parse_dra_object(doc)
    assert isinstance(obj, ResourceClaim)
    return obj


def nodes_of(done: ResourceClaim) -> set[str]:
    assert done.status is not None and done.status.allocation is not None
    assert done.status.allocation.devices is not None
    return {r.pool for r in done.status.allocation.devices.results or []}


ANY_GPU = DeviceClass.model_validate(
    yaml.safe_load("""
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: any-gpu}
spec:
  selectors:
  - cel: {expression: 'device.driver in ["gpu.amd.com", "gpu.nvidia.com"]'}
""")
)


def test_amd_slices_in_the_drivers_shape() -> None:
    cluster = fleet()
    whole, cpx = cluster.node("mi300x-000"), cluster.node("mi300x-001")
    for node in (whole, cpx):
        for sl in amd_resource_slices(node):
            kubernetes_validate.validate(sl.to_k8s(), K8S, strict=True)
    dev = amd_resource_slices(whole)[0].spec.devices[0]  # type: ignore[index]
    assert dev.name == "gpu-0-128"
    attrs = {k: v.model_dump(by_alias=True, exclude_none=True) for k, v in (dev.attributes or {}).items()}
    assert attrs["type"] == {"string": "amdgpu"} and attrs["productName"] == {"string": "AMD_Instinct_MI300X"}
    assert attrs["deviceID"] == {"string": "0x74a1"} and attrs["partitionProfile"] == {"string": "spx_nps1"}
    assert attrs["driverVersion"] == {"version": "6.10.5"} and attrs["numaNode"] == {"int": 0}
    assert attrs["resource.kubernetes.io/pciBusID"] == {"string": "0000:18:00.0"}
    assert {k: c.value for k, c in (dev.capacity or {}).items()} == {
        "memory": "196608Mi", "computeUnits": "304", "simdUnits": "1216",
    }  # fmt: skip
    # CPX+NPS4 (the node labeller's label): 64 partitions, 8 per parent, each 38 CUs and half a 48 GB quadrant
    parts = [d for sl in amd_resource_slices(cpx) for d in sl.spec.devices or []]
    assert len(parts) == 64 and parts[63].name == "gpu-63-191"
    first = parts[0].attributes or {}
    assert first["type"].string == "amdgpu-partition" and first["partitionProfile"].string == "cpx_nps4"
    assert (parts[0].capacity or {})["memory"].value == "24576Mi" and (parts[0].capacity or {})[
        "computeUnits"
    ].value == "38"
    parents = {(d.attributes or {})["resource.kubernetes.io/pciBusID"].string for d in parts[:8]}
    assert len(parents) == 1
    # a non-partitionable part carries no partitionProfile
    pools = [{"name": "m", "count": 1, "gpu": {"model": "mi210", "count": 2}}]
    mi210 = build_cluster("m", ClusterBody.model_validate({"nodePools": pools}))
    assert "partitionProfile" not in (amd_resource_slices(mi210.nodes[0])[0].spec.devices[0].attributes or {})  # type: ignore[index]
    # modes given per GPU override the label
    mixed = amd_resource_slices(whole, [mode("mi300x", "SPX", "NPS1")] * 4 + [mode("mi300x", "CPX", "NPS1")] * 4)
    assert len(mixed[0].spec.devices or []) == 4 + 32


def test_claims_select_only_amd_only_nvidia_either_or_by_memory() -> None:
    cluster = fleet()
    alloc = allocator(cluster, ANY_GPU)
    only_amd = 'device.driver == "gpu.amd.com" && device.attributes["gpu.amd.com"].productName == "AMD_Instinct_MI300X"'
    amd = alloc.allocate(claim("amd", "gpu.amd.com", only_amd, count=8))
    assert nodes_of(amd) <= {"mi300x-000", "mi300x-001"} and len(nodes_of(amd)) == 1
    nvidia = alloc.allocate(claim("nv", "gpu.nvidia.com", count=4))
    assert nodes_of(nvidia) == {"h100-000"}
    # whole AMD GPUs only (type amdgpu): the CPX node's partitions do not qualify, and the first node is taken
    with pytest.raises(UserError, match=r"wants 1 of class gpu\.amd\.com, 0 free devices match"):
        alloc.allocate(claim("amd2", "gpu.amd.com", 'device.attributes["gpu.amd.com"].type == "amdgpu"'))
    # vendor-neutral: either driver; 4 H100 left, then AMD partitions
    either = alloc.allocate(claim("either", "any-gpu", count=4))
    assert nodes_of(either) == {"h100-000"}
    more = alloc.allocate(claim("more", "any-gpu", count=8))
    assert nodes_of(more) == {"mi300x-001"}
    # capacity-based over both drivers: at least 20 GiB of a device's own memory
    big = 'device.capacity[device.driver].memory.compareTo(quantity("20Gi")) >= 0'
    fresh = allocator(fleet(), ANY_GPU)
    found = fresh.allocate(claim("big", "any-gpu", big, count=16))
    assert nodes_of(found) == {"mi300x-001"}  # 64 partitions of 24 GiB; an H100 node holds only 8 devices
    huge = 'device.capacity[device.driver].memory.compareTo(quantity("100Gi")) >= 0'
    assert nodes_of(fresh.allocate(claim("huge", "any-gpu", huge, count=2))) == {"mi300x-000"}  # 192 GB, not 80


def test_partitions_of_one_parent_by_the_pci_bus_id() -> None:
    doc = yaml.safe_load("""
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: two-partitions-same-parent}
spec:
  devices:
    requests:
    - name: p0
      exactly:
        deviceClassName: gpu.amd.com
        selectors: [{cel: {expression: 'device.attributes["gpu.amd.com"].type == "amdgpu-partition"'}}]
    - name: p1
      exactly:
        deviceClassName: gpu.amd.com
        selectors: [{cel: {expression: 'device.attributes["gpu.amd.com"].type == "amdgpu-partition"'}}]
    constraints:
    - matchAttribute: resource.kubernetes.io/pciBusID
      requests: [p0, p1]
""")
    obj = parse_dra_object(doc)
    assert isinstance(obj, ResourceClaim)
    done = allocator(fleet()).allocate(obj)
    kubernetes_validate.validate(done.to_k8s(), K8S, strict=True)
    results = done.status.allocation.devices.results  # type: ignore[union-attr]
    assert [r.device for r in results or []] == ["gpu-0-128", "gpu-1-129"]
    assert {r.driver for r in results or []} == {"gpu.amd.com"} and nodes_of(done) == {"mi300x-001"}


def test_gaudi_has_no_dra_driver_and_says_what_to_request() -> None:
    cluster = fleet()
    with pytest.raises(UserError) as err:
        node_slices(cluster.node("gaudi3-000"))
    assert "Intel Gaudi has no DRA driver" in err.value.message and "habana.ai/gaudi" in (err.value.fix or "")
    alloc = allocator(cluster, ANY_GPU)
    with pytest.raises(UserError) as err:
        alloc.allocate(claim("g", "gaudi.habana.ai"))
    assert "device class 'gaudi.habana.ai': Intel Gaudi has no DRA driver" in err.value.message
    with pytest.raises(UserError) as err:
        alloc.allocate(claim("g2", "any-gpu", 'device.driver == "habana.ai"'))
    assert "ResourceClaim g2: request gpu: Intel Gaudi has no DRA driver" in err.value.message
    assert "limits" in (err.value.fix or "")


def test_our_devices_have_the_shape_of_a_real_slice() -> None:
    """The demo guide's captured MI300X slice: the same attribute names and kinds, the same capacities."""
    real = yaml.safe_load((Path(__file__).parent / "data" / "amd-dra-resourceslice.yaml").read_text())
    device = real["spec"]["devices"][0]
    ours = amd_resource_slices(fleet().node("mi300x-000"))[0].to_k8s()["spec"]["devices"][0]
    kinds = {k: next(iter(v)) for k, v in device["attributes"].items()}
    # pcieRoot is published only where sysfs gives it; a model node has no sysfs; driverVersionFull is newer
    assert {k: next(iter(v)) for k, v in ours["attributes"].items() if k != "driverVersionFull"} == {
        k: kind for k, kind in kinds.items() if k != "resource.kubernetes.io/pcieRoot"
    }
    assert set(ours["capacity"]) == set(device["capacity"])
    assert re.fullmatch(r"gpu-\d+-\d+", ours["name"]) and ours["name"] == device["name"]
    assert re.fullmatch(r"AMD_Instinct_MI300X\w*", ours["attributes"]["productName"]["string"])
    assert re.fullmatch(
        r"\d{4}:[0-9a-f]{2}:[0-9a-f]{2}\.\d", ours["attributes"]["resource.kubernetes.io/pciBusID"]["string"]
    )
