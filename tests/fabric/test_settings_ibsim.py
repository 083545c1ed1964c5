"""OpenSM's configuration as the settings judgement reads it, against the real OpenSM 3.3.23: its own default dump
(`opensm --create-config`), a configuration written here that OpenSM runs a simulated fat tree with (ibsim,
tests/ibsim.py), whose routing engine and priority OpenSM then shows (its log, `sminfo`), and a second OpenSM of the
same priority that takes mastership, as the agent's poll lists it (`saquery SMIR`)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.agent.fabric import poll_subnet
from gpufleet.fabric.discover import from_ibnetdiscover
from gpufleet.fabric.settings import is_tree, judge
from gpufleet.model.fabric_settings import HostFabricSettings
from gpufleet.parsers.infiniband.diags import parse_ibnetdiscover, parse_sminfo
from gpufleet.parsers.infiniband.opensm_conf import DEFAULTS, parse_opensm_conf
from gpufleet.parsers.infiniband.saquery import parse_smir
from gpufleet.sources.infiniband.diag_tools import FabricTools
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
    # every HCA port's MTU as the SM set it, read through SMPs by the agent's poll: ibsim's HCAs all run 2048
    tools = FabricTools(timeout_s=20, env=fabric.env, cwd=str(fabric.work))
    report = poll_subnet(tools, read_settings=lambda: HostFabricSettings("sm-01"), port_mtus=True)
    read_by_sm = {s.host: s for s in report.settings if s.source == "sm"}
    assert sorted(read_by_sm) == [f"node0{i}" for i in range(1, 9)]
    ports = [(h, p.device, p.port, p.state, p.active_mtu, p.max_mtu) for h, s in read_by_sm.items() for p in s.ports]
    assert len(ports) == 12 and {p[3:] for p in ports} == {("Active", 2048, 2048)}
    assert ("node05", "mlx5_0", 2, "Active", 2048, 2048) in ports
    assert [f for f in judge(report.settings, fat_tree=True) if f.kind.startswith("ib-mtu")] == []
    # OpenSM runs on this machine: the agent's process scan sees it
    assert read_host_settings(run=lambda argv: None, opensm_conf=conf).opensm_running is True


def test_a_second_subnet_manager_of_equal_priority(updn_fabric: tuple[Fabric, Path]) -> None:
    """A second OpenSM, on node01's HCA with the same priority 9: the subnet administrator lists a master and a
    standby of equal priority, the agent's poll carries both, and the judgement names them."""
    fabric, conf = updn_fabric
    before = parse_smir(fabric.tool("saquery", "SMIR").stdout)
    assert [(r.guid, r.priority, r.state) for r in before] == [("0x0000000000200000", 9, "MASTER")]
    second = fabric.work / "osm2"
    second.mkdir()
    env = {**fabric.env, "SIM_HOST": "node01 mlx5_0", "OSM_TMP_DIR": str(second), "OSM_CACHE_DIR": str(second)}
    log = second / "opensm.log"
    # the same priority; polls of the master every second (default 10 s), so the subnet settles within seconds
    second_conf = second / "opensm.conf"
    second_conf.write_text(conf.read_text() + "sminfo_polling_timeout 1000\npolling_retry_number 2\n")
    with (second / "stdout.log").open("wb") as out:
        proc = subprocess.Popen(
            ["opensm", "-F", str(second_conf), "-f", str(log)],
            cwd=fabric.work,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        tools = FabricTools(timeout_s=20, env=fabric.env, cwd=str(fabric.work))

        def both() -> bool:
            return len(parse_smir(fabric.tool("saquery", "SMIR").stdout)) == 2

        wait_for(both, "the subnet administrator to list both subnet managers", 60)
        report = poll_subnet(tools, read_settings=lambda: HostFabricSettings("node01"))
        [settings] = report.settings
        states = {sm.guid: (sm.priority, sm.state) for sm in settings.subnet_managers}
        assert set(states) == {"0x0000000000100001", "0x0000000000200000"}  # node01's port, spine1's
        assert {priority for priority, _ in states.values()} == {9}
        assert sorted(state for _, state in states.values())[-1] == "STANDBY"  # one master, one standby
        found = [f for f in judge(report.settings) if f.kind == "sm-equal-priority"]
        assert len(found) == 1 and "priority 9" in found[0].message
    finally:
        proc.terminate()  # OpenSM exits on SIGTERM, or is killed if MADs it waits for hold it
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
