"""A `gpufleet server` process, started with the ibsim fat tree's manifest as the intended cabling, fed the fabric
watcher's polls over HTTP as an agent pushes them (msgpack batches of FabricReports made from the ibsim capture):
GET /api/v1/fabric/topology is the capture's topology, `gpufleet fabric export --server` writes the capture's own
topology.conf, and a leaf that fails moves its hosts to the leaf of their other port, told once in the fabric's
events and written from then on."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpufleet.fabric.discover import from_ibnetdiscover
from gpufleet.fabric.graph import FabricGraph
from gpufleet.fabric.report import report_from_graph
from gpufleet.model.observe import SCHEMA_VERSION, Batch
from gpufleet.model.wire import MSGPACK, encode
from gpufleet.parsers.infiniband.diags import parse_ibnetdiscover
from tests.apiclient import free_port
from tests.clirun import gpufleet
from tests.conftest import CAPTURES

NETDISCOVER = CAPTURES / "ibsim" / "ibnetdiscover.txt"
MANIFEST = Path(__file__).parents[2] / "src" / "gpufleet" / "examples" / "clusters" / "ibsim-fattree.yaml"
FAILED = "leaf3"  # node05-node08's home: the leaf of their first port (their second is on leaf4)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[httpx.Client, str]]:
    """The server, and a client with the admin token it wrote on its first start (as its host's agent uses it)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("GPUFLEET_TOKEN", "GPUFLEET_SERVER")}
    env.update(GPUFLEET_HOME=str(tmp_path / "home"), PYTHONUNBUFFERED="1")
    log = (tmp_path / "server.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpufleet.cli.main", "server", "--port", str(port), "--fabric-expect", str(MANIFEST)],
        env=env, cwd=tmp_path, stdout=log, stderr=log,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    client = httpx.Client(base_url=url, timeout=10.0)
    try:
        deadline = time.monotonic() + 60.0
        while True:
            try:
                if client.get("/healthz").json()["status"] == "ok" and (tmp_path / "home" / "token").exists():
                    break
            except (httpx.HTTPError, KeyError, ValueError):
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                pytest.fail(f"the server did not start:\n{(tmp_path / 'server.log').read_text()[-3000:]}")
            time.sleep(0.25)
        client.headers["Authorization"] = f"Bearer {(tmp_path / 'home' / 'token').read_text().strip()}"
        yield client, url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
        client.close()
        log.close()


def _capture() -> FabricGraph:
    return from_ibnetdiscover(parse_ibnetdiscover(NETDISCOVER.read_text()))


def _without(graph: FabricGraph, switch: str) -> FabricGraph:
    """The fabric as discovered once `switch` failed: it, its cables and the HCAs only it reached are gone."""
    kept = [link for link in graph.links if switch not in (link.a.node, link.b.node)]
    reached = {end.node for link in kept for end in link.ends()}
    out = FabricGraph(source=graph.source)
    for node in graph.nodes.values():
        if node.name != switch and (node.is_switch or node.name in reached):
            out.add_node(node)
    for link in kept:
        out.add_link(link)
    return out


def _push(client: httpx.Client, graph: FabricGraph, at: float, seq: int) -> None:
    report = report_from_graph(graph, subnet="mlx5_0/1", time=at)
    batch = Batch(v=SCHEMA_VERSION, agent="sm-host", incarnation="watch-1", node="sm-host", sent=time.time(),
                  fabric=[report])  # fmt: skip
    answer = client.post("/api/v1/ingest", content=encode(batch, MSGPACK), headers={"Content-Type": MSGPACK})
    assert answer.status_code == 200, answer.text


def _fresh(client: httpx.Client, path: str, ready: Any) -> Any:
    """The answer once it shows the last push: reads are served from a cache that is rebuilt within seconds."""
    deadline = time.monotonic() + 15.0
    while True:
        body = client.get(path).json()
        if ready(body) or time.monotonic() > deadline:
            return body
        time.sleep(0.2)


def _body(text: str) -> list[str]:
    """An export without its comments (they name where the fabric came from)."""
    return [line for line in text.splitlines() if not line.lstrip().startswith("#")]


def _switch_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("SwitchName=")]


def test_a_served_control_plane_keeps_the_topology_of_the_polls_it_is_pushed(
    server: tuple[httpx.Client, str], tmp_path: Path
) -> None:
    client, url = server
    assert client.get("/api/v1/fabric/topology").status_code == 404  # before any poll, with the reason and a fix
    graph = _capture()
    now = time.time()
    _push(client, graph, now, 1)
    body = client.get("/api/v1/fabric/topology").json()
    assert {h["name"]: h["home"] for h in body["hosts"]} == {
        **{f"node0{i}": "leaf1" for i in (1, 2)},
        **{f"node0{i}": "leaf2" for i in (3, 4)},
        **{f"node0{i}": "leaf3" for i in (5, 6, 7, 8)},
    }
    assert body["labels"]["kept"] is False  # no backend that labels nodes
    env = {"GPUFLEET_HOME": str(tmp_path / "home")}  # the CLI on the server's host: its token
    served = gpufleet("fabric", "export", "--format", "slurm-topology", "--server", url, env=env)
    assert served.returncode == 0, served.stderr
    local = gpufleet("fabric", "export", "--format", "slurm-topology", "--ibnetdiscover", str(NETDISCOVER))
    assert _switch_lines(served.stdout) == _switch_lines(local.stdout)

    for fmt in ("labels", "kueue", "volcano", "kai"):  # every export format, from what the server keeps
        served = gpufleet("fabric", "export", "--format", fmt, "--server", url, env=env)
        local = gpufleet("fabric", "export", "--format", fmt, "--ibnetdiscover", str(NETDISCOVER))
        assert served.returncode == local.returncode == 0, (fmt, served.stderr, local.stderr)
        assert _body(served.stdout) and _body(served.stdout) == _body(local.stdout), fmt

    _push(client, graph, now + 30, 2)  # the same fabric again: no topology event
    _push(client, _without(graph, FAILED), now + 60, 3)
    _push(client, _without(graph, FAILED), now + 90, 4)
    events = _fresh(client, "/api/v1/fabric/events", lambda b: any(e["kind"] == "switch-gone" for e in b))
    topology = [e for e in events if e["kind"].startswith(("host-", "switch-"))]
    assert sorted((e["kind"], e["ends"][0]) for e in topology) == sorted(
        [("host-moved", f"node0{i}") for i in (5, 6, 7, 8)] + [("switch-gone", FAILED)]
    )
    assert all("home leaf is now leaf4 (was leaf3)" in e["message"] for e in topology if e["kind"] == "host-moved")
    body = _fresh(client, "/api/v1/fabric/topology", lambda b: FAILED not in {s["name"] for s in b["switches"]})
    assert {h["name"]: h["home"] for h in body["hosts"] if h["home"] == "leaf4"}.keys() == {
        f"node0{i}" for i in (5, 6, 7, 8)
    }
    after = gpufleet("fabric", "export", "--format", "slurm-topology", "--server", url, env=env)
    assert after.returncode == 0, after.stderr
    assert "leaf3" not in after.stdout and "SwitchName=leaf4 Nodes=node[05-08]" in _switch_lines(after.stdout)
    stored: Any = client.get("/api/v1/events", params={"limit": 200}).json()
    assert {e["entity"] for e in stored if "home leaf is now" in e["message"]} == {
        f"node/node0{i}" for i in (5, 6, 7, 8)
    }
