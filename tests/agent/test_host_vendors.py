"""The host agent picks its accelerators' library: auto tries NVML, then amdsmi, then pyhlml; a named vendor tries
that one alone; a node with none reports each library down once. The libraries are fakes in the real bindings'
shapes (tests/sources/gpu/test_amdsmi.py, test_hlml_lib.py)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from gpufleet.agent.host import gpu_inventory_for, host_agent, open_gpu_source
from gpufleet.errors import DependencyMissingError, UserError
from tests.sources.gpu.test_amdsmi import cpx_node, fake_amdsmi
from tests.sources.gpu.test_hlml import fake_pyhlml, node


def _no_nvml() -> None:
    raise DependencyMissingError("NVML bindings (nvidia-ml-py) are not installed", fix="pip install")


def _missing(what: str) -> Callable[[], None]:
    def load() -> None:
        raise DependencyMissingError(f"{what} is missing", fix="install it")

    return load


@pytest.fixture
def amd_node(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("gpufleet.sources.gpu.nvml.load_pynvml", _no_nvml)
    monkeypatch.setattr("gpufleet.sources.gpu.amdsmi.load_amdsmi", lambda: fake_amdsmi(cpx_node()))
    monkeypatch.setattr("gpufleet.sources.gpu.hlml.load_pyhlml", _missing("pyhlml"))


@pytest.fixture
def gaudi_node(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("gpufleet.sources.gpu.nvml.load_pynvml", _no_nvml)
    monkeypatch.setattr("gpufleet.sources.gpu.amdsmi.load_amdsmi", _missing("libamd_smi.so"))
    monkeypatch.setattr("gpufleet.sources.gpu.hlml.load_pyhlml", lambda: fake_pyhlml(node()))


@pytest.fixture
def bare_node(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("gpufleet.sources.gpu.nvml.load_pynvml", _no_nvml)
    monkeypatch.setattr("gpufleet.sources.gpu.amdsmi.load_amdsmi", _missing("libamd_smi.so"))
    monkeypatch.setattr("gpufleet.sources.gpu.hlml.load_pyhlml", _missing("libhlml.so"))


def test_auto_finds_amd_after_nvml_and_says_so(amd_node: None, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="gpufleet.agent"):
        source, down = open_gpu_source("n", "auto")
    assert source is not None and source.name == "amdsmi" and down == []
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("accelerators:")]
    assert lines == ["accelerators: amd found 8 device(s) through amdsmi"]


def test_auto_finds_gaudi(gaudi_node: None) -> None:
    source, down = open_gpu_source("n")
    assert source is not None and source.name == "hlml" and down == []


def test_a_named_vendor_is_tried_alone(amd_node: None) -> None:
    source, down = open_gpu_source("n", "intel")
    assert source is None and down == [("hlml", "pyhlml is missing")]
    with pytest.raises(UserError, match="unknown accelerators"):
        open_gpu_source("n", "tpu")


def test_no_library_reports_each_down_once(bare_node: None, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="gpufleet.agent"):
        source, down = open_gpu_source("n", "auto")
    assert source is None and [name for name, _ in down] == ["nvml", "amdsmi", "hlml"]
    assert len([r for r in caplog.records if "no GPU library found" in r.getMessage()]) == 1


def test_host_agent_on_an_amd_node_collects_and_inventories(amd_node: None, tmp_path: Path) -> None:
    agent = host_agent(
        host="127.0.0.1", port=0, interval=1.0, data_dir=tmp_path, control_plane=None, token=lambda: None,
        node="mi300-a", kmsg_file=tmp_path / "kern.log", ib_sysfs=tmp_path / "no-ib", accelerators="amd",
    )  # fmt: skip
    agent.collector.collect_once()
    frame = agent.collector.frame
    assert {e.partition for e in frame.entities} == {"CPX_NPS4"} and len(frame.entities) == 8
    assert list(frame.gpu("DCGM_FI_DEV_GPU_UTIL")) == [11.0 * p for p in range(8)]
    assert agent.collector.source_up.get("amdsmi") is True
    inventory = gpu_inventory_for("mi300-a", agent.collector.sources[0], tmp_path / "no-ib", None)
    assert inventory.driver == "6.10.5" and len(inventory.gpus) == 8
    assert {g.vendor for g in inventory.gpus} == {"amd"} and {g.parent for g in inventory.gpus} == {0}


def test_host_agent_with_no_library_serves_source_up_zero(bare_node: None, tmp_path: Path) -> None:
    agent = host_agent(
        host="127.0.0.1", port=0, interval=1.0, data_dir=tmp_path, control_plane=None, token=lambda: None,
        node="bare", kmsg_file=tmp_path / "kern.log", ib_sysfs=tmp_path / "no-ib",
    )  # fmt: skip
    gauges = {
        dict(labels)["source"]: v
        for (name, labels), v in agent.collector.frame.gauges.items()
        if name == "gpufleet_source_up"
    }
    assert gauges == {"nvml": 0.0, "amdsmi": 0.0, "hlml": 0.0}
    assert agent.collector.frame.entities == ()
