"""The IB parsers against live infiniband-diags output.

ibsim simulates the shared ib-fabric recipe's fat tree (2 spines, 4 leaves, 8 HCAs), OpenSM brings it up, and
the ibsim console injects counter errors and a link fault; the tools reach the simulator through umad2sim. The
two settings of the recipe are applied (socket limits, OpenSM's outstanding PerfMgr queries) or ibsim and
OpenSM deadlock.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpufleet.sources.ibdiags import (
    parse_iblinkinfo,
    parse_ibnetdiscover,
    parse_ibqueryerrors,
    parse_perfquery,
)
from tests.conftest import IN_CI, require_tool

pytestmark = pytest.mark.real

UMAD2SIM = Path("/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so")
TOOL_TIMEOUT_S = 20
SOCKET_SYSCTLS = (
    "net.unix.max_dgram_qlen=4096",
    "net.core.wmem_default=8388608",
    "net.core.wmem_max=8388608",
)


def _unavailable(reason: str) -> None:
    if IN_CI:
        pytest.fail(reason)
    pytest.skip(reason)


def _wait_for(check: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@dataclass
class Fabric:
    work: Path
    env: dict[str, str]
    console: int  # write end of ibsim's console FIFO
    console_log: Path

    def tool(self, *args: str) -> subprocess.CompletedProcess[str]:
        # umad2sim writes a sys-<pid>/ tree into the working directory, so tools run in the scratch folder
        return subprocess.run(
            list(args),
            cwd=self.work,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=TOOL_TIMEOUT_S,
            check=False,
        )

    def sim(self, command: str, expect: str) -> None:
        before = self.console_log.read_text()
        os.write(self.console, (command + "\n").encode())
        _wait_for(lambda: expect in self.console_log.read_text()[len(before) :], f"ibsim to answer {command!r}")


@pytest.fixture(scope="module")
def fabric(shared: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fabric]:
    require_tool("ibsim", "opensm", "perfquery", "ibqueryerrors", "iblinkinfo", "ibnetdiscover", "sysctl")
    if not UMAD2SIM.exists():
        _unavailable(f"needs {UMAD2SIM} (package libumad2sim0)")
    if subprocess.run(["sysctl", "-qw", *SOCKET_SYSCTLS], capture_output=True, check=False).returncode != 0:
        _unavailable("needs root to raise the unix socket limits ibsim and OpenSM need")
    recipe = shared / "recipes" / "ib-fabric"
    work = tmp_path_factory.mktemp("ibfabric")
    (work / "osm").mkdir()
    env = {**os.environ, "IBSIM_SOCKNAME": f"gpufleet-test-{os.getpid()}"}  # a fabric of our own
    fifo = work / "console.fifo"
    os.mkfifo(fifo)
    console = os.open(fifo, os.O_RDWR)  # read-write: never blocks, and ibsim never sees end of file
    console_log = work / "ibsim.out"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with console_log.open("wb") as out, open(fifo, "rb") as console_in:
            procs.append(
                subprocess.Popen(
                    ["ibsim", "-s", str(recipe / "fattree.net")],
                    stdin=console_in,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    cwd=work,
                    env=env,
                )
            )
        _wait_for(lambda: "Network simulator ready" in console_log.read_text(), "ibsim")
        sim_env = {
            **env,
            "LD_PRELOAD": str(UMAD2SIM),
            "OSM_TMP_DIR": str(work / "osm"),
            "OSM_CACHE_DIR": str(work / "osm"),
        }
        osm_log = work / "osm" / "opensm.log"
        with (work / "osm" / "stdout.log").open("wb") as osm_out:
            procs.append(
                subprocess.Popen(
                    ["opensm", "-F", str(recipe / "opensm.conf"), "-f", str(osm_log)],
                    stdout=osm_out,
                    stderr=subprocess.STDOUT,
                    cwd=work,
                    env=sim_env,
                )
            )
        _wait_for(lambda: osm_log.exists() and "SUBNET UP" in osm_log.read_text(), "OpenSM SUBNET UP")
        tool_env = {**env, "LD_PRELOAD": str(UMAD2SIM)}
        yield Fabric(work=work, env=tool_env, console=console, console_log=console_log)
    finally:
        for proc in reversed(procs):  # OpenSM first: it exits cleanly on SIGTERM within about a second
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        os.close(console)


def test_discovery_then_injected_faults(fabric: Fabric) -> None:
    discovered = fabric.tool("ibnetdiscover")
    assert discovered.returncode == 0, discovered.stderr
    topo = parse_ibnetdiscover(discovered.stdout)
    types = [node.type for node in topo.nodes.values()]
    assert (types.count("Switch"), types.count("Ca")) == (6, 8)
    assert len(topo.links) == 2 * 20  # 20 cables, each listed from both ends
    node01 = next(node for node in topo.nodes.values() if node.description == "node01 mlx5_0")
    assert node01.lid is not None

    for counter in ("SymbolErrorCounter=1234", "PortRcvErrors=77", "LinkDownedCounter=3"):
        fabric.sim(f'PerformanceSet "node01 mlx5_0"[1] PortCounters.{counter}', "has been set")
    counters = fabric.tool("perfquery", str(node01.lid), "1")
    assert counters.returncode == 0, counters.stderr
    [port] = parse_perfquery(counters.stdout)
    assert (port.lid, port.port, port.extended) == (node01.lid, 1, False)
    assert (port.counters["SymbolErrorCounter"], port.counters["PortRcvErrors"]) == (1234, 77)
    assert port.counters["LinkDownedCounter"] == 3
    [extended] = parse_perfquery(fabric.tool("perfquery", "-x", str(node01.lid), "1").stdout)
    assert extended.extended and extended.counters["PortXmitPkts"] >= 0

    errors = fabric.tool("ibqueryerrors")
    assert errors.returncode == 1  # ibqueryerrors exits 1 when it found errors
    report = parse_ibqueryerrors(errors.stdout)
    bad = {(p.node, p.port): p.counters for p in report.ports}
    assert bad[("node01 mlx5_0", 1)] == {
        "SymbolErrorCounter": 1234,
        "LinkDownedCounter": 3,
        "PortRcvErrors": 77,
    }
    assert report.nodes_checked == 14 and report.ports_checked is not None

    fabric.sim('Unlink "leaf1"[35]', "")

    def leaf1_35_down() -> bool:
        links = parse_iblinkinfo(fabric.tool("iblinkinfo").stdout)
        port35 = next(link for link in links if link.node == "leaf1" and link.port == 35)
        return not port35.up and port35.remote_name == ""

    _wait_for(leaf1_35_down, "leaf1 port 35 to go down")
