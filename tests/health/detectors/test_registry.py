"""The detectors as one registry: where each runs, what it reads, the order they run in, and that a detector whose
inputs are not given does not run."""

from __future__ import annotations

import numpy as np
import pytest

from gpufleet.health.detectors.base import Registered, Scope, fleet_detector, registered_fleet, registered_node
from gpufleet.health.detectors.seen import FleetSeen, NodeSeen
from gpufleet.health.detectors.software import DriverDriftDetector
from gpufleet.model.kernel import KernelEvent
from gpufleet.model.observe import GpuInfo, NodeInventory
from gpufleet.telemetry.frame import GpuEntity, MetricFrame

T0 = 1_800_000_000.0


def test_every_detector_is_registered_once_with_its_scope_in_a_fixed_order() -> None:
    assert [(e.name, e.needs, e.lasting) for e in registered_node()] == [
        ("kernel", ("kernel",), False),  # events, each reported once
        ("gpu", ("frame",), True),
        ("fabric", ("frame",), True),
        ("software", ("inventories",), True),
        ("bmc-sensors", ("bmc",), True),  # conditions, on each read of the BMC
        ("bmc-sel", ("bmc",), False),  # the event log's new records, each once
        ("dcgm-health", ("frame",), True),  # DCGM's open health incidents
        ("dcgm-policy", ("frame",), False),  # each policy violation DCGM called back for, once
    ]
    assert [(e.name, e.needs) for e in registered_fleet()] == [
        ("training", ("jobs", "rank_util")),
        ("application", ("jobs", "rank_util", "signals")),
        ("slo", ("services",)),
        ("driver-drift", ("inventories",)),
    ]
    assert {e.scope for e in registered_node()} == {Scope.node}
    assert {e.scope for e in registered_fleet()} == {Scope.fleet}


def test_a_detector_runs_only_when_what_it_needs_is_given() -> None:
    (kernel, gpu, _, software, *_bmc) = registered_node()
    only_kernel = NodeSeen(kernel={"n0": []})
    assert kernel.ready(only_kernel) and not gpu.ready(only_kernel) and not software.ready(only_kernel)
    application = registered_fleet()[1]
    assert not application.ready(FleetSeen((), lambda job: np.empty(0)))  # no job signals: not judged


def test_a_need_the_scope_does_not_hold_is_refused() -> None:
    with pytest.raises(ValueError, match="FleetSeen does not hold"):
        fleet_detector("mystery", needs=("frame",))(DriverDriftDetector)
    with pytest.raises(ValueError, match="registered twice"):
        fleet_detector("training", needs=())(DriverDriftDetector)


def test_node_health_without_a_frame_judges_the_kernel_reports_alone() -> None:
    from gpufleet.health.node_health import NodeHealth

    frame = MetricFrame((GpuEntity(0, "GPU-0", "H100", "node-a", "00000000:3B:00.0"),))
    health = NodeHealth(frame)
    lost = KernelEvent("xid", 1, "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.", "fallen off", xid=79,
                       pci="0000:3b:00")  # fmt: skip
    out = health.observe(T0, kernel={"node-a": [lost]})
    assert [(r.kind, r.gpu) for r in out.kernel] == [("xid", 0)]
    assert [str(f.entity) for f in out.findings] == ["gpu/node-a/0"]
    assert out.links == []


def test_driver_drift_reads_the_inventories_at_most_once_a_minute() -> None:
    reads = []

    def inventories() -> list[NodeInventory]:
        reads.append(1)
        return [
            NodeInventory(hostname=f"n{k}", driver="550.90.07" if k else "535.104.05", gpus=[GpuInfo(0, "G", "H100")])
            for k in range(3)
        ]

    d = DriverDriftDetector()
    seen = FleetSeen(inventories=inventories)
    assert [f.entity.node for f in d.detect(T0, seen)] == ["n0"]
    assert d.detect(T0 + 59, seen) == [] and len(reads) == 1
    assert len(d.detect(T0 + 60, seen)) == 1 and len(reads) == 2


def test_registered_entries_are_plain_data() -> None:
    entry = registered_fleet()[0]
    assert isinstance(entry, Registered) and entry.module == "gpufleet.health.detectors.training"
