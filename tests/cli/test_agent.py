"""`gpufleet agent --workload`: documented in --help, refused without a control plane to report to or on the twin,
and a workload manager that cannot be read is said once while the agent goes on reporting its node."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from gpufleet.control.service import ControlPlane
from gpufleet.remediate.backends.observe import ObserveOnlyBackend
from gpufleet.state import Database
from tests import apiclient
from tests.clirun import gpufleet


def test_the_option_is_documented() -> None:
    out = gpufleet("agent", "--help", env={"COLUMNS": "200"}).stdout
    assert "--workload" in out and "slurm" in out and "kubernetes" in out and "Kueue" in out


def test_without_a_control_plane_or_on_the_twin_it_is_refused() -> None:
    alone = gpufleet("agent", "--workload", "slurm")
    assert alone.returncode == 2 and "fix: add --control-plane URL" in alone.stderr
    twin = gpufleet("agent", "--sim", "--workload", "kubernetes", "--control-plane", "http://127.0.0.1:9")
    assert twin.returncode == 2 and "the twin reports its own workload manager" in twin.stderr
    bad = gpufleet("agent", "--workload", "lsf", "--control-plane", "http://127.0.0.1:9")
    assert bad.returncode == 2 and "lsf" in bad.stderr


def test_an_unreadable_slurm_is_said_once_and_the_agent_keeps_reporting(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    plane = ControlPlane(Database(tmp_path / "cp.db"), ObserveOnlyBackend(lambda: []))
    kern = tmp_path / "kern.log"
    kern.write_text("")
    env = {"GPUFLEET_TOKEN": apiclient.TOKEN, "GPUFLEET_HOME": str(tmp_path)}
    with apiclient.serving(apiclient.app(plane)) as url, caplog.at_level(logging.INFO, logger="gpufleet.agent"):
        ran = gpufleet(
            "agent", "--workload", "slurm", "--slurm-conf", str(tmp_path / "missing.conf"), "--control-plane", url,
            "--node", "login-1", "--port", "0", "--interval", "0.5s", "--run-for", "3s", "--kmsg-file", str(kern),
            "--ib-sysfs", str(tmp_path / "no-ib"), "--data-dir", str(tmp_path / "agent"),
            env=env,
        )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert "watching slurm" in ran.stdout
    failed = [r.getMessage() for r in caplog.records if "queue failed" in r.getMessage()]
    said = f"reading slurm's queue failed (retrying every 15s): no Slurm configuration at {tmp_path}/missing.conf"
    assert failed == [said]
    assert "login-1" in plane.fleet.nodes and plane.fleet.scheduler == {}  # the node reported, the queue did not
