"""`gpufleet agent --fabric` on a host of a real subnet (ibsim under OpenSM), pushing over HTTP to a `gpufleet
server` started with the intended cabling: the fabric as the API shows it, and a link taken down through the ibsim
console reported by the next polls, each process its own, as operators run them."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.apiclient import free_port
from tests.ibsim import UMAD2SIM, Fabric, fabric  # noqa: F401

pytestmark = pytest.mark.real

MANIFEST = Path(__file__).parents[2] / "src" / "gpufleet" / "examples" / "clusters" / "ibsim-fattree.yaml"


def _start(args: list[str], env: dict[str, str], cwd: Path, name: str) -> subprocess.Popen[bytes]:
    with (cwd / f"{name}.log").open("ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "gpufleet.cli.main", *args], env=env, cwd=cwd, stdout=log, stderr=log
        )


@pytest.fixture
def served(fabric: Fabric, tmp_path: Path) -> Iterator[tuple[httpx.Client, Callable[[], str]]]:  # noqa: F811
    home = tmp_path / "home"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("GPUFLEET_TOKEN", "GPUFLEET_SERVER", "LD_PRELOAD")}
    env.update(GPUFLEET_HOME=str(home), PYTHONUNBUFFERED="1")
    server = _start(["server", "--port", str(port), "--fabric-expect", str(MANIFEST)], env, tmp_path, "server")
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10.0)
    procs = [server]

    def logs() -> str:
        found = [*tmp_path.glob("*.log"), *fabric.work.glob("agent.log")]
        return "\n".join(f"--- {p.name}\n" + p.read_text()[-3000:] for p in found)

    try:
        _wait(lambda: client.get("/healthz").json()["status"] == "ok", "the server", logs)
        # the tools reach the simulated fabric through umad2sim, which writes its tree into the working folder
        agent_env = {**env, "LD_PRELOAD": str(UMAD2SIM), "IBSIM_SOCKNAME": fabric.env["IBSIM_SOCKNAME"]}
        agent = [
            "agent", "--node", "sm-host", "--control-plane", f"http://127.0.0.1:{port}", "--port", "0",
            "--data-dir", str(tmp_path / "agent"), "--kmsg-file", str(tmp_path / "kern.log"),
            "--ib-sysfs", str(tmp_path / "no-sysfs"), "--fabric", "--fabric-poll", "2s", "--tool-timeout", "20s",
        ]  # fmt: skip
        (tmp_path / "kern.log").touch()
        procs.append(_start(agent, agent_env, fabric.work, "agent"))
        yield client, logs
    finally:
        for proc in reversed(procs):
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
        client.close()


def _wait(check: Callable[[], Any], what: str, logs: Callable[[], str], within_s: float = 60.0) -> Any:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            found = check()
        except (httpx.HTTPError, KeyError, ValueError):
            found = None
        if found:
            return found
        time.sleep(0.25)
    pytest.fail(f"timed out waiting for {what}\n{logs()}")


def test_the_fabric_agent_reports_through_the_one_door(
    fabric: Fabric,  # noqa: F811
    served: tuple[httpx.Client, Callable[[], str]],
) -> None:
    client, logs = served

    def polled(at_least: int) -> dict[str, Any] | None:
        subnets = client.get("/api/v1/fabric/subnets").json()["subnets"]
        return subnets[0] if subnets and subnets[0]["polls"] >= at_least else None

    subnet = _wait(lambda: polled(1), "the first fabric poll", logs)
    assert (subnet["source"], subnet["switches"], subnet["hcas"], subnet["links"]) == ("live", 6, 8, 20)
    assert subnet["expected"] == "manifest" and subnet["subnet_manager"]["state"] == "SMINFO_MASTER"
    assert client.get("/api/v1/fabric/alarms").json() == []  # cabled as the manifest says

    fabric.sim('Unlink "leaf3"[36]', "")

    def down() -> list[dict[str, Any]]:
        alarms = client.get("/api/v1/fabric/alarms").json()
        return [a for a in alarms if a["kind"] == "link-down"]

    [alarm] = _wait(down, "the link-down alarm", logs, within_s=30.0)
    assert set(alarm["ends"]) == {"leaf3/36", "spine2/3"}
    links = client.get("/api/v1/fabric/links").json()
    [cable] = [row for row in links if {row["a"], row["b"]} == {"leaf3/36", "spine2/3"}]
    assert not cable["up"] and cable["worst"] == "critical"
    incidents = client.get("/api/v1/incidents").json()
    assert any(i["cause"] == "ib-link-down" for i in incidents), incidents
