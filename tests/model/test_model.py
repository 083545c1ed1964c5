from gpufleet.catalog import get_gpu_model
from gpufleet.model import GPU_RESOURCE, Gpu, GpuHealth, Node, NodeCondition


def _node() -> Node:
    spec = get_gpu_model("h100-sxm")
    gpus = [Gpu(i, f"GPU-{i}", f"00000000:{0x18 + i:02X}:00.0", f"s{i}", spec, minor=i) for i in range(8)]
    return Node(name="n0", pool="p", cpu_milli=1000, memory_mib=1024, gpus=gpus)


def test_unhealthy_gpus_reduce_allocatable_not_capacity() -> None:
    node = _node()
    node.gpus[3].health = GpuHealth.unhealthy
    node.gpus[5].health = GpuHealth.lost
    node.gpus[6].health = GpuHealth.degraded
    assert node.capacity()[GPU_RESOURCE] == 8
    assert node.allocatable()[GPU_RESOURCE] == 6


def test_gpu_identity_forms() -> None:
    gpu = _node().gpus[0]
    assert gpu.pci_short == "0000:18:00"  # the kernel's form, lower-case
    assert gpu.device == "nvidia0"


def test_conditions_replace_by_type() -> None:
    node = _node()
    assert node.ready
    node.set_condition(NodeCondition("Ready", "False", "Rebooting"))
    node.set_condition(NodeCondition("Ready", "False", "Rebooting"))
    assert len(node.conditions) == 1 and not node.ready
