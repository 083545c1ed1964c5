"""The fabric's resources (shaped after UFM's) through the HTTP API of a twin whose fabric watcher polls every 30 s:
subnets, systems, links, ports, alarms, events and telemetry keep their shapes and say what the twin did (a cable
down, symbol errors on another); bad and unknown ports are refused with a fix; and port isolation is guarded like
every change, audited, dry-runs change nothing, and a real one takes the cable down in the next poll."""

from __future__ import annotations

import re
from typing import Any

import pytest

from gpufleet.sim.faults import InjectedFault
from gpufleet.sim.runner import run_headless
from gpufleet.spec.scenario_spec import FaultType
from gpufleet.state import Database
from tests import apiclient
from tests.apiclient import AUTH
from tests.twins import door, small_twin

OPERATOR, OPERATOR_SECRET = "fabric-oncall", "operator-secret-for-the-fabric-test"
VIEWER, VIEWER_SECRET = "fabric-wallboard", "viewer-secret-for-the-fabric-test"
AS_OPERATOR = {"Authorization": f"Bearer {OPERATOR_SECRET}"}
AS_VIEWER = {"Authorization": f"Bearer {VIEWER_SECRET}"}

ERRING = ("leaf-su1-r3/1", "n-000/mlx5_3/1")  # n-000's rail 3: symbol errors from 20 s
DOWN = ("leaf-su1-r5/3", "n-002/mlx5_5/1")  # n-002's rail 5: down from 45 s
POLL_S = 30.0


def _faulty_twin() -> Any:
    # both faults after the first poll (at 0 s), so the first discovery has every cable to compare with
    return small_twin(
        faults=[
            InjectedFault(0, FaultType.ib_symbol_errors, 20.0, node="n-000", rail=3),
            InjectedFault(1, FaultType.link_down, 45.0, node="n-002", rail=5),
        ]
    )


def _plane(tmp: Any, seconds: float) -> tuple[Any, Any, Any]:
    twin = _faulty_twin()
    plane, fleet = door(twin, db=Database(tmp / "state.db"))
    run_headless(twin, fleet, plane.ingest, plane.tick, seconds)  # type: ignore[attr-defined]
    apiclient.grant(plane, OPERATOR_SECRET, role="operator", name=OPERATOR)
    apiclient.grant(plane, VIEWER_SECRET, role="viewer", name=VIEWER)
    return plane, twin, fleet


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Any:
    plane, _, _ = _plane(tmp_path_factory.mktemp("fabric-api"), 200)  # seven polls: 0, 30, ... 180 s
    return plane


@pytest.fixture(scope="module")
def client(plane: Any) -> Any:
    return apiclient.client(plane)


def _cable(rows: list[dict[str, Any]], ends: tuple[str, str]) -> dict[str, Any]:
    (row,) = [r for r in rows if {r["a"], r["b"]} == set(ends)]
    return row


def test_subnets_summarise_each_polled_subnet(client: Any) -> None:
    body = client.get("/api/v1/fabric/subnets").json()
    assert set(body) == {"subnets", "reports", "isolated_ports"}
    assert body["reports"] >= 7 and body["isolated_ports"] == 0
    (subnet,) = body["subnets"]
    assert set(subnet) == {"subnet", "source", "time", "polls", "poll_s", "took_s", "switches", "hcas", "links",
                           "links_down", "findings", "errors", "subnet_manager", "expected", "settings"}  # fmt: skip
    assert subnet["settings"] == []  # the twin's watcher reports no host settings
    assert (subnet["subnet"], subnet["source"], subnet["poll_s"]) == ("default", "twin", POLL_S)
    assert subnet["polls"] >= 7 and subnet["errors"] == []
    # 8 leaves (one a rail) and 4 spines; 3 nodes x 8 HCAs; 24 HCA cables and 64 uplinks, one of them down
    # the 87 cables discovered and the one expected and now missing: 88 links, the count every view of it shows
    assert (subnet["switches"], subnet["hcas"], subnet["links"], subnet["links_down"]) == (12, 24, 88, 1)
    assert set(subnet["findings"]) == {"critical", "warning", "info"}
    assert subnet["findings"]["critical"] >= 1  # the cable that is down
    sm = subnet["subnet_manager"]
    assert set(sm) == {"lid", "guid", "activity", "priority", "state"}
    assert sm["state"] == "SMINFO_MASTER" and re.fullmatch(r"0x[0-9a-f]{16}", sm["guid"]) and sm["activity"] > 0
    assert subnet["expected"] == "first discovery"  # the twin's control plane has no cabling manifest


def test_systems_are_the_switches_and_hcas_discovered(client: Any) -> None:
    rows = client.get("/api/v1/fabric/systems").json()
    keys = {"name", "type", "guid", "lid", "ports", "description", "tier", "host", "subnet"}
    assert rows and all(set(r) == keys for r in rows)
    switches = [r for r in rows if r["type"] == "switch"]
    hcas = [r for r in rows if r["type"] == "hca"]
    assert len(rows) == len(switches) + len(hcas) == 36
    assert sorted(r["name"] for r in switches if r["tier"] == "leaf") == [f"leaf-su1-r{i}" for i in range(8)]
    assert sorted(r["name"] for r in switches if r["tier"] == "spine") == [f"spine-{i}" for i in range(1, 5)]
    assert all(r["lid"] and r["ports"] == 16 and not r["host"] for r in switches)
    assert {r["host"] for r in hcas} == {"n-000", "n-001", "n-002"}
    assert all(r["name"] == f"{r['host']}/{r['description'].split()[1]}" and r["tier"] == "" for r in hcas)
    assert all(re.fullmatch(r"0x[0-9a-f]{16}", r["guid"]) for r in rows)
    assert len({r["guid"] for r in rows}) == len(rows)


def test_topology_is_the_schedulers_view_of_the_polled_fabric(client: Any) -> None:
    body = client.get("/api/v1/fabric/topology").json()
    leaves = {s["name"]: s for s in body["switches"] if s["tier"] == "leaf"}
    assert sorted(leaves) == [f"leaf-su1-r{i}" for i in range(8)]
    hosts = {h["name"]: h for h in body["hosts"]}
    assert set(hosts) == {"n-000", "n-001", "n-002"}
    # n-002's rail 5 went down at 45 s: its home (rail 0's leaf) stays, the leaf of the dead rail is not among its own
    assert all(h["home"] == "leaf-su1-r0" for h in hosts.values())
    assert "leaf-su1-r5" not in hosts["n-002"]["leaves"] and hosts["n-002"]["rails"] == 7
    assert body["labels"]["kept"] is False  # the twin's backend labels no nodes


def test_links_are_every_cable_the_down_one_included(client: Any) -> None:
    rows = client.get("/api/v1/fabric/links").json()
    keys = {"a", "b", "a_node", "b_node", "tiers", "width", "speed", "rate_gbps", "up", "state", "subnet", "worst",
            "error_rate_per_s"}  # fmt: skip
    assert len(rows) == 88 and all(set(r) == keys for r in rows)
    for r in rows:
        assert r["a"].rsplit("/", 1)[0] == r["a_node"] and r["b"].rsplit("/", 1)[0] == r["b_node"]
        assert r["worst"] in ("", "info", "warning", "critical") and r["error_rate_per_s"] >= 0
    assert len({frozenset((r["a"], r["b"])) for r in rows}) == 88  # each cable once
    assert sum(1 for r in rows if r["tiers"] == ["leaf", "spine"] or r["tiers"] == ["spine", "leaf"]) == 64
    up = [r for r in rows if r["up"]]
    assert all((r["width"], r["speed"], r["rate_gbps"], r["state"]) == ("4x", "NDR", 400.0, "Active") for r in up)

    down = _cable(rows, DOWN)
    assert (down["up"], down["state"], down["worst"]) == (False, "Down/Polling", "critical")
    assert sorted(down["tiers"]) == ["", "leaf"]
    erring = _cable(rows, ERRING)
    assert erring["up"] and erring["worst"] in ("warning", "critical")
    assert erring["error_rate_per_s"] > 0  # symbol errors counting, at both ends together
    others = [r for r in rows if frozenset((r["a"], r["b"])) not in (frozenset(DOWN), frozenset(ERRING))]
    assert all(r["up"] and r["worst"] == "" and r["error_rate_per_s"] == 0 for r in others)


def test_ports_with_their_counters_and_the_erring_ones(client: Any) -> None:
    rows = client.get("/api/v1/fabric/ports").json()
    keys = {"name", "ufm_name", "node", "port", "peer", "state", "counters", "rates_per_s", "errors", "subnet"}
    assert len(rows) == 176 and all(set(r) == keys for r in rows)  # both ends of every cable
    by_name = {r["name"]: r for r in rows}
    assert all(re.fullmatch(r"[0-9a-f]{16}_\d+", r["ufm_name"]) for r in rows)
    assert by_name[ERRING[0]]["peer"] == ERRING[1] and by_name[ERRING[1]]["peer"] == ERRING[0]
    assert by_name[DOWN[0]]["peer"] is None and by_name[DOWN[0]]["state"] == "Down/Polling"

    erring = client.get("/api/v1/fabric/ports", params={"errors": "true"}).json()
    assert erring and all(r["errors"] > 0 for r in erring)
    named = {r["name"]: r for r in erring}
    assert set(named) >= {ERRING[1], *DOWN}
    hca = named[ERRING[1]]
    assert hca["counters"]["SymbolErrorCounter"] > 0 and hca["rates_per_s"]["SymbolErrorCounter"] > 0
    assert all(named[end]["counters"]["LinkDownedCounter"] == 1 for end in DOWN)  # counted at both ends


def test_alarms_worst_first_each_naming_its_cable_and_fix(client: Any) -> None:
    rows = client.get("/api/v1/fabric/alarms").json()
    assert rows
    rank = {"critical": 2, "warning": 1, "info": 0}
    assert [rank[r["severity"]] for r in rows] == sorted((rank[r["severity"]] for r in rows), reverse=True)
    for r in rows:
        assert {"kind", "severity", "message", "fix", "subnet"} <= set(r)
        assert r["message"] and r["fix"] and ("ends" in r or "port" in r)
    downs = [r for r in rows if r["kind"] == "link-down"]
    assert downs and all(set(r["ends"]) == set(DOWN) and r["severity"] == "critical" for r in downs)
    assert all(DOWN[0] in r["message"] and DOWN[1] in r["message"] for r in downs)
    about_erring = [r for r in rows if set(r.get("ends", ())) == set(ERRING)]
    assert any(r["kind"] == "symbol-errors" for r in about_erring)


def test_events_newest_first(client: Any) -> None:
    rows = client.get("/api/v1/fabric/events").json()
    assert rows and all(set(r) == {"time", "subnet", "kind", "severity", "message", "ends"} for r in rows)
    times = [r["time"] for r in rows]
    assert times == sorted(times, reverse=True)
    (down,) = [r for r in rows if r["kind"] == "link-down"]
    assert set(down["ends"]) == set(DOWN) and down["severity"] == "critical"
    assert any(r["kind"] == "sm-sweep" and r["time"] > down["time"] for r in rows)  # the SM saw the change
    assert len(client.get("/api/v1/fabric/events", params={"limit": 1}).json()) == 1
    assert client.get("/api/v1/fabric/events", params={"limit": 0}).status_code == 422


def test_telemetry_of_a_port_and_its_peer(client: Any) -> None:
    body = client.get("/api/v1/fabric/telemetry", params={"port": ERRING[1]}).json()
    assert (body["port"], body["peer"]) == (ERRING[1], ERRING[0])
    series = {s["port"]: s["points"] for s in body["series"]}
    assert set(series) == set(ERRING)
    points = series[ERRING[1]]
    assert len(points) >= 5 and all("time" in p and "SymbolErrorCounter" in p for p in points)
    assert [p["time"] for p in points] == sorted(p["time"] for p in points)
    symbols = [p["SymbolErrorCounter"] for p in points]
    assert symbols == sorted(symbols) and symbols[-1] > symbols[0]  # a total that grows
    assert series[ERRING[0]] == []  # the switch's end counted no error: no history kept for it
    # a cable that is down has no peer in the fabric; each end is asked for on its own
    down = client.get("/api/v1/fabric/telemetry", params={"port": DOWN[0]}).json()
    assert down["peer"] is None and [s["port"] for s in down["series"]] == [DOWN[0]]
    assert down["series"][0]["points"][-1]["LinkDownedCounter"] == 1


def test_telemetry_refuses_a_bad_port_and_says_so(client: Any) -> None:
    bad = client.get("/api/v1/fabric/telemetry", params={"port": "leaf1"})
    assert bad.status_code == 422
    assert "'leaf1' is not a port" in bad.json()["error"] and "SWITCH/PORT" in bad.json()["fix"]
    unknown = client.get("/api/v1/fabric/telemetry", params={"port": "leaf-nope/3"})
    assert unknown.status_code == 404
    assert "leaf-nope/3" in unknown.json()["error"] and "/api/v1/fabric/ports" in unknown.json()["fix"]
    assert client.get("/api/v1/fabric/telemetry").status_code == 422  # no port at all


def test_isolation_is_guarded_and_a_dry_run_changes_nothing(plane: Any, client: Any) -> None:
    path = f"/api/v1/fabric/ports/{ERRING[1]}/isolate"
    refused = client.post(path, json={"reason": "symbol errors"})
    assert refused.status_code == 401 and "token" in refused.json()["error"]
    viewer = client.post(path, headers=AS_VIEWER, json={"reason": "symbol errors"})
    assert viewer.status_code == 403 and "operator" in viewer.json()["fix"] + viewer.json()["error"]
    dry = client.post(path, headers=AS_OPERATOR, json={"reason": "symbol errors", "dryRun": True})
    assert dry.status_code == 200, dry.text
    # the HCA's port is isolated at the switch port that faces it
    assert dry.json() == {
        "target": f"port/{ERRING[1]}",
        "action": "isolate",
        "result": f"would isolate-port port/{ERRING[0]}",
        "dry_run": True,
    }
    entry = plane.store.audit_log.entries()[-1]
    assert (entry.actor, entry.action, entry.target, entry.dry_run) == (
        OPERATOR,
        "isolate-port",
        f"port/{ERRING[0]}",
        True,
    )
    assert "symbol errors" in entry.request
    assert client.get("/api/v1/fabric/isolated_ports").json() == []
    assert client.get("/api/v1/fabric/subnets").json()["isolated_ports"] == 0
    # a port the fabric does not have, and one that is not a port
    missing = client.post("/api/v1/fabric/ports/leaf-nope/3/isolate", headers=AS_OPERATOR, json={"dryRun": True})
    assert missing.status_code == 404 and "GET /api/v1/fabric/ports" in missing.json()["fix"]
    bad = client.post("/api/v1/fabric/ports/leaf1/isolate", headers=AS_OPERATOR, json={"dryRun": True})
    assert bad.status_code in (400, 422) and "SWITCH/PORT" in bad.json()["fix"]
    unknown_field = client.post(path, headers=AS_OPERATOR, json={"dryRun": True, "force": True})
    assert unknown_field.status_code == 422 and "force" in unknown_field.json()["error"]


def test_a_real_isolation_takes_the_cable_down_in_the_next_poll(tmp_path: Any) -> None:
    plane, twin, fleet = _plane(tmp_path, 100)
    client = apiclient.client(plane)
    res = client.post(f"/api/v1/fabric/ports/{ERRING[0]}/isolate", headers=AS_OPERATOR, json={"reason": "BER"})
    assert res.status_code == 200, res.text
    assert res.json()["result"] == f"switch port {ERRING[0]} disabled (isolated)" and not res.json()["dry_run"]
    isolated = client.get("/api/v1/fabric/isolated_ports").json()
    assert [p["port"] for p in isolated] == [ERRING[0]] and isolated[0]["since"] == pytest.approx(plane.clock())
    entry = plane.store.audit_log.entries()[-1]
    assert (entry.actor, entry.action, entry.target, entry.dry_run) == (
        OPERATOR,
        "isolate-port",
        f"port/{ERRING[0]}",
        False,
    )

    run_headless(twin, fleet, plane.ingest, plane.tick, POLL_S + 5)  # past the next poll
    client = apiclient.client(plane)  # a new app: no answer cached from before the poll
    cable = _cable(client.get("/api/v1/fabric/links").json(), ERRING)
    assert (cable["up"], cable["state"]) == (False, "Down/Disabled")
    assert client.get("/api/v1/fabric/subnets").json()["subnets"][0]["links_down"] == 2
    ports = {r["name"]: r for r in client.get("/api/v1/fabric/ports").json()}
    assert ports[ERRING[0]]["state"] == "Down/Disabled" and ports[ERRING[1]]["state"] == "Down/Polling"
    events = client.get("/api/v1/fabric/events").json()
    assert any(
        e["kind"] == "link-down" and set(e["ends"]) == set(ERRING) and "Disabled" in e["message"] for e in events
    )

    # restored: the port is out of the list at once, and the cable is back after the next poll
    res = client.post(f"/api/v1/fabric/ports/{ERRING[0]}/restore", headers=AS_OPERATOR, json={"reason": "replaced"})
    assert res.status_code == 200 and res.json()["result"] == f"switch port {ERRING[0]} enabled", res.text
    assert client.get("/api/v1/fabric/isolated_ports").json() == []
    run_headless(twin, fleet, plane.ingest, plane.tick, POLL_S + 5)
    client = apiclient.client(plane)
    cable = _cable(client.get("/api/v1/fabric/links").json(), ERRING)
    assert (cable["up"], cable["state"]) == (True, "Active")
    events = client.get("/api/v1/fabric/events").json()
    assert events[0]["kind"] in ("link-up", "sm-sweep")
    assert any(e["kind"] == "link-up" and set(e["ends"]) == set(ERRING) for e in events)


def test_admin_token_isolates_too(client: Any) -> None:
    res = client.post(f"/api/v1/fabric/ports/{DOWN[0]}/isolate", headers=AUTH, json={"dryRun": True})
    assert res.status_code == 200 and res.json()["result"] == f"would isolate-port port/{DOWN[0]}", res.text


def _discovered(hca_cabled: bool) -> Any:
    """A leaf, a spine and one HCA as `ibnetdiscover` run on that HCA's host finds them: its own HCA first, so the
    HCA's cable is listed HCA end first. With the cable down the HCA is not discovered at all (its only port is
    dark), and the leaf's port is left Down/Polling."""
    from gpufleet.fabric.graph import End, FabricGraph, Link, Node, NodeKind

    graph = FabricGraph(source="ibnetdiscover")
    hca, leaf_port = End("dgx-001/mlx5_0", 1), End("leaf1", 1)
    if hca_cabled:
        graph.add_node(Node(hca.node, NodeKind.hca, "0x" + "3" * 16, 1, None, "dgx-001 mlx5_0", host="dgx-001"))
        graph.add_link(Link(hca, leaf_port, 4, "NDR", True, 5, 1))
    else:
        graph.idle_ports[leaf_port] = "Down/Polling"
    graph.add_node(Node("leaf1", NodeKind.switch, "0x" + "1" * 16, 36, 1, "leaf1", tier="leaf"))
    graph.add_node(Node("spine1", NodeKind.switch, "0x" + "2" * 16, 36, 2, "spine1", tier="spine"))
    graph.add_link(Link(End("leaf1", 20), End("spine1", 1), 4, "NDR", True, 1, 2))
    return graph


def test_a_cable_whose_hca_is_no_longer_discovered_is_listed_down(tmp_path: Any) -> None:
    """A watcher's polls pushed through the ingest door: the first with the HCA's cable, the next without it and
    without the HCA. The cable is still listed, down, and counted down."""
    from gpufleet.fabric.report import report_from_graph
    from gpufleet.model.observe import SCHEMA_VERSION, Batch
    from gpufleet.model.wire import encode

    plane, _ = door(small_twin(), db=Database(tmp_path / "state.db"))
    client = apiclient.client(plane)
    for i, cabled in enumerate((True, False)):
        report = report_from_graph(_discovered(cabled), subnet="lab", time=plane.clock() + i, source="ibnetdiscover")
        batch = Batch(v=SCHEMA_VERSION, agent="ufm-1", incarnation="a", node="ufm-1", sent=plane.clock() + i,
                      fabric=[report])  # fmt: skip
        res = client.post("/api/v1/ingest", headers=AUTH, content=encode(batch))
        assert res.status_code == 200, res.text
    client = apiclient.client(plane)
    rows = client.get("/api/v1/fabric/links").json()
    down = _cable(rows, ("dgx-001/mlx5_0/1", "leaf1/1"))
    assert (down["up"], down["state"]) == (False, "Down/Polling")
    assert client.get("/api/v1/fabric/subnets").json()["subnets"][0]["links_down"] == 1


def test_answers_match_their_published_schemas(client: Any) -> None:
    from pydantic import TypeAdapter

    from gpufleet.server import schemas

    for path, shape in (
        ("/api/v1/fabric/subnets", schemas.FabricSubnets),
        ("/api/v1/fabric/systems", list[schemas.FabricSystem]),
        ("/api/v1/fabric/links", list[schemas.FabricLinkRow]),
        ("/api/v1/fabric/ports", list[schemas.FabricPortRow]),
        ("/api/v1/fabric/alarms", list[schemas.FabricAlarm]),
        ("/api/v1/fabric/events", list[schemas.FabricEventRow]),
        (f"/api/v1/fabric/telemetry?port={ERRING[0]}", schemas.FabricTelemetry),
        ("/api/v1/fabric/isolated_ports", list[schemas.IsolatedPort]),
        ("/api/v1/fabric/topology", schemas.FabricTopology),
    ):
        TypeAdapter(shape).validate_python(client.get(path).json())  # encoded by the cache, so not checked per call
