"""OpenSM's configuration as the settings judgement reads it, against the real OpenSM 3.3.23: its own default dump
(`opensm --create-config`), and a configuration written here that OpenSM runs a simulated fat tree with (ibsim,
tests/ibsim.py), whose routing engine and priority OpenSM then shows (its log, `sminfo`)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.fabric.discover import from_ibnetdiscover
from gpufleet.fabric.settings import is_tree, judge
from gpufleet.model.fabric_settings import HostFabricSettings
from gpufleet.parsers.infiniband.diags import parse_ibnetdiscover, parse_sminfo
from gpufleet.parsers.infiniband.opensm_conf import DEFAULTS, parse_opensm_conf
from gpufleet.sources.infiniband.settings import read_host_settings, read_opensm_config
from tests.conftest import require_tool
from tests.ibsim import OPENSM_CONF, SOCKET_SYSCTLS, UMAD2SIM, Fabric, running_fabric, unavailable, wait_for

pytestmark = pytest.mark.real


def test_the_judgement_knows_opensms_real_defaults(tmp_path: Path) -> None:
    require_tool("opensm")
    dump = tmp_path / "opensm.conf"
    done = subprocess.run(
        ["opensm", "--create-config", str(dump)], capture_output=True, text=True, timeout=30, check=False
    )
    assert dump.is_file(), done.stdout + done.stderr
    config = parse_opensm_conf(dump.read_text())
    assert {key: config.settings[key].value for key in DEFAULTS} == DEFAULTS
    read = read_opensm_config(dump)
    assert read.routing_engines == [] and read.sm_priority == 0 and read.sweep_interval == 10
    assert read.max_op_vls == 5 and read.qos is False
    found = judge([HostFabricSettings("sm-01", opensm=read)], fat_tree=True)
    assert [f.kind for f in found] == ["opensm-routing-engine"]
    assert "minhop" in found[0].message and "opensm.conf:228" in found[0].message  # "(null)" in the dump


@pytest.fixture(scope="module")
def updn_fabric(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Fabric, Path]]:
    require_tool("ibsim", "opensm", "ibnetdiscover", "sminfo", "sysctl")
    if not UMAD2SIM.exists():
        unavailable(f"needs {UMAD2SIM} (package libumad2sim0)")
    if subprocess.run(["sysctl", "-qw", *SOCKET_SYSCTLS], capture_output=True, check=False).returncode != 0:
        unavailable("needs root to raise the unix socket limits ibsim and OpenSM need")
    work = tmp_path_factory.mktemp("updn")
    conf = work / "opensm-updn.conf"
    conf.write_text(
        OPENSM_CONF.read_text()
        + "# written by the test: the settings the judgement reads\nrouting_engine updn\nsm_priority 9\n"
        + "log_flags 0x0f\n"
    )
    (work / "run").mkdir()
    with running_fabric(work / "run", conf) as started:
        yield started, conf


def test_a_written_configuration_takes_effect(updn_fabric: tuple[Fabric, Path]) -> None:
    fabric, conf = updn_fabric
    # the routing engine OpenSM runs, in its own words
    wait_for(lambda: "SUBNET UP" in fabric.opensm_log.read_text(), "OpenSM to bring the subnet up", 20)
    log = fabric.opensm_log.read_text()
    assert "'updn' routing engine set up" in log  # first in line; minhop after it as the fallback
    assert log.index("setup of routing engine 'updn'") < log.index("setup of routing engine 'minhop'")
    # the priority it runs with, as the fabric sees it
    sm = parse_sminfo(fabric.tool("sminfo").stdout)
    assert sm is not None and sm.priority == 9
    # read back as the agent reads it, and judged on the fabric ibnetdiscover finds: a fat tree with updn is fine
    graph = from_ibnetdiscover(parse_ibnetdiscover(fabric.tool("ibnetdiscover").stdout))
    assert is_tree(graph)
    settings = read_host_settings(root=Path("/nonexistent"), run=lambda argv: None, opensm_conf=conf, host="sm-01")
    assert settings.opensm is not None
    assert settings.opensm.routing_engines == ["updn"] and settings.opensm.sm_priority == 9
    assert settings.opensm.lines["routing_engine"] > 0
    assert judge([settings], fat_tree=True) == []
    # OpenSM runs on this machine: the agent's process scan sees it
    assert read_host_settings(run=lambda argv: None, opensm_conf=conf).opensm_running is True
