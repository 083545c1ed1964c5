"""`gpufleet up` as its pieces: the twin behind the door, a restart that keeps operational state and never replays
events, remediation acting in the running loop, and readers that never wait for the twin."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from gpufleet.cli.server import Mode, twin_plane
from gpufleet.sim import runner as runner_module
from tests import apiclient
from tests.clirun import gpufleet
from tests.twins import su_scenario


@pytest.fixture
def scenario(tmp_path: Path) -> Path:
    return su_scenario(
        tmp_path / "restart.yaml",
        [
            "{at: 20s, type: xid, node: dgx-002, gpu: 3, code: 31}",
            "{at: 40s, type: ecc-dbe, node: dgx-004, gpu: 1}",
            "{at: 70s, type: gpu-off-bus, node: dgx-009, gpu: 6}",
            "{at: 80s, type: link-down, node: dgx-025, rail: 6}",
        ],
    )


def _steps(running: Any, n: int) -> None:
    for _ in range(n):
        running.loop.step_once()


def _events(running: Any) -> list[tuple[str, str, int, str]]:
    rows = running.plane.db.query("SELECT agent, incarnation, seq, kind FROM events WHERE seq > 0")
    return [tuple(r) for r in rows]


@pytest.mark.parametrize("snapshots", [False, True], ids=["replayed-from-start", "from-a-snapshot"])
def test_a_restart_keeps_cordons_incidents_and_streams_and_replays_nothing(
    scenario: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, snapshots: bool
) -> None:
    """The restarted twin is brought back either from its start or from its last snapshot (taken every 40 s here):
    either way it goes on exactly as a run that never stopped."""
    monkeypatch.setattr(runner_module, "SNAPSHOT_EVERY_S", 40.0 if snapshots else 1e12)
    monkeypatch.setattr(runner_module, "SNAPSHOT_MIN_WALL_S", 0.0)
    whole_home, split_home = tmp_path / "whole", tmp_path / "split"
    whole = twin_plane(whole_home, scenario, Mode.dry_run, 1.0)
    _steps(whole, 120)
    whole.plane.node_action("tester", "cordon", "dgx-020")
    _steps(whole, 60)

    first = twin_plane(split_home, scenario, Mode.dry_run, 1.0)
    _steps(first, 120)
    first.plane.node_action("tester", "cordon", "dgx-020")
    _steps(first, 30)
    before = {i.id: (i.cause, str(i.entity)) for i in first.plane.book.incidents.values()}
    first.plane.close()
    first.plane.db.close()  # the process goes away

    again = twin_plane(split_home, scenario, Mode.dry_run, 1.0)
    twin = again.loop.twin
    # the last snapshot was at 120 s, just before the cordon: the cordon and 30 s are replayed from it
    assert twin.time == (120.0 if snapshots else 0.0)  # the API serves the stored state while the twin comes back
    assert len(again.plane.book.incidents) == len(before)
    again.loop.finish_restore()
    assert twin.time == 150.0  # back where it stopped, not at the scenario's start
    assert twin.cluster.node("dgx-020").unschedulable  # the cordon was replayed
    assert "dgx-020" in again.plane.backend.unavailable()
    assert {i.id: (i.cause, str(i.entity)) for i in again.plane.book.incidents.values()} == before
    _steps(again, 30)

    events = _events(again)
    assert len(events) == len(set(events))  # no (agent, incarnation, seq) twice
    # the same kernel reports as a run that never stopped: none lost, none replayed
    kinds = Counter(kind for *_, kind in events)
    whole_kinds = Counter(kind for *_, kind in _events(whole))
    assert kinds["kmsg"] == whole_kinds["kmsg"] > 0
    ids = sorted(again.plane.book.incidents)
    assert ids == sorted(set(ids)) and ids == sorted(whole.plane.book.incidents)
    # the detectors' latched state came back with the twin: the ECC count reported before is not reported again
    counts = {i.id: (i.cause.value, str(i.entity), i.count) for i in again.plane.book.incidents.values()}
    assert counts == {i.id: (i.cause.value, str(i.entity), i.count) for i in whole.plane.book.incidents.values()}
    assert "ecc-dbe" in {cause for cause, _, _ in counts.values()}
    assert {i.cause.value for i in again.plane.book.incidents.values()} >= {"gpu-xid", "gpu-lost", "ib-link-down"}


def test_remediation_acts_in_the_running_loop_and_survives_a_restart(scenario: Path, tmp_path: Path) -> None:
    home = tmp_path / "on"
    running = twin_plane(home, scenario, Mode.on, 1.0)
    _steps(running, 100)
    plane = running.plane
    assert plane.remediation.errors == 0 and plane.loop_error is None
    lost = next(i for i in plane.book.incidents.values() if i.cause.value == "gpu-lost")
    done = [e for e in plane.store.audit_log.entries(incident=lost.id) if e.decision == "done"]
    assert [e.action for e in done][:2] == ["drain", "reboot-node"]
    assert running.loop.twin.cluster.node("dgx-009").unschedulable
    plane.close()
    plane.db.close()
    again = twin_plane(home, scenario, Mode.on, 1.0)
    again.loop.finish_restore()
    assert again.loop.twin.cluster.node("dgx-009").unschedulable  # the drain, replayed into the rebuilt twin
    _steps(again, 5)
    redone = [e for e in again.plane.store.audit_log.entries(incident=lost.id) if e.decision == "done"]
    assert len(redone) == len(done)  # finished steps never run twice


def test_readers_never_wait_for_the_twin(scenario: Path, tmp_path: Path) -> None:
    running = twin_plane(tmp_path / "r", scenario, Mode.dry_run, 1.0)
    _steps(running, 30)
    client = apiclient.client(running.plane, running.checks[:0], secret="t")
    answered: dict[str, int] = {}
    with running.loop.lock:  # the twin is busy stepping: its lock is held
        reader = threading.Thread(
            target=lambda: answered.update(
                {path: client.get(path).status_code for path in ("/healthz", "/api/v1/nodes", "/api/v1/summary")}
            )
        )
        reader.start()
        reader.join(timeout=30)
        assert not reader.is_alive(), "an API read waited for the twin's lock"
    assert answered == {"/healthz": 200, "/api/v1/nodes": 200, "/api/v1/summary": 200}


def test_serve_shows_the_port_it_bound_and_names_a_busy_port(
    scenario: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    from gpufleet.cli.server import serve
    from gpufleet.errors import UserError

    monkeypatch.setenv("GPUFLEET_HOME", str(tmp_path / "home"))
    shown: list[int] = []
    serve(twin_plane(tmp_path / "a", scenario, Mode.off, 1.0), "127.0.0.1", 0, "1s", lambda p: shown.append(p) or "")
    assert len(shown) == 1 and shown[0] > 0  # --port 0: the banner names the port the system picked

    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        with pytest.raises(UserError, match=f"cannot listen on 127.0.0.1:{port}") as caught:
            serve(twin_plane(tmp_path / "b", scenario, Mode.off, 1.0), "127.0.0.1", port, "1s", lambda p: "")
    assert caught.value.fix and "--port" in caught.value.fix


def test_up_with_a_policy_acts_through_the_twins_agents(scenario: Path, tmp_path: Path) -> None:
    """`gpufleet up --policy` with node actions routed to the agents: the twin's nodes reset their GPU and run the
    diagnostics themselves, as real nodes' agents would, and the ECC incident is resolved by the proof."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "apiVersion: gpufleet.io/v1\nkind: RemediationPolicy\nmetadata: {name: agents}\n"
        "spec: {nodeActions: {route: agent}}\n"
    )
    running = twin_plane(tmp_path / "agents", scenario, Mode.on, 1.0, policy=policy)
    _steps(running, 150)
    plane = running.plane
    assert plane.remediation.errors == 0 and plane.loop_error is None
    dbe = next(i for i in plane.store.incidents.list(limit=100) if i["cause"] == "ecc-dbe")
    rows = {r.action.kind.value: r.state for r in plane.node_actions.table.listed(incident=dbe["id"])}
    assert rows == {"reset-gpu": "done", "diag": "passed"}, rows
    assert dbe["state"] == "resolved"


def test_the_server_keeps_the_scheduler_topology_it_is_asked_to(tmp_path: Path) -> None:
    from gpufleet.cli.server import BackendName, real_plane
    from gpufleet.control.scheduler_topology import SlurmTopologyKeeper, TopologyOutputs

    path = tmp_path / "topology.conf"
    outputs = TopologyOutputs(slurm_conf=path, slurm_format="block")
    running = real_plane(tmp_path, BackendName.slurm, Mode.on, None, outputs=outputs)
    [keeper] = running.plane.topology_keepers
    assert isinstance(keeper, SlurmTopologyKeeper) and (keeper.path, keeper.style, keeper.mode) == (path, "block", "on")
    assert running.plane.fabric.topology.labels_of is not None  # hosts' places settle though no label is written


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--volcano-hypernodes"], "--volcano-hypernodes needs the kubernetes backend (this is none)"),
        (["--backend", "slurm", "--slurm-topology-conf", "/no/such/dir/topology.conf"], "no folder /no/such/dir"),
        (["--backend", "slurm", "--slurm-topology-format", "block"], "add --slurm-topology-conf PATH"),
    ],
)
def test_a_scheduler_topology_the_backend_cannot_keep_is_one_error_with_the_fix(
    args: list[str], message: str, tmp_path: Path
) -> None:
    ran = gpufleet("server", *args, "--run-for", "1s", env={"GPUFLEET_HOME": str(tmp_path)})
    assert ran.returncode != 0 and message in ran.stderr and "Traceback" not in ran.stderr
