"""The fabric page's topology in a real headless Chromium (tests/browser.py), over a served twin whose fabric
watcher polled seven times: a cable of n-002 went down and n-000's rail 3 counts symbol errors. The drawing must
hold every switch, HCA and cable the API lists, the down cable red and dashed, the erring one amber or orange;
hovering names a cable's ends, clicking it puts it in the address and draws both ends' counters over time; the
alarms list the cable that is down by both its ends and the events its going down. Screenshots are kept as
artifacts (in $GPUFLEET_ARTIFACTS when set, else the test's tmp_path)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpufleet.sim.faults import InjectedFault
from gpufleet.sim.runner import run_headless
from gpufleet.spec.scenario_spec import FaultType
from gpufleet.state import Database
from tests import apiclient
from tests.browser import LOCAL, Chromium, artifacts, no_page_errors, shot, started
from tests.twins import door, small_twin

pytestmark = pytest.mark.real

ERRING = ("leaf-su1-r3/1", "n-000/mlx5_3/1")
DOWN = ("leaf-su1-r5/3", "n-002/mlx5_5/1")
RED = "rgb(248, 81, 73)"
WARNING_COLOURS = {"rgb(210, 153, 34)", "rgb(240, 136, 62)"}  # amber, orange


class Served:
    def __init__(self, url: str) -> None:
        self.url = url

    def api(self, path: str) -> Any:
        with LOCAL.open(self.url + path.lstrip("/"), timeout=10) as resp:
            return json.load(resp)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """Three nodes for 200 s of cluster time: symbol errors on n-000's rail 3 from 20 s, n-002's rail 5 down at 45 s
    (after the first poll, so the first discovery holds the cable the later polls miss)."""
    twin = small_twin(
        faults=[
            InjectedFault(0, FaultType.ib_symbol_errors, 20.0, node="n-000", rail=3),
            InjectedFault(1, FaultType.link_down, 45.0, node="n-002", rail=5),
        ]
    )
    plane, fleet = door(twin, db=Database(tmp_path_factory.mktemp("state") / "state.db"))
    run_headless(twin, fleet, plane.ingest, plane.tick, 200)  # type: ignore[attr-defined]
    with apiclient.serving(apiclient.app(plane)) as url:
        yield Served(f"{url}/")


@pytest.fixture(scope="module")
def browser(served: Served, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chromium]:
    yield from started(tmp_path_factory.mktemp("chromium-profile"))


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    return artifacts(tmp_path)


def _open(browser: Chromium, served: Served, route: str) -> None:
    """Load the page anew at `route` (a new document: after a full-page screenshot Chromium can hit-test clicks on
    the old one wrongly) and wait until it has drawn."""
    browser.navigate("about:blank")
    browser.navigate(served.url + route)
    browser.wait_for(
        "(() => { const v = document.querySelector('#view'); return v && v.dataset.ready === '1' && "
        f"v.dataset.route === {json.dumps(route)}; }})()",
        what=f"{route} to be drawn",
    )


def _key(cable: dict[str, Any]) -> str:
    return f"{cable['a']}|{cable['b']}"


def _find(cables: list[dict[str, Any]], ends: tuple[str, str]) -> dict[str, Any]:
    (cable,) = [c for c in cables if {c["a"], c["b"]} == set(ends)]
    return cable


def _line(key: str) -> str:
    return f"#topology line[data-cable={json.dumps(key)}]"


def _style(browser: Chromium, selector: str) -> dict[str, Any]:
    return dict(
        browser.evaluate(
            f"""(() => {{ const e = document.querySelector({json.dumps(selector)}); const s = getComputedStyle(e);
            return {{cls: e.getAttribute('class'), stroke: s.stroke, dash: s.strokeDasharray,
                     width: parseFloat(s.strokeWidth)}}; }})()"""
        )
    )


def _series(browser: Chromium, card: str) -> list[dict[str, Any]]:
    """The series a chart drew: its label and how many points (the M and L commands of its path)."""
    return list(
        browser.evaluate(
            f"""[...document.querySelectorAll({json.dumps(card + " path.series")})].map(p => ({{
              label: p.dataset.label, points: (p.getAttribute('d').match(/[ML]/g) || []).length}}))"""
        )
    )


def _one_count_of_switches_and_links(browser: Chromium, served: Served) -> None:
    """The watcher found 12 switches (leaves and spines) and 88 cables (one of them down and missing from the polls):
    the title, the tiles, the subnet's line and the drawing all say so; the nodes' agents' 24 HCA ports on their 8
    leaf switches are named as HCA ports, never as the fabric's links or switches. (Checked on the page the topology
    test loaded.)"""
    counts = served.api("api/v1/fabric")["counts"]
    (subnet,) = served.api("api/v1/fabric/subnets")["subnets"]
    assert counts == {"source": "fabric watcher", "switches": 12, "links": 88, "links_down": 1, "hca_ports": 24}
    assert (subnet["switches"], subnet["links"], subnet["links_down"]) == (12, 88, 1)
    assert len(served.api("api/v1/fabric/links")) == 88 and len(served.api("api/v1/fabric")["switches"]) == 8
    shown = browser.evaluate(
        """(() => { const t = (s) => document.querySelector(s).innerText;
        return {sub: t('#fabric-sub'), switches: t('[data-kpi=switches] .v'), links: t('[data-kpi=links] .v'),
                down: t('[data-kpi=links-down] .v'), ports: t('[data-kpi=hca-ports] .v'),
                subnet: t('#fabric-subnets [data-subnet=default]'), note: t('#topology-note'),
                cables: document.querySelector('#topology-svg').dataset.cables,
                cards: [...document.querySelectorAll('#switches .switch .s')].map(e => e.innerText)}; })()"""
    )
    assert "12 switches" in shown["sub"] and "88 links" in shown["sub"] and "24 HCA ports" in shown["sub"]
    assert "fabric watcher" in shown["sub"]
    assert (shown["switches"], shown["links"], shown["down"], shown["ports"]) == ("12", "88", "1", "24")
    assert "12 switches" in shown["subnet"] and "88 links" in shown["subnet"]
    assert "88 cables" in shown["note"] and shown["cables"] == "88"
    assert len(shown["cards"]) == 8 and all("HCA port" in c and " links" not in c for c in shown["cards"])


def test_the_topology_draws_every_switch_hca_and_cable(browser: Chromium, served: Served, shots: Path) -> None:
    systems = served.api("api/v1/fabric/systems")
    cables = served.api("api/v1/fabric/links")
    _open(browser, served, "#/fabric")
    browser.wait_for("document.querySelector('#topology svg')", what="the topology")
    drawn = browser.evaluate(
        """(() => { const n = (s) => document.querySelectorAll('#topology ' + s).length;
        return {leaves: n('g.sw[data-tier=leaf]'), spines: n('g.sw[data-tier=spine]'),
                core: n('g.sw[data-tier=core]'), hcas: n('g.hca'), units: n('g.unit'),
                cables: [...document.querySelectorAll('#topology line[data-cable]')].map(l => l.dataset.cable)}; })()"""
    )
    tiers = [s["tier"] for s in systems if s["type"] == "switch"]
    assert (
        (drawn["leaves"], drawn["spines"], drawn["core"]) == (tiers.count("leaf"), tiers.count("spine"), 0) == (8, 4, 0)
    )
    assert drawn["hcas"] == sum(1 for s in systems if s["type"] == "hca") == 24
    assert drawn["units"] == 1  # the 8 leaves of one scalable unit
    assert sorted(drawn["cables"]) == sorted(_key(c) for c in cables) and len(cables) == 88  # every cable, once
    names = browser.evaluate("[...document.querySelectorAll('#topology g.sw')].map(g => g.dataset.node)")
    assert sorted(names) == sorted(s["name"] for s in systems if s["type"] == "switch")

    # the down cable red and dashed, ringed by its critical alarm; the erring one amber or orange; the rest green
    down, erring = _find(cables, DOWN), _find(cables, ERRING)
    style = _style(browser, _line(_key(down)))
    assert "st-down" in style["cls"].split() and style["stroke"] == RED and style["dash"] not in ("none", "")
    assert browser.evaluate(f"document.querySelector({json.dumps(_line(_key(down)))}).dataset.state") == "Down/Polling"
    style = _style(browser, _line(_key(erring)))
    assert {"st-err1", "st-err2"} & set(style["cls"].split()) and style["stroke"] in WARNING_COLOURS, style
    assert style["dash"] in ("none", "")
    if erring["worst"] == "critical":
        assert "crit" in style["cls"].split()
    classes = browser.evaluate("[...document.querySelectorAll('#topology line[data-cable]')].map(l => l.dataset.class)")
    assert sorted(classes).count("clean") == 86
    assert browser.evaluate("document.querySelectorAll('#topology line.halo').length") >= 1
    # the leaves with a bad cable say so
    assert "bad" in browser.evaluate(
        "document.querySelector('#topology g.sw[data-node=\"leaf-su1-r5\"]').className.baseVal"
    )
    legend = browser.evaluate("document.querySelector('#topology-legend').innerText")
    assert "down" in legend and "no errors" in legend and "critical" in legend

    # hovering a cable names its ends, width and speed, state and error rate
    browser.hover(_line(_key(erring)))
    tip = browser.wait_for(
        "(() => { const t = document.querySelector('#topology-tip'); "
        "return t.style.display === 'block' && t.innerText; })()",
        what="the cable's tooltip",
    )
    assert ERRING[0] in tip and ERRING[1] in tip and "4x NDR" in tip and "Active" in tip and "errors/" in tip
    browser.hover(_line(_key(down)))
    browser.wait_for(f"document.querySelector('#topology-tip').innerText.includes({json.dumps(DOWN[1])})")
    assert "Down/Polling" in browser.evaluate("document.querySelector('#topology-tip').innerText")

    # the subnet in a line: what it holds, its subnet manager and how fresh its last poll is
    line = browser.evaluate("document.querySelector('#fabric-subnets [data-subnet=\"default\"]').innerText")
    for part in ("12 switches", "24 HCAs", "88 links", "1 down", "master", "last poll", "ago"):
        assert part in line, (part, line)
    _one_count_of_switches_and_links(browser, served)
    shot(browser, shots, "fabric-topology")
    no_page_errors(browser)


def test_clicking_a_cable_shows_both_ends_counters(browser: Chromium, served: Served, shots: Path) -> None:
    cables = served.api("api/v1/fabric/links")
    erring = _find(cables, ERRING)
    _open(browser, served, "#/fabric")
    browser.wait_for(f"document.querySelector({json.dumps(_line(_key(erring)))})", what="the erring cable")
    browser.click(_line(_key(erring)))
    browser.wait_for("location.hash.includes('cable=')", what="the cable in the address")
    assert "cable=leaf-su1-r3%2F1" in browser.evaluate("location.hash")  # named by the switch's end, as the tools do
    browser.wait_for(
        "document.querySelectorAll('#cable-SymbolErrorCounter path.series').length === 2", what="its counters"
    )
    assert browser.evaluate("document.querySelector('#cable').dataset.cable") == _key(erring)
    assert browser.evaluate(f"document.querySelector({json.dumps(_line(_key(erring)))}).classList.contains('sel')")
    series = _series(browser, "#cable-SymbolErrorCounter")
    labels = [s["label"] for s in series]
    assert any(label.startswith(ERRING[0]) for label in labels) and any(label.startswith(ERRING[1]) for label in labels)
    assert all(s["points"] >= 5 for s in series), series  # a point per poll since the errors began
    # the HCA's counter grows; the switch's end was never listed by the error query, so it is drawn at zero
    history = served.api(f"api/v1/fabric/telemetry?port={ERRING[1]}")
    hca = next(s for s in history["series"] if s["port"] == ERRING[1])
    assert hca["points"][-1]["SymbolErrorCounter"] > hca["points"][0]["SymbolErrorCounter"]
    assert "no errors" in next(label for label in labels if label.startswith(ERRING[0]))
    for card in ("#cable-LinkDownedCounter", "#cable-PortRcvErrors"):
        assert len(_series(browser, card)) == 2, card
    detail = browser.evaluate("document.querySelector('#cable').innerText")
    assert ERRING[0] in detail and ERRING[1] in detail and "4x NDR" in detail and "errors/" in detail
    alarms = browser.evaluate("[...document.querySelectorAll('#cable-alarms tr[data-kind]')].map(r => r.dataset.kind)")
    assert "symbol-errors" in alarms
    shot(browser, shots, "fabric-cable")
    no_page_errors(browser)


def test_a_link_to_the_down_cable(browser: Chromium, served: Served, shots: Path) -> None:
    """Its other end is no longer in the fabric (asked for on its own), and both ends counted the link going."""
    _open(browser, served, f"#/fabric?cable={DOWN[1]}")
    browser.wait_for("document.querySelectorAll('#cable-LinkDownedCounter path.series').length === 2", what="both ends")
    series = _series(browser, "#cable-LinkDownedCounter")
    assert sorted(s["label"] for s in series) == sorted(DOWN) and all(s["points"] >= 3 for s in series), series
    assert "Down/Polling" in browser.evaluate("document.querySelector('#cable').innerText")
    assert browser.evaluate("document.querySelector('#cable-alarms tr[data-kind=\"link-down\"]') !== null")
    chosen = browser.evaluate(
        "(() => { const l = document.querySelector('#topology line.cable.sel'); return [l.dataset.a, l.dataset.b]; })()"
    )
    assert set(chosen) == set(DOWN)
    # closing it takes it out of the address
    browser.click("#cable [data-close=cable]")
    browser.wait_for("!location.hash.includes('cable=') && document.querySelector('#cable').hidden", what="closed")
    assert browser.evaluate("document.querySelectorAll('#topology line.cable.sel').length") == 0
    no_page_errors(browser)


def test_alarms_and_events_name_the_cable_that_went_down(browser: Chromium, served: Served, shots: Path) -> None:
    _open(browser, served, "#/fabric")
    browser.wait_for("document.querySelector('#fabric-alarms tr[data-kind]')", what="the alarms")
    rows = browser.evaluate(
        """[...document.querySelectorAll('#fabric-alarms tr[data-kind]')].map(r => ({severity: r.dataset.severity,
          kind: r.dataset.kind, text: r.innerText}))"""
    )
    rank = {"critical": 2, "warning": 1, "info": 0}
    assert [rank[r["severity"]] for r in rows] == sorted((rank[r["severity"]] for r in rows), reverse=True)
    downs = [r for r in rows if r["kind"] == "link-down"]
    assert downs and all(DOWN[0] in r["text"] and DOWN[1] in r["text"] for r in downs)
    assert any(r["kind"] == "symbol-errors" and ERRING[1] in r["text"] for r in rows)
    assert "critical" in browser.evaluate("document.querySelector('#fabric-alarm-count').innerText")

    events = browser.evaluate(
        """[...document.querySelectorAll('#fabric-events tr[data-kind]')].map(r => ({kind: r.dataset.kind,
          time: +r.dataset.time, text: r.innerText}))"""
    )
    assert [e["time"] for e in events] == sorted((e["time"] for e in events), reverse=True)  # newest first
    (down,) = [e for e in events if e["kind"] == "link-down"]
    assert DOWN[0] in down["text"] and DOWN[1] in down["text"]
    # an alarm's end is a link to its cable
    browser.click(f'#fabric-alarms tr[data-kind="link-down"] a[data-end="{DOWN[1]}"]')
    browser.wait_for("document.querySelectorAll('#cable-LinkDownedCounter path.series').length === 2", what="the cable")
    shot(browser, shots, "fabric-alarms")
    no_page_errors(browser)


def test_hcas_counted_per_leaf(browser: Chromium, served: Served, shots: Path) -> None:
    """Large fabrics draw each leaf's HCAs as one box; asked for here on the small one."""
    _open(browser, served, "#/fabric")
    browser.click('#topology-mode button[data-hcas="leaf"]')
    browser.wait_for("document.querySelectorAll('#topology g.hcas').length === 8", what="a box per leaf")
    assert "hcas=leaf" in browser.evaluate("location.hash")
    assert browser.evaluate("document.querySelectorAll('#topology g.hca').length") == 0
    groups = browser.evaluate(
        """Object.fromEntries([...document.querySelectorAll('#topology line.agg')].map(l => [l.dataset.leaf,
          [l.dataset.cables, [...l.classList].find(c => c.startsWith('st-'))]]))"""
    )
    assert sorted(groups) == [f"leaf-su1-r{i}" for i in range(8)] and {n for n, _ in groups.values()} == {"3"}
    assert groups.pop("leaf-su1-r5")[1] == "st-down" and groups.pop("leaf-su1-r3")[1] in ("st-err1", "st-err2")
    assert {state for _, state in groups.values()} == {"st-clean"}
    # the switch-to-switch cables are still each drawn
    assert browser.evaluate("document.querySelectorAll('#topology line[data-cable]').length") == 64
    browser.click('#topology g.hcas[data-group="leaf-su1-r5"]')
    browser.wait_for(f"location.hash.includes({json.dumps('cable=leaf-su1-r5%2F3')})", what="the worst of them chosen")
    browser.click('#topology-mode button[data-hcas="auto"]')
    browser.wait_for("document.querySelectorAll('#topology g.hca').length === 24", what="each HCA again")
    shot(browser, shots, "fabric-per-leaf")
    no_page_errors(browser)


def test_pages_left_behind_let_go_of_their_streams(browser: Chromium, served: Served) -> None:
    """A page left for another (here through about:blank, which keeps it in the back-forward cache) closes its live
    stream: the browser opens only six connections to one host, and streams held by pages out of sight left the
    seventh page's reads waiting for ever (the page said "Loading fabric…" and never drew)."""
    for _ in range(8):
        _open(browser, served, "#/fabric")
        assert browser.evaluate("document.querySelector('#page-state').dataset.state") == "ready"
