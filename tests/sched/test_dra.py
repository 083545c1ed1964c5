"""DRA objects in resource.k8s.io/v1 shapes, slices from the model, CEL selectors and the claim allocator."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from gpufleet.errors import ManifestError, UserError
from gpufleet.model import Cluster, GpuHealth
from gpufleet.sched.dra.allocator import Allocator
from gpufleet.sched.dra.cel import Quantity, compile_selector
from gpufleet.sched.dra.objects import (
    DeviceClass,
    ResourceClaim,
    ResourceClaimTemplate,
    load_dra_objects,
    parse_dra_object,
)
from gpufleet.sched.dra.slices import nvidia_device_classes, resource_slices
from gpufleet.sched.partition.mig import MigLayout
from gpufleet.spec.builder import build_cluster
from gpufleet.spec.cluster_spec import ClusterBody

K8S = "1.34.0"  # resource.k8s.io/v1 arrived in 1.34


def fleet() -> Cluster:
    body = ClusterBody.model_validate(
        {
            "nodePools": [
                {"name": "h100", "count": 2, "gpu": {"model": "h100-sxm", "count": 8}},
                {"name": "a100", "count": 1, "gpu": {"model": "a100-40gb", "count": 2}},
            ]
        }
    )
    cluster = build_cluster("t", body)
    a100 = cluster.node("a100-000")
    for gpu in a100.gpus:
        gpu.mig_enabled = True
        layout = MigLayout.of("A100-SXM4/PCIE-40GB", [("3g.20gb", 0), ("2g.10gb", 4), ("1g.5gb", 6)])
        gpu.mig_instances = layout.to_instances(gpu.uuid)
    return cluster


def claim(yaml_text: str) -> ResourceClaim:
    obj = parse_dra_object(yaml.safe_load(yaml_text))
    assert isinstance(obj, ResourceClaim)
    return obj


def allocator(cluster: Cluster | None = None) -> Allocator:
    cluster = cluster or fleet()
    return Allocator([s for n in cluster.nodes for s in resource_slices(n)], nvidia_device_classes())


BIG_GPU = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: big-gpu, namespace: ml}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.nvidia.com
          selectors:
          - cel:
              expression: |
                device.attributes['gpu.nvidia.com'].productName.lowerAscii().matches('^.*h100.*$') &&
                device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0
"""


def test_reference_objects_parse_and_dump_back(tmp_path: Path) -> None:
    path = tmp_path / "dra.yaml"
    classes = [c.to_k8s() for c in nvidia_device_classes()]
    path.write_text(BIG_GPU + "---\n" + yaml.safe_dump_all(classes))
    objs = load_dra_objects(path)
    assert [type(o) for o in objs] == [ResourceClaimTemplate, DeviceClass, DeviceClass]
    template = objs[0]
    assert isinstance(template, ResourceClaimTemplate)
    made = template.instantiate("pod-a-gpu")
    assert made.metadata.namespace == "ml" and made.spec == template.spec.spec
    for obj in objs:
        kubernetes_validate.validate(obj.to_k8s(), K8S, strict=True)
    assert objs[1].to_k8s()["spec"]["extendedResourceName"] == "nvidia.com/gpu"


def test_bad_objects_name_the_field() -> None:
    doc = yaml.safe_load(BIG_GPU)
    doc["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClass"] = "x"
    with pytest.raises(ManifestError, match=r"unknown field.*deviceClass'; did you mean 'deviceClassName'"):
        parse_dra_object(doc)
    with pytest.raises(ManifestError, match=r"apiVersion 'resource.k8s.io/v1beta1'"):
        parse_dra_object({"apiVersion": "resource.k8s.io/v1beta1", "kind": "ResourceClaim"})
    both = {"name": "g", "exactly": {"deviceClassName": "a"}, "firstAvailable": [{"name": "x", "deviceClassName": "a"}]}
    with pytest.raises(ManifestError, match=r"exactly one of `exactly` and `firstAvailable`"):
        parse_dra_object(
            {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c"},
             "spec": {"devices": {"requests": [both]}}}
        )  # fmt: skip


def test_slices_from_the_model_are_valid_and_carry_the_driver_attributes() -> None:
    cluster = fleet()
    cluster.node("h100-000").gpus[5].health = GpuHealth.unhealthy
    slices = [s for n in cluster.nodes for s in resource_slices(n)]
    for sl in slices:
        kubernetes_validate.validate(sl.to_k8s(), K8S, strict=True)
    h100 = slices[0].to_k8s()["spec"]
    assert h100["driver"] == "gpu.nvidia.com" and h100["nodeName"] == "h100-000"
    assert h100["pool"] == {"name": "h100-000", "generation": 1, "resourceSliceCount": 1}
    gpu0 = h100["devices"][0]
    assert gpu0["name"] == "gpu-0"
    attrs = gpu0["attributes"]
    assert attrs["type"] == {"string": "gpu"}
    assert attrs["productName"] == {"string": "NVIDIA H100 80GB HBM3"}
    assert attrs["architecture"] == {"string": "Hopper"}
    assert attrs["cudaComputeCapability"] == {"version": "9.0.0"}
    assert attrs["driverVersion"] == {"version": "550.90.7"}
    assert attrs["index"] == {"int": 0}
    assert attrs["uuid"]["string"].startswith("GPU-")
    assert gpu0["capacity"]["memory"] == {"value": "81559Mi"}
    assert h100["devices"][5]["taints"][0]["effect"] == "NoSchedule"
    mig = slices[2].to_k8s()["spec"]["devices"]
    assert [d["name"] for d in mig[:3]] == ["gpu-0-mig-3g20gb-9-0", "gpu-0-mig-2g10gb-14-4", "gpu-0-mig-1g5gb-19-6"]
    assert mig[0]["attributes"]["profile"] == {"string": "3g.20gb"}
    assert {k for k in mig[0]["capacity"] if k.startswith("memorySlice")} == {f"memorySlice{i}" for i in range(4)}


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ('device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"', True),
        ('device.attributes["gpu.nvidia.com"].productName == "NVIDIA A100-SXM4-40GB"', False),
        ('device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0', True),
        ('device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("80Gi")) >= 0', False),  # 81559Mi < 81920Mi
        ('device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("80G"))', True),  # 80G < 80Gi
        ('device.attributes["gpu.nvidia.com"].driverVersion.isGreaterThan(semver("535.104.5"))', True),
        ('device.attributes["gpu.nvidia.com"].cudaComputeCapability.major() >= 9', True),
        ('device.attributes["gpu.nvidia.com"].index == 0', True),
        ("'parentUUID' in device.attributes['gpu.nvidia.com']", False),
        ('device.attributes["other.example.com"].size() == 0', True),
        ('device.attributes["resource.kubernetes.io"].pciBusID.startsWith("0000:")', True),
        ("device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'", True),
    ],
)
def test_cel_selectors_match_and_do_not_match(expression: str, expected: bool) -> None:
    dev = allocator().devices[0]
    assert compile_selector(expression).matches(dev.cel, dev.device.name) is expected


def test_bad_cel_is_a_user_error_naming_the_expression() -> None:
    with pytest.raises(UserError, match=r"CEL selector 'device.attributes\[\"gpu.nvidia.com\"\].productName ==' does "
                       r"not parse: syntax error at line 1, column 49"):  # fmt: skip
        compile_selector('device.attributes["gpu.nvidia.com"].productName ==')
    dev = allocator().devices[0]
    with pytest.raises(UserError, match=r"CEL runtime error .* for device gpu-0: no such member"):
        compile_selector('device.attributes["gpu.nvidia.com"].parentUUID == "x"').matches(dev.cel, "gpu-0")
    with pytest.raises(UserError, match=r"returned IntType, not bool"):
        compile_selector("1 + 1").matches(dev.cel, "gpu-0")
    with pytest.raises(UserError, match=r"quantities must match"):
        compile_selector('quantity("ten") == quantity("10")').matches(dev.cel, "gpu-0")


def test_quantities_compare_across_suffixes() -> None:
    assert Quantity("1Gi") > Quantity("1G") and Quantity("1000m") == Quantity("1")
    assert Quantity("1.5Gi").value == 3 * 2**29 and Quantity("2e3") == Quantity("2k")
    with pytest.raises(ValueError):
        Quantity("1.5.5")


def test_claim_for_two_h100_with_memory_selector_is_allocated_on_one_node() -> None:
    alloc = allocator()
    template = parse_dra_object(yaml.safe_load(BIG_GPU))
    assert isinstance(template, ResourceClaimTemplate)
    request = template.instantiate("two")
    assert request.spec.devices and request.spec.devices.requests
    exactly = request.spec.devices.requests[0].exactly
    assert exactly is not None
    exactly.count = 2
    done = alloc.allocate(request)
    doc = done.to_k8s()
    kubernetes_validate.validate(doc, K8S, strict=True)
    results = doc["status"]["allocation"]["devices"]["results"]
    assert [(r["request"], r["pool"], r["device"]) for r in results] == [
        ("gpu", "h100-000", "gpu-0"),
        ("gpu", "h100-000", "gpu-1"),
    ]
    terms = doc["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"]
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["h100-000"]}]}]
    again = alloc.allocate(request)  # the first two are taken now
    assert [r.device for r in again.status.allocation.devices.results] == ["gpu-2", "gpu-3"]  # type: ignore[union-attr]


def test_unmatched_and_exhausted_claims_say_why() -> None:
    alloc = allocator()
    nine = claim(
        """
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: nine}
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: gpu.nvidia.com, count: 9}
"""
    )
    with pytest.raises(UserError, match=r"cannot allocate ResourceClaim nine: a100-000: request gpu wants 9 of class "
                       "gpu.nvidia.com, 0 free devices match; h100-000: .* 8 free devices match"):  # fmt: skip
        alloc.allocate(nine)
    with pytest.raises(UserError, match=r"device class 'tpu.example.com' not found"):
        alloc.allocate(claim(BIG_GPU.replace("ResourceClaimTemplate", "ResourceClaim").replace("  spec:\n    devices",
                             "  devices").replace("gpu.nvidia.com\n", "tpu.example.com\n", 1)))  # fmt: skip


def test_unhealthy_gpus_are_tainted_and_skipped_unless_tolerated() -> None:
    cluster = fleet()
    cluster.node("h100-000").gpus[0].health = GpuHealth.unhealthy
    one = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: one}
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: gpu.nvidia.com%s}
"""
    got = allocator(cluster).allocate(claim(one % ""), node="h100-000")
    assert got.status.allocation.devices.results[0].device == "gpu-1"  # type: ignore[union-attr]
    tolerant = claim(one % ", tolerations: [{operator: Exists}]")
    got = allocator(cluster).allocate(tolerant, node="h100-000")
    assert got.status.allocation.devices.results[0].device == "gpu-0"  # type: ignore[union-attr]


def test_all_mode_first_available_and_attribute_constraints() -> None:
    alloc = allocator()
    whole_node = claim(
        """
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: all}
spec:
  devices:
    requests:
    - name: gpus
      exactly: {deviceClassName: gpu.nvidia.com, allocationMode: All}
"""
    )
    got = alloc.allocate(whole_node, node="h100-001")
    assert len(got.status.allocation.devices.results) == 8  # type: ignore[union-attr]
    fallback = claim(
        """
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: fallback}
spec:
  devices:
    requests:
    - name: mig
      firstAvailable:
      - name: big
        deviceClassName: mig.nvidia.com
        selectors: [{cel: {expression: "device.attributes['gpu.nvidia.com'].profile == '7g.40gb'"}}]
      - name: medium
        deviceClassName: mig.nvidia.com
        count: 2
        selectors: [{cel: {expression: "device.attributes['gpu.nvidia.com'].profile == '3g.20gb'"}}]
    constraints:
    - matchAttribute: gpu.nvidia.com/parentUUID
"""
    )
    with pytest.raises(UserError, match=r"free devices match"):  # both 3g instances are on different GPUs
        alloc.allocate(fallback)
    assert fallback.spec.devices and fallback.spec.devices.constraints
    fallback.spec.devices.constraints[0].match_attribute = None
    fallback.spec.devices.constraints[0].distinct_attribute = "gpu.nvidia.com/parentUUID"
    got = alloc.allocate(fallback)
    results = got.status.allocation.devices.results  # type: ignore[union-attr]
    assert [(r.request, r.device) for r in results] == [("mig/medium", "gpu-0-mig-3g20gb-9-0"),
                                                        ("mig/medium", "gpu-1-mig-3g20gb-9-0")]  # fmt: skip
    kubernetes_validate.validate(got.to_k8s(), K8S, strict=True)
    same_gpu = claim(
        """
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: same-gpu}
spec:
  devices:
    requests:
    - name: a
      exactly:
        deviceClassName: mig.nvidia.com
        selectors: [{cel: {expression: "device.attributes['gpu.nvidia.com'].profile == '2g.10gb'"}}]
    - name: b
      exactly:
        deviceClassName: mig.nvidia.com
        selectors: [{cel: {expression: "device.attributes['gpu.nvidia.com'].profile == '1g.5gb'"}}]
    constraints:
    - {requests: [a, b], matchAttribute: gpu.nvidia.com/parentUUID}
"""
    )
    got = allocator().allocate(same_gpu)
    devices = [r.device for r in got.status.allocation.devices.results]  # type: ignore[union-attr]
    assert devices == ["gpu-0-mig-2g10gb-14-4", "gpu-0-mig-1g5gb-19-6"]


def test_the_consumer_is_recorded_in_reserved_for() -> None:
    from gpufleet.sched.dra.objects import ResourceClaimConsumerReference

    pod = ResourceClaimConsumerReference(resource="pods", name="trainer-0", uid="0b9c2b5e-1")
    got = allocator().allocate(claim(BIG_GPU.replace("ResourceClaimTemplate", "ResourceClaim").replace(
        "  spec:\n    devices", "  devices")), consumer=pod)  # fmt: skip
    doc = got.to_k8s()
    kubernetes_validate.validate(doc, K8S, strict=True)
    assert doc["status"]["reservedFor"] == [{"resource": "pods", "name": "trainer-0", "uid": "0b9c2b5e-1"}]


def mig_claim(name: str, profile: str, count: int = 1, constraint: str = "") -> ResourceClaim:
    expr = f"device.attributes['gpu.nvidia.com'].profile == '{profile}'"
    return claim(
        f"""
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {{name: {name}}}
spec:
  devices:
    requests:
    - name: mig
      exactly:
        deviceClassName: mig.nvidia.com
        count: {count}
        selectors: [{{cel: {{expression: "{expr}"}}}}]
    {constraint}
"""
    )


def test_dynamic_mig_slices_enforce_the_geometry_through_counters() -> None:
    from gpufleet.sched.dra.slices import partitionable_slices
    from gpufleet.sched.partition.planner import synthetic_cluster

    node = synthetic_cluster("h100", 2).nodes[0]
    slices = partitionable_slices(node)
    assert len(slices) == 2 and all(s.spec.pool.resource_slice_count == 2 for s in slices)
    for sl in slices:
        kubernetes_validate.validate(sl.to_k8s(), K8S, strict=True)
    assert len(slices[0].spec.devices or []) == 1 + 7 + 7 + 4 + 3 + 2 + 1 + 1  # the GPU and every placement
    alloc = Allocator(slices, nvidia_device_classes())

    def devices(c: ResourceClaim) -> list[str]:
        done = alloc.allocate(c)
        kubernetes_validate.validate(done.to_k8s(), K8S, strict=True)
        return [r.device for r in done.status.allocation.devices.results]  # type: ignore[union-attr]

    # two 3g on GPU 0 take all eight memory slices: the next 1g and the whole GPU must go to GPU 1
    assert sorted(devices(mig_claim("two-3g", "3g.40gb", 2))) == ["gpu-0-mig-3g40gb-9-0", "gpu-0-mig-3g40gb-9-4"]
    # the 1g goes where MigLayout.allocate would put it (slices 0-3 first, keeping 3g at 4 open) ...
    assert devices(mig_claim("one-1g", "1g.10gb")) == ["gpu-1-mig-1g10gb-19-3"]
    # ... and the next one joins it on the fuller GPU
    assert devices(mig_claim("two-1g", "1g.10gb")) == ["gpu-1-mig-1g10gb-19-2"]
    whole = claim(
        """
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: whole}
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: gpu.nvidia.com}
"""
    )
    with pytest.raises(UserError, match="0 free devices match"):
        alloc.allocate(whole)  # GPU 0 is full and GPU 1 has a 1g on it
    # at most one +me per GPU: two on one parent cannot be, two on different parents can
    same = "constraints: [{matchAttribute: gpu.nvidia.com/parentUUID}]"
    with pytest.raises(UserError, match="cannot allocate ResourceClaim me-same"):
        alloc.allocate(mig_claim("me-same", "1g.10gb+me", 2, same))
    alloc2 = Allocator(partitionable_slices(node), nvidia_device_classes())
    got = alloc2.allocate(mig_claim("me-two", "1g.10gb+me", 2))
    parents = {r.device.split("-mig-")[0] for r in got.status.allocation.devices.results}  # type: ignore[union-attr]
    assert parents == {"gpu-0", "gpu-1"}
    alloc2.release(got)
    assert all(v == 0 for v in alloc2.consumed.values())
    assert alloc2.allocate(whole).status is not None
