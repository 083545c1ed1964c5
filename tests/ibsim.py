"""A simulated InfiniBand fabric for tests: ibsim with a fat-tree topology, OpenSM (with PerfMgr) bringing it up,
and the infiniband-diags tools reaching it through umad2sim (LD_PRELOAD). The ibsim console (a FIFO) takes links
down and sets counters. The two settings the fabric needs or ibsim and OpenSM deadlock are applied: the unix
socket limits, and OpenSM's outstanding PerfMgr queries (in the opensm.conf beside the topology).

    from tests.ibsim import fabric  # noqa: F401  (the module fixture)
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import IN_CI, require_tool

DATA = Path(__file__).parent / "fabric" / "data"
TOPOLOGY = DATA / "fattree.net"  # 2 spines, 4 leaves, 8 HCAs (node05-08 dual-port: rail A on leaf3, B on leaf4)
OPENSM_CONF = DATA / "opensm.conf"


UMAD2SIM = Path("/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so")
TOOL_TIMEOUT_S = 20
SOCKET_SYSCTLS = (
    "net.unix.max_dgram_qlen=4096",
    "net.core.wmem_default=8388608",
    "net.core.wmem_max=8388608",
)


def unavailable(reason: str) -> None:
    if IN_CI:
        pytest.fail(reason)
    pytest.skip(reason)


def wait_for(check: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
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
    opensm_log: Path

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
        wait_for(lambda: expect in self.console_log.read_text()[len(before) :], f"ibsim to answer {command!r}")


@pytest.fixture(scope="module")
def fabric(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fabric]:
    require_tool("ibsim", "opensm", "perfquery", "ibqueryerrors", "iblinkinfo", "ibnetdiscover", "sysctl")
    if not UMAD2SIM.exists():
        unavailable(f"needs {UMAD2SIM} (package libumad2sim0)")
    if subprocess.run(["sysctl", "-qw", *SOCKET_SYSCTLS], capture_output=True, check=False).returncode != 0:
        unavailable("needs root to raise the unix socket limits ibsim and OpenSM need")
    with running_fabric(tmp_path_factory.mktemp("ibfabric")) as started:
        yield started


@contextmanager
def running_fabric(work: Path, opensm_conf: Path = OPENSM_CONF) -> Iterator[Fabric]:
    """ibsim and OpenSM (with `opensm_conf`) in `work` (the socket limits already raised), stopped on leaving."""
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
                    ["ibsim", "-s", str(TOPOLOGY)],
                    stdin=console_in,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    cwd=work,
                    env=env,
                )
            )
        wait_for(lambda: "Network simulator ready" in console_log.read_text(), "ibsim")
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
                    ["opensm", "-F", str(opensm_conf), "-f", str(osm_log)],
                    stdout=osm_out,
                    stderr=subprocess.STDOUT,
                    cwd=work,
                    env=sim_env,
                )
            )
        wait_for(lambda: osm_log.exists() and "SUBNET UP" in osm_log.read_text(), "OpenSM SUBNET UP")
        tool_env = {**env, "LD_PRELOAD": str(UMAD2SIM)}
        yield Fabric(work=work, env=tool_env, console=console, console_log=console_log, opensm_log=osm_log)
    finally:
        for proc in reversed(procs):  # OpenSM first: it exits cleanly on SIGTERM within about a second
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        os.close(console)
