"""Software detectors on hand-built node inventories: each CUDA version's minimum driver is enough and one patch
release below it is a mismatch; the fabric manager must match the driver; a node off the fleet's driver drifts."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from gpufleet.health.detectors.seen import FleetSeen, NodeSeen
from gpufleet.health.detectors.software import DriverDriftDetector, SoftwareDetector
from gpufleet.health.thresholds import load_thresholds
from gpufleet.model import Entity, EntityKind, RootCause, Severity
from gpufleet.model.observe import Finding, GpuInfo, NodeInventory

T0 = 1_800_000_000.0
T = load_thresholds()
MISMATCH = (RootCause.driver_mismatch, Entity(EntityKind.node, "node-a"), Severity.critical)


def seen(findings: list[Finding]) -> list[tuple[RootCause, Entity, Severity]]:
    return [(f.cause, f.entity, f.severity) for f in findings]


def node(driver: str, cuda: str = "12.4", fabric_manager: str = "", host: str = "node-a") -> NodeInventory:
    return NodeInventory(
        hostname=host, driver=driver, cuda=cuda, fabric_manager=fabric_manager, gpus=[GpuInfo(0, "GPU-0", "H100")]
    )


def drift(d: DriverDriftDetector, inventories: Sequence[NodeInventory]) -> list[Finding]:
    return d.detect(T0, FleetSeen(inventories=lambda: inventories))


def one_patch_below(version: str) -> str:
    *head, last = version.split(".")
    return ".".join([*head, f"{int(last) - 1:0{len(last)}d}"])


def test_the_documented_defaults() -> None:
    assert T.software.cuda_min_driver == {
        "11.8": "520.61.05",
        "12.0": "525.60.13",
        "12.1": "530.30.02",
        "12.2": "535.54.03",
        "12.3": "545.23.06",
        "12.4": "550.54.14",
        "12.5": "555.42.02",
        "12.6": "560.28.03",
        "12.8": "570.26",
        "12.9": "575.51.03",
        "13.0": "580.65.06",
    }


@pytest.mark.parametrize(("cuda", "minimum"), sorted(T.software.cuda_min_driver.items()))
def test_each_cuda_version_needs_its_minimum_driver(cuda: str, minimum: str) -> None:
    d = SoftwareDetector(T)
    assert d.detect(T0, NodeSeen(inventories=[node(minimum, cuda)])) == []
    below = one_patch_below(minimum)
    out = d.detect(T0, NodeSeen(inventories=[node(below, cuda)]))
    assert seen(out) == [MISMATCH]
    assert out[0].evidence == f"CUDA {cuda} needs driver >= {minimum}, node has {below}"
    assert out[0].action == "CORDON"


@pytest.mark.parametrize(
    ("driver", "expect"),
    [("550.54.9", True), ("550.100.01", False), ("551.0.0", False), ("549.99.99", True)],
)
def test_driver_versions_compare_as_numbers_not_strings(driver: str, expect: bool) -> None:
    out = SoftwareDetector(T).detect(T0, NodeSeen(inventories=[node(driver, "12.4")]))
    assert seen(out) == ([MISMATCH] if expect else [])


def test_a_cuda_patch_release_is_held_to_its_minor_versions_minimum() -> None:
    d = SoftwareDetector(T)
    minimum = T.software.cuda_min_driver["12.4"]
    assert d.detect(T0, NodeSeen(inventories=[node(minimum, "12.4.1")])) == []
    assert seen(d.detect(T0, NodeSeen(inventories=[node(one_patch_below(minimum), "12.4.1")]))) == [MISMATCH]


def test_a_cuda_version_without_a_known_minimum_and_a_node_without_a_driver_are_not_judged() -> None:
    d = SoftwareDetector(T)
    assert "99.0" not in T.software.cuda_min_driver
    assert d.detect(T0, NodeSeen(inventories=[node("400.0.0", "99.0"), node("", "12.4")])) == []


@pytest.mark.parametrize(("fabric_manager", "expect"), [("550.90.07", False), ("", False), ("550.54.15", True)])
def test_the_fabric_manager_must_match_the_driver(fabric_manager: str, expect: bool) -> None:
    out = SoftwareDetector(T).detect(T0, NodeSeen(inventories=[node("550.90.07", "12.4", fabric_manager)]))
    assert seen(out) == ([MISMATCH] if expect else [])
    if expect:
        assert out[0].evidence == "fabric manager 550.54.15 does not match driver 550.90.07"


def test_both_problems_on_one_node_are_one_finding() -> None:
    below = one_patch_below(T.software.cuda_min_driver["12.4"])
    (finding,) = SoftwareDetector(T).detect(T0, NodeSeen(inventories=[node(below, "12.4", "550.90.07")]))
    assert finding.evidence.count(";") == 1


def test_a_node_off_the_fleets_driver_drifts() -> None:
    d = DriverDriftDetector(every_s=0.0)  # every call compares
    fleet = [node("550.90.07", host=f"n{k}") for k in range(3)] + [node("550.54.15", host="n3")]
    assert seen(drift(d, fleet)) == [(RootCause.driver_mismatch, Entity(EntityKind.node, "n3"), Severity.critical)]
    assert drift(d, fleet[:3]) == []
    assert drift(d, [fleet[3]]) == []  # one node is its own fleet
    gpuless = NodeInventory(hostname="login", driver="535.104.05", cuda="12.2")
    assert drift(d, [*fleet[:3], gpuless]) == []  # a node without GPUs is no part of the GPU fleet
