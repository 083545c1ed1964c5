"""A real single-host Slurm cluster for tests: scripts/start-slurm.sh in a temporary directory, on free ports,
started once per test process and stopped (by pid file) when the process exits.

    from tests.slurm_cluster import slurm_cluster  # noqa: F401  (the session fixture)

    @pytest.mark.real
    def test_x(slurm_cluster: SlurmCluster) -> None: ...

A test that needs its own configuration (a Prolog, say) starts a cluster of its own beside the shared one:
`SlurmCluster(root, nodes=2, extra_conf="Prolog=...")`, then start() and, at the end, stop().
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpufleet.integrations.slurm.client import SlurmRunner
from tests.conftest import IN_CI, REPO_ROOT, require_tool

NODES = 4


def _free_port_block(size: int) -> int:
    """A base port with `size` free ports above it."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + size + 1 > 65000:
            continue
        ok = True
        for p in range(base, base + size + 1):
            with socket.socket() as t:
                try:
                    t.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise RuntimeError("no free port block")


def require_slurm() -> None:
    """Skip (fail under CI) where the test cluster cannot run: no Slurm, or not root."""
    require_tool("slurmctld", "slurmd", "scontrol", "sbatch", "munge")
    if os.geteuid() != 0:
        (pytest.fail if IN_CI else pytest.skip)(
            "the test Slurm cluster runs its daemons as root (SlurmUser=root, mknod)"
        )


class SlurmCluster:
    def __init__(self, root: Path, nodes: int = NODES, extra_conf: str = "") -> None:
        """`extra_conf`: slurm.conf lines appended to the rendered file (start-slurm.sh's SLURM_EXTRA_CONF)."""
        self.root = root
        self.conf = str(root / "etc" / "slurm.conf")
        self.runner = SlurmRunner(self.conf)
        self.node_count = nodes
        self.extra_conf = extra_conf
        self.nodes = [f"gpu-{i:02d}" for i in range(1, nodes + 1)]
        self.jobs_dir = root / "jobs"
        self.jobs_dir.mkdir(parents=True, exist_ok=True)
        self.base_port: int | None = None

    def pids(self) -> dict[str, int]:
        files = [self.root / "state" / "slurmctld.pid", *sorted((self.root / "spool").glob("slurmd-*.pid"))]
        return {f.stem: int(f.read_text()) for f in files}

    def start(self) -> None:
        """Run scripts/start-slurm.sh (again: it leaves running daemons alone)."""
        if self.base_port is None:
            self.base_port = _free_port_block(self.node_count + 1)
        base = self.base_port
        env = dict(
            os.environ,
            SLURM_NODES=str(self.node_count),
            SLURM_CTLD_PORT=str(base),
            SLURM_PORT_BASE=str(base),
            SLURM_EXTRA_CONF=self.extra_conf,  # set even when empty: a cluster never takes one from the environment
        )
        proc = subprocess.run(
            [str(REPO_ROOT / "scripts" / "start-slurm.sh"), str(self.root)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"start-slurm.sh failed: {proc.stderr[-2000:]}")

    def stop(self) -> None:
        subprocess.run([str(REPO_ROOT / "scripts" / "stop-slurm.sh"), str(self.root)], timeout=60, check=False)

    def scontrol(self, *args: str) -> str:
        return self.runner.run(["scontrol", *args])

    def reset_nodes(self) -> None:
        """Cancel every job and resume every node, so tests do not see each other's leftovers."""
        self.runner.run(["scancel", "--full", "-u", "root"])
        self.wait_for(lambda: not self.runner.squeue(), "jobs to finish")
        for node in self.runner.nodes():
            # RESUME is valid only for a node taken out (down, drained, failed); one whose slurmd is still
            # registering or rebooting (UNKNOWN, NOT_RESPONDING) comes back by itself
            if node.state.base == "DOWN" or node.state.flags & {"DRAIN", "FAIL"}:
                self.scontrol("update", f"NodeName={node.name}", "State=RESUME")

        def out() -> dict[str, str]:
            return {n.name: str(n.state) for n in self.runner.nodes() if not n.state.available}

        self.wait_for(lambda: not out(), "nodes to be idle", detail=out)

    def wait_for(
        self, check: Callable[[], bool], what: str, timeout_s: float = 60.0, detail: Callable[[], object] | None = None
    ) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if check():
                return
            time.sleep(0.25)
        raise AssertionError(f"timed out waiting for {what}" + (f": {detail()}" if detail else ""))


_CLUSTER: SlurmCluster | None = None


def get_cluster() -> SlurmCluster:
    """The process's one cluster: several test modules share it."""
    global _CLUSTER
    if _CLUSTER is None:
        root = Path(tempfile.mkdtemp(prefix="gpufleet-slurm-"))
        cluster = SlurmCluster(root)
        cluster.start()
        _CLUSTER = cluster

        def _stop() -> None:
            cluster.stop()
            shutil.rmtree(root, ignore_errors=True)

        atexit.register(_stop)
    return _CLUSTER


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    require_slurm()
    cluster = get_cluster()
    cluster.reset_nodes()
    yield cluster
