"""The twin's mixed-vendor fleet: faults speak their driver's language, jobs stay on one model, and the metrics only
AMD's and Gaudi's agents report follow the device's state."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.errors import ManifestError
from gpufleet.sim.scenario import build_twin
from gpufleet.sim.source import TwinSource
from gpufleet.sim.twin import Twin

CLUSTER = """
  cluster:
    nodePools:
      - {name: h100, count: 2, gpu: {model: h100-sxm, count: 8}, nics: {count: 8}}
      - {name: mi300x, count: 2, gpu: {model: mi300x, count: 8}, nics: {count: 8}}
      - {name: gaudi3, count: 2, gpu: {model: gaudi3, count: 8}}
    fabric: {leafRadix: 16, transport: roce}
"""


def _scenario(tmp_path: Path, workload: str, faults: str) -> Path:
    path = tmp_path / "mixed.yaml"
    path.write_text(
        "apiVersion: gpufleet.io/v1\nkind: Scenario\nmetadata: {name: mixed}\nspec:\n"
        + CLUSTER
        + f"  duration: 30m\n  workload: {workload}\n  faults:\n{faults}"
    )
    return path


def _twin(tmp_path: Path, faults: str, workload: str = "{}") -> Twin:
    twin, _ = build_twin(_scenario(tmp_path, workload, faults))
    return twin


@pytest.mark.parametrize(
    ("fault", "said"),
    [
        ("{at: 1m, type: xid, node: mi300x-000, gpu: 1, code: 48}", "'xid' is a fault of nvidia devices"),
        ("{at: 1m, type: ras-error, node: h100-000, gpu: 1}", "'ras-error' is a fault of amd, intel devices"),
        ("{at: 1m, type: gpu-hang, node: h100-000, gpu: 1}", "'gpu-hang' is a fault of amd, intel devices"),
        ("{at: 1m, type: nvlink-errors, node: gaudi3-000, gpu: 1}", "'nvlink-errors' is a fault of amd, nvidia"),
    ],
)
def test_a_fault_another_vendors_driver_cannot_report_is_refused(tmp_path: Path, fault: str, said: str) -> None:
    with pytest.raises(ManifestError, match=said):
        _twin(tmp_path, f"    - {fault}\n")


def test_a_job_never_spans_two_models(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="spans"):
        _twin(tmp_path, "    []\n", "{trainingJobs: [{name: j, nodes: [h100-000, mi300x-000]}]}")
    twin = _twin(tmp_path, "    []\n", "{trainingJobs: [{name: j, nodes: 2, pool: gaudi3}]}")
    assert twin.cluster.job("j").nodes == ["gaudi3-000", "gaudi3-001"]


def _lines(twin: Twin, node: str) -> list[str]:
    return list(twin.kmsg[node])


def test_each_vendor_writes_its_own_drivers_lines(tmp_path: Path) -> None:
    twin = _twin(
        tmp_path,
        "    - {at: 10s, type: ecc-dbe, node: mi300x-000, gpu: 2}\n"
        "    - {at: 10s, type: gpu-hang, node: gaudi3-000, gpu: 1}\n"
        "    - {at: 10s, type: gpu-off-bus, node: gaudi3-001, gpu: 3}\n"
        "    - {at: 10s, type: ecc-dbe, node: h100-000, gpu: 0}\n",
    )
    twin.run(40)
    amd, gaudi, lost, nvidia = (_lines(twin, n) for n in ("mi300x-000", "gaudi3-000", "gaudi3-001", "h100-000"))
    assert any("uncorrectable hardware errors detected in umc block" in line for line in amd)
    assert all("NVRM" not in line for line in amd + gaudi + lost)
    assert any("has not finished in" in line for line in gaudi)
    assert any("Device is NOT usable" in line for line in lost)
    assert any("NVRM: Xid" in line and ": 48," in line for line in nvidia)


def test_amds_own_health_verdict_follows_an_uncorrectable_error(tmp_path: Path) -> None:
    twin = _twin(tmp_path, "    - {at: 10s, type: ras-error, node: mi300x-000, gpu: 4, block: sdma}\n")
    source = TwinSource(twin, "mi300x-000")
    frame = source.new_frame()
    twin.run(5)
    source.collect(frame)
    assert list(frame.gpu("gpufleet_gpu_health")) == [1.0] * 8
    twin.run(20)
    source.collect(frame)
    health = frame.gpu("gpufleet_gpu_health")
    assert health[4] == 0.0 and sum(health) == 7.0
    twin.reset_gpu("mi300x-000", 4)
    source.collect(frame)
    assert frame.gpu("gpufleet_gpu_health")[4] == 1.0


def test_a_gaudis_builtin_ports_are_reported_and_nvidias_are_not(tmp_path: Path) -> None:
    twin = _twin(tmp_path, "    []\n")
    for node, expect in (("gaudi3-000", float(2**24 - 1)), ("h100-000", None)):
        source = TwinSource(twin, node)
        frame = source.new_frame()
        source.collect(frame)
        ports = frame.gpu("gpufleet_gpu_nic_port_mask")
        if expect is None:
            assert all(v != v for v in ports)  # NaN: not exported
        else:
            assert list(ports) == [expect] * 8
            external = frame.gpu("gpufleet_gpu_nic_port_external_mask")[0]
            assert int(external) == 0b111 << 21  # the three scale-out ports come after the 21 scale-up ones
