"""The dashboard in a real headless Chromium, driven through the DevTools protocol (tests/browser.py): every page
must fetch the API and draw (charts counted by their SVG paths, not just present in the HTML), the heat map must
mark the lost GPU, an incident is acknowledged by clicking with an operator token typed into the page and checked
through the API, and a refusal shows the API's own error text. Screenshots of each page are kept as artifacts
(in $GPUFLEET_ARTIFACTS when set, else the test's tmp_path). One served twin and one browser for the module."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gpufleet.sim.faults import InjectedFault
from gpufleet.sim.runner import run_headless
from gpufleet.sim.scenario import carve_mig
from gpufleet.spec.scenario_spec import FaultType, MigSpec
from gpufleet.state import Database
from tests import apiclient
from tests.browser import LOCAL, Chromium, artifacts, no_page_errors, shot, started
from tests.twins import door, small_twin

pytestmark = pytest.mark.real

OPERATOR = "night-shift"  # the operator token's name, as the audit log must show it
OPERATOR_SECRET = "op-secret-for-the-browser-test"
VIEWER = "wallboard"
VIEWER_SECRET = "viewer-secret-for-the-browser-test"


@dataclass
class Served:
    url: str
    incidents: dict[str, str]  # cause -> incident id
    app: Any = None

    def api(self, path: str) -> Any:
        with LOCAL.open(self.url + path.lstrip("/"), timeout=10) as resp:
            return json.load(resp)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """Three nodes, 15 minutes of cluster time: a hot GPU and a power brake on n-000, a GPU off the bus on n-001
    (the job on n-000 and n-001 stalls), symbol errors on n-000's rail 3 and a link down on n-002's rail 5."""
    twin = small_twin(
        faults=[
            InjectedFault(0, FaultType.thermal_runaway, 60.0, node="n-000", gpu=2),
            InjectedFault(1, FaultType.ib_symbol_errors, 30.0, node="n-000", rail=3),
            InjectedFault(2, FaultType.power_brake, 200.0, node="n-000", gpu=6, duration=240.0),
            InjectedFault(3, FaultType.link_down, 400.0, node="n-002", rail=5),
            InjectedFault(4, FaultType.gpu_off_bus, 420.0, node="n-001", gpu=5),
        ],
        service_node="n-002",
    )
    # n-002's last two GPUs in MIG mode: one carved whole, one with half its memory slices free
    carve_mig(
        twin.cluster,
        [
            MigSpec(nodes=["n-002"], gpus=[7], devices={"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}),
            MigSpec(nodes=["n-002"], gpus=[6], devices={"4g.40gb": 1}),
        ],
        "browser test",
    )
    plane, fleet = door(twin, remediation="dry-run", db=Database(tmp_path_factory.mktemp("state") / "state.db"))
    run_headless(twin, fleet, plane.ingest, plane.tick, 900)  # type: ignore[attr-defined]
    app = apiclient.app(plane, secret="admin-secret-for-the-browser-test")
    apiclient.grant(plane, OPERATOR_SECRET, role="operator", name=OPERATOR)
    incidents = {r["cause"]: r["id"] for r in plane.incidents()}  # type: ignore[attr-defined]
    apiclient.grant(plane, VIEWER_SECRET, role="viewer", name=VIEWER)
    with apiclient.serving(app) as url:
        yield Served(f"{url}/", incidents, app)


@pytest.fixture(scope="module")
def browser(served: Served, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chromium]:
    yield from started(tmp_path_factory.mktemp("chromium-profile"))


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    return artifacts(tmp_path)


def _push(served: Served, batch: Any) -> None:
    """Push an agent's batch to the control plane's ingest, as an agent does (the admin token may push for any node)."""
    import urllib.request

    from gpufleet.model.wire import encode

    push = urllib.request.Request(
        f"{served.url}api/v1/ingest",
        data=encode(batch),
        method="POST",
        headers={"Authorization": "Bearer admin-secret-for-the-browser-test", "Content-Type": "application/json"},
    )
    with LOCAL.open(push, timeout=10) as resp:
        assert resp.status == 200


def _open(browser: Chromium, served: Served, route: str) -> None:
    """Go to a page and wait until it has drawn: the app marks #view with the route it shows and data-ready once
    the page's first load is done."""
    browser.navigate(served.url + route)
    _drawn(browser, route)


def _drawn(browser: Chromium, route: str) -> None:
    browser.wait_for(
        "(() => { const v = document.querySelector('#view'); return !window.__stale && v && "
        f"v.dataset.ready === '1' && v.dataset.route === {json.dumps(route)}; }})()",
        what=f"{route} to be drawn",
    )


def _fresh(browser: Chromium, served: Served, route: str) -> None:
    """Open `route` in a page loaded anew with no token stored."""
    _open(browser, served, route)
    browser.evaluate("localStorage.clear(); window.__stale = true")
    browser.send("Page.reload")
    _drawn(browser, route)


def _points(browser: Chromium, card: str) -> int:
    """How many points the chart in `card` drew: the M and L commands of its series paths, plus lone dots."""
    return int(
        browser.evaluate(
            f"""(() => {{ const c = document.querySelector({json.dumps(card)}); if (!c) return -1;
            const paths = [...c.querySelectorAll('path.series')];
            return paths.reduce((n, p) => n + (p.getAttribute('d').match(/[ML]/g) || []).length, 0)
              + c.querySelectorAll('circle.dot').length; }})()"""
        )
    )


def test_overview_draws_kpis_heat_map_and_history(browser: Chromium, served: Served, shots: Path) -> None:
    _open(browser, served, "#/")
    browser.wait_for("document.querySelectorAll('.hcell').length === 24", what="24 GPU cells")
    for card in ("#chart-util", "#chart-temp", "#chart-power"):
        browser.wait_for(f"document.querySelector('{card} path.series')", what=f"{card} drawn")
        assert _points(browser, card) >= 10, card  # one point a minute over 15 minutes
    # three charts, three units: percent, degrees and kilowatts never share an axis
    units = browser.evaluate("[...document.querySelectorAll('.chart-card')].map(c => c.dataset.unit)")
    assert units == ["%", "°C", "kW"]
    first = browser.evaluate("window.__gpufleetFirstChart")
    assert isinstance(first, int | float)  # recorded by the page; reported, never judged
    print(f"time to first drawn chart: {first:.0f} ms after navigation start")

    kpis = browser.evaluate("document.querySelector('#kpis').innerText")
    assert "24" in kpis and "1 / " in kpis  # 24 GPUs, one of them lost
    lost = browser.evaluate(
        """(() => { const c = document.querySelector('.hcell[data-node="n-001"][data-gpu="5"]');
        return {state: c.dataset.state, cls: c.className, href: c.getAttribute('href'), title: c.title}; })()"""
    )
    assert lost["state"] == "lost" and "lost" in lost["cls"].split()
    assert lost["href"] == "#/gpu/n-001/5" and "lost" in lost["title"]
    others = browser.evaluate("[...document.querySelectorAll('.hcell')].filter(c => c.dataset.state === 'lost').length")
    assert others == 1
    assert browser.evaluate("document.querySelector('.hrow[data-node=\"n-001\"] a.name').getAttribute('href')") == (
        "#/node/n-001"
    )
    # the hot GPU is marked throttled and drawn hotter than its neighbours in the temperature view
    browser.click('#modes button[data-mode="temp"]')
    browser.wait_for("document.querySelector('#modes button.on').dataset.mode === 'temp'")
    assert "°C" in browser.evaluate("document.querySelector('#heat-legend').innerText")
    hot = browser.evaluate('document.querySelector(\'.hcell[data-node="n-000"][data-gpu="2"]\').title')
    assert "throttled" in hot and "°C" in hot
    for mode, unit in (("power", "W"), ("mem", "GiB")):
        browser.click(f'#modes button[data-mode="{mode}"]')
        browser.wait_for(f"document.querySelector('#heat-legend').innerText.includes(' {unit}')", what=f"{mode} map")
        painted = browser.evaluate("[...document.querySelectorAll('.hcell[data-state=ok]')].length")
        assert painted >= 20, mode  # values came from /api/v1/gpus and were coloured
    browser.click('#modes button[data-mode="util"]')
    browser.wait_for("document.querySelector('#events').innerText.includes('fallen off the bus')", what="the event log")
    incidents = browser.evaluate("document.querySelector('#incidents').innerText")
    assert "gpu-lost" in incidents and "gpu/n-001/5" in incidents
    shot(browser, shots, "overview")
    no_page_errors(browser)


def test_node_page(browser: Chromium, served: Served, shots: Path) -> None:
    _open(browser, served, "#/node/n-001")
    browser.wait_for("document.querySelector('#node-util path.series')", what="node history")
    for card in ("#node-util", "#node-temp", "#node-power"):
        assert _points(browser, card) >= 20, card  # every 5 s of cluster time, 30 s steps
    links = browser.evaluate("[...document.querySelectorAll('#gpus a')].map(a => a.getAttribute('href'))")
    assert links == [f"#/gpu/n-001/{i}" for i in range(8)]
    assert browser.evaluate("document.querySelector('#gpus tr[data-gpu=\"5\"] .pill').textContent") == "lost"
    assert browser.evaluate("document.querySelectorAll('#nics tbody tr').length") == 8
    # the affinity its agent reported: the twin's DGX H100 layout, each GPU's own NIC behind its switch
    rows = browser.evaluate("[...document.querySelectorAll('#affinity tbody tr')].map(r => r.innerText.split('\\t'))")
    assert [(r[0], r[1], r[4]) for r in rows] == [(str(g), str(g // 4), "PIX") for g in range(8)]
    assert "fallen off the bus" in browser.evaluate("document.querySelector('#kmsg').innerText")
    assert "gpu-lost" in browser.evaluate("document.querySelector('#incidents').innerText")
    assert "Ready" in browser.evaluate("document.querySelector('#conditions').innerText")
    shot(browser, shots, "node")
    # a node the control plane does not know: the API's own words, and an empty page rather than empty tables
    _open(browser, served, "#/node/nope")
    browser.wait_for("document.querySelector('[data-empty=not-found]')", what="the not-found state")
    shown = browser.evaluate("document.querySelector('#banners').innerText")
    assert "404" in shown and "no node 'nope'" in shown and "gpufleet get nodes" in shown
    no_page_errors(browser)


def test_gpu_page_timelines_and_clock_events(browser: Chromium, served: Served, shots: Path) -> None:
    _open(browser, served, "#/gpu/n-000/2")
    cards = ("#gpu-temp", "#gpu-power", "#gpu-clock", "#gpu-util", "#gpu-fb", "#gpu-ecc", "#gpu-pcie")
    browser.wait_for("document.querySelector('#gpu-clock path.series')", what="the SM clock timeline")
    for card in cards:
        assert _points(browser, card) >= 20, card  # a point every 30 s over 15 minutes
    # the thermal slowdown is on the time axis: lanes per clock-event reason and a shaded band
    lanes = browser.evaluate(
        "[...new Set([...document.querySelectorAll('#gpu-clock rect.lane')].map(r => r.dataset.lane))]"
    )
    assert "hw_thermal" in lanes or "sw_thermal" in lanes, lanes
    assert browser.evaluate("document.querySelectorAll('#gpu-clock rect.band').length") >= 1
    assert browser.evaluate("document.querySelectorAll('#gpu-temp line.marker').length") >= 1  # the incident
    # the crosshair reads values off the chart, with their unit
    browser.hover("#gpu-temp svg")
    tip = browser.wait_for(
        "(() => { const t = document.querySelector('#gpu-temp .tip'); "
        "return t && t.style.display === 'block' && t.innerText; })()",
        what="the tooltip",
    )
    assert "°C" in tip and "Z" in tip
    gpu = next(g for g in served.api("api/v1/gpus?node=n-000") if g["gpu"] == 2)
    inventory = browser.evaluate("document.querySelector('#inventory').innerText")
    for field in ("uuid", "serial", "pci_bus_id", "model"):
        assert gpu[field] in inventory, field
    shot(browser, shots, "gpu")
    no_page_errors(browser)


def test_gpu_page_draws_the_mig_layout(browser: Chromium, served: Served, shots: Path) -> None:
    _open(browser, served, "#/gpu/n-002/7")
    browser.wait_for("document.querySelector('#mig svg.mig-bar')", what="the MIG layout")
    blocks = browser.evaluate(
        """[...document.querySelectorAll('#mig .mig-block')].map(b => ({
          profile: b.dataset.profile, start: +b.dataset.start, size: +b.dataset.size, gi: +b.dataset.gi,
          label: b.querySelector('text').textContent, title: b.querySelector('title').textContent,
          x: +b.querySelector('rect').getAttribute('x'), w: +b.querySelector('rect').getAttribute('width')}))"""
    )
    assert [(b["profile"], b["start"], b["size"]) for b in blocks] == [
        ("1g.10gb", 0, 1),
        ("1g.10gb", 1, 1),
        ("2g.20gb", 2, 2),
        ("3g.40gb", 4, 4),
    ]
    assert all(b["label"] == b["profile"] and f"GI {b['gi']}" in b["title"] and "MIG-" in b["title"] for b in blocks)
    # drawn where they sit: one slice is an eighth of the bar, a block spans its slices
    slice_w = blocks[0]["w"] + 2
    assert [round((b["x"] - 1) / slice_w, 2) for b in blocks] == [0.0, 1.0, 2.0, 4.0]  # a 1-unit gap each side
    assert [round((b["w"] + 2) / slice_w, 2) for b in blocks] == [1.0, 1.0, 2.0, 4.0]
    assert browser.evaluate("document.querySelector('#mig svg').dataset.slices") == "8"
    assert browser.evaluate("document.querySelectorAll('#mig .mig-free').length") == 0
    assert browser.evaluate("document.querySelectorAll('#mig-instances tbody tr').length") == 4
    assert "power limit" in browser.evaluate("document.querySelector('#inventory').innerText")
    shot(browser, shots, "gpu-mig")
    # half carved: the free slices are drawn and marked free
    _open(browser, served, "#/gpu/n-002/6")
    browser.wait_for("document.querySelector('#mig svg.mig-bar')", what="the half-carved layout")
    assert browser.evaluate("[...document.querySelectorAll('#mig .mig-block')].map(b => b.dataset.profile)") == [
        "4g.40gb"
    ]
    free = browser.evaluate("[...document.querySelectorAll('#mig .mig-free')].map(r => +r.dataset.slice)")
    assert free == [4, 5, 6, 7]
    assert browser.evaluate("document.querySelectorAll('#mig .mig-free-label').length") == 4
    shot(browser, shots, "gpu-mig-free")
    # a GPU with MIG off says so, and has no bar
    _open(browser, served, "#/gpu/n-002/5")
    browser.wait_for("document.querySelector('#mig [data-mig]')", what="the MIG state")
    assert browser.evaluate("document.querySelector('#mig').innerText.trim()") == "MIG off"
    assert browser.evaluate("document.querySelector('#mig svg')") is None
    # the node page: a compact layout per GPU
    _open(browser, served, "#/node/n-002")
    cells = browser.evaluate(
        """[...document.querySelectorAll('#gpus tbody tr')].map(r => {
          const c = r.querySelector('td.mig');
          return [c.querySelectorAll('.mig-block').length, c.innerText.trim()]; })"""
    )
    assert cells[7][0] == 4 and cells[6][0] == 1
    assert [c[1] for c in cells[:6]] == ["MIG off"] * 6
    shot(browser, shots, "node-mig")
    no_page_errors(browser)


def test_fabric_page_and_a_links_counters(browser: Chromium, served: Served, shots: Path) -> None:
    _open(browser, served, "#/fabric")
    assert browser.evaluate("document.querySelectorAll('#matrix button.link').length") == 24
    erring = browser.evaluate("document.querySelector('button[data-link=\"n-000/mlx5_3/1\"]').dataset.errors")
    assert int(erring) > 0
    down = browser.evaluate("document.querySelector('button[data-link=\"n-002/mlx5_5/1\"]').className").split()
    assert "Down" in down and "sev-critical" in down  # drawn down, ringed by its critical incident
    assert "leaf-su1-r3" in browser.evaluate("document.querySelector('#switches').innerText")
    browser.click('button[data-link="n-000/mlx5_3/1"]')
    browser.wait_for("location.hash.includes('link=n-000')", what="the link to be selected")
    browser.wait_for("document.querySelector('#port-symbol_errors path.series')", what="the link's counters")
    for counter in ("symbol_errors", "link_downed", "rcv_errors", "xmit_discards"):
        assert _points(browser, f"#port-{counter}") >= 10, counter
    assert "INC-" in browser.evaluate("document.querySelector('#side').innerText")  # its open incident
    shot(browser, shots, "fabric")
    no_page_errors(browser)


def test_incident_list_filters(browser: Chromium, served: Served, shots: Path) -> None:
    _open(browser, served, "#/incidents?severity=critical")
    browser.wait_for("document.querySelector('#incident-table')", what="the incident table")
    severities = browser.evaluate(
        "[...document.querySelectorAll('#incident-table tbody tr td:first-child .pill')].map(p => p.textContent)"
    )
    assert severities and set(severities) == {"critical"}
    assert served.incidents["gpu-lost"] in browser.evaluate("document.querySelector('#list').innerText")
    browser.evaluate(
        "(() => { const s = document.querySelector('select[data-filter=cause]'); s.value = 'ib-symbol-errors';"
        " s.dispatchEvent(new Event('change', {bubbles: true})); })()"
    )
    browser.wait_for("location.hash.includes('cause=ib-symbol-errors')", what="the cause filter in the address")
    browser.evaluate(
        "(() => { const s = document.querySelector('select[data-filter=severity]'); s.value = '';"
        " s.dispatchEvent(new Event('change', {bubbles: true})); })()"
    )
    browser.wait_for(
        "document.querySelectorAll('#incident-table tbody tr').length === 1 && "
        "document.querySelector('#incident-table tbody tr').innerText.includes('ib-symbol-errors')",
        what="one ib-symbol-errors incident",
    )
    shot(browser, shots, "incidents")
    no_page_errors(browser)


def test_a_change_without_a_token_shows_the_apis_refusal(browser: Chromium, served: Served, shots: Path) -> None:
    ident = served.incidents["ib-symbol-errors"]
    _fresh(browser, served, f"#/incident/{ident}")
    browser.wait_for("document.querySelector('#acting').innerText.includes('No token')", what="the no-token hint")
    browser.click('#buttons button[data-verb="acknowledge"]')
    browser.wait_for("document.querySelector('[data-outcome=refused]')", what="the refusal")
    shown = browser.evaluate("document.querySelector('#result').innerText")
    assert "this call needs a token" in shown and "Authorization: Bearer" in shown  # the API's error and fix
    assert "this call needs a token" in browser.evaluate("document.querySelector('#banners').innerText")
    assert served.api(f"api/v1/incidents/{ident}")["state"] == "open"
    shot(browser, shots, "incident-refused")
    no_page_errors(browser)


def test_an_incident_shows_its_action_in_words(browser: Chromium, served: Served) -> None:
    ident = served.incidents["gpu-lost"]
    _fresh(browser, served, f"#/incident/{ident}")
    browser.wait_for("document.querySelector('#action')", what="the recommended action")
    shown = browser.evaluate("document.querySelector('#action').innerText")
    row = served.api(f"api/v1/incidents/{ident}")
    assert row["action_title"] in shown and "NVIDIA RESTART_BM, Xid 79" in shown
    steps = browser.evaluate("[...document.querySelectorAll('#action ol.steps li')].map(li => li.textContent)")
    assert steps == row["action_steps"] and len(steps) >= 3
    no_page_errors(browser)


def test_acknowledge_an_incident_with_an_operator_token(browser: Chromium, served: Served, shots: Path) -> None:
    ident = served.incidents["gpu-lost"]
    _fresh(browser, served, f"#/incident/{ident}")
    browser.wait_for("document.querySelector('#trail')", what="the audit trail")
    assert browser.evaluate("document.querySelector('#view').dataset.state") == "open"
    # paste the token into the page, as a person would
    browser.click("#who")
    browser.type_text("#token-input", OPERATOR_SECRET)
    browser.click("#token-save")
    browser.wait_for(f"document.querySelector('#who').innerText.includes('{OPERATOR}')", what="who we act as")
    assert "operator" in browser.evaluate("document.querySelector('#who').innerText")
    browser.wait_for(f"document.querySelector('#acting').innerText.includes('{OPERATOR}')")
    browser.type_text("#note", "looking at it from the browser test")
    browser.click('#buttons button[data-verb="acknowledge"]')
    browser.wait_for("document.querySelector('[data-outcome]')", what="the outcome")
    assert browser.evaluate("document.querySelector('[data-outcome]').dataset.outcome") == "done", browser.evaluate(
        "document.querySelector('#result').innerText"
    )
    browser.wait_for(f"document.querySelector('#trail tr[data-actor=\"{OPERATOR}\"]')", what="our audit entry")
    # the API agrees: the incident moved on, and the audit names the token's owner
    detail = served.api(f"api/v1/incidents/{ident}")
    assert detail["state"] == "acknowledged"
    mine = [a for a in detail["actions"] if a["action"] == "acknowledged"]
    assert mine and mine[-1]["actor"] == OPERATOR and mine[-1]["decision"] == "acknowledged"
    assert "looking at it from the browser test" in mine[-1]["request"]
    assert browser.evaluate("document.querySelector('#buttons button[data-verb=acknowledge]').disabled") is True
    shot(browser, shots, "incident")
    no_page_errors(browser)


def test_jobs_page(browser: Chromium, served: Served, shots: Path) -> None:
    _open(browser, served, "#/jobs")
    row = browser.wait_for("document.querySelector('#jobs-table tr[data-job=\"job\"]')?.innerText", what="the job")
    assert "Stalled" in row
    assert browser.evaluate(
        'document.querySelector(\'#jobs-table tr[data-job="job"] a[href^="#/incident/"]\') !== null'
    )
    assert browser.evaluate("document.querySelector('#jobs-kpis').innerText").count("1") >= 1
    # the inference service: its percentiles drawn as ticks against the objective, and its p99 history
    service = browser.wait_for(
        "document.querySelector('#services-table tr[data-service=\"chat\"]')?.innerText", what="the service"
    )
    assert "Serving" in service and "p99 < 500 ms" in service
    ticks = browser.evaluate(
        "[...document.querySelectorAll('#services-table .latency-bar line.q')].map(l => l.dataset.q)"
    )
    assert ticks == ["p50", "p95", "p99"]
    assert browser.evaluate("document.querySelectorAll('#services-table .latency-bar line.slo').length") == 1
    browser.wait_for("document.querySelector('#svc-p99 path.series')", what="the p99 history drawn")
    assert _points(browser, "#svc-p99") >= 5
    shot(browser, shots, "jobs")
    no_page_errors(browser)


def test_a_viewer_on_another_host_follows_the_fleet_live(browser: Chromium, served: Served, shots: Path) -> None:
    """From another host reads need a token, and EventSource cannot send one: with a viewer token pasted, the page
    reads and follows the stream with it (live, not polling)."""
    address = apiclient.outside_address()
    if address is None:
        pytest.skip("this machine has no address but loopback, so no browser can be on another host")
    with apiclient.serving(served.app, host=address) as url:
        browser.navigate(f"{url}/#/")
        browser.evaluate("localStorage.clear()")
        browser.send("Page.reload")
        browser.wait_for("document.querySelector('.banner')?.innerText.includes('token')", what="the refusal")
        assert browser.evaluate("document.querySelector('#live').textContent") != "live"  # refused without one
        browser.click("#who")
        browser.type_text("#token-input", VIEWER_SECRET)
        browser.click("#token-save")
        browser.wait_for(f"document.querySelector('#who').innerText.includes('{VIEWER}')", what="who we are")
        browser.wait_for("document.querySelector('#live').textContent === 'live'", what="the stream, with the token")
        browser.send("Page.reload")  # and straight to live on the next visit, the token remembered
        _drawn(browser, "#/")
        browser.wait_for("document.querySelectorAll('.hcell').length === 24", what="the heat map, read with the token")
        browser.wait_for("document.querySelector('#live').textContent === 'live'", what="live again")
        shot(browser, shots, "remote-viewer")
        browser.evaluate("localStorage.clear()")
    browser.errors[:] = [e for e in browser.errors if "401" not in e]  # the refusals before the token, on purpose
    no_page_errors(browser)


def test_scheduler_page_draws_quota_bars_and_pending_work(browser: Chromium, served: Served, shots: Path) -> None:
    """A Slurm watcher's report pushed through the door: a partition over its quota with work waiting, drawn as a
    bar, and the pending jobs longest-waiting first with Slurm's reason; the twin's own report has nothing pending."""

    from gpufleet.model.observe import SCHEMA_VERSION, Batch, PendingWork, QueueUse, SchedulerReport

    now = served.api("api/v1/summary")["time"]
    report = SchedulerReport(
        manager="slurm",
        time=now - 4,
        pending=[
            PendingWork(name="17 eval", queue="gpu", gpus=2, since=now - 120, reason="Priority", message="behind 16"),
            PendingWork(
                name="16 pretrain-70b",
                queue="gpu",
                namespace="research",
                gpus=16,
                since=now - 7300,
                reason="Resources",
                message="waiting for resources (partition gpu: 40 of 32 GPUs allocated; it asks for 16)",
            ),
        ],
        queues=[
            QueueUse(name="gpu", gpus_used=40, gpus_pending=18, quota=32, borrowing_limit=16, pending=2, running=5)
        ],
    )
    batch = Batch(v=SCHEMA_VERSION, agent="login-1", incarnation="b", node="login-1", sent=now, scheduler=report)
    _push(served, batch)

    _open(browser, served, "#/scheduler")
    rows = browser.wait_for(
        "[...document.querySelectorAll('.pending-table[data-manager=slurm] tbody tr')].map(r => r.dataset.pending)",
        what="slurm's pending rows",
    )
    assert rows == ["16 pretrain-70b", "17 eval"]  # longest-waiting first
    first = browser.evaluate("document.querySelector('.pending-table[data-manager=slurm] tbody tr').innerText")
    assert "Resources" in first and "2 h 01 min" in first and "partition gpu: 40 of 32" in first
    bar = browser.evaluate(
        """(() => { const s = document.querySelector('.manager[data-manager=slurm] svg.quota-bar[data-queue=gpu]');
        const w = (sel) => { const e = s.querySelector(sel); return e ? +e.getAttribute('width') : null; };
        const x = (sel) => { const e = s.querySelector(sel); return e ? +e.getAttribute('x1') : null; };
        return {scale: +s.dataset.scale, used: w('rect.used'), borrowed: w('rect.borrowed'), pending: w('rect.pending'),
                quota: x('line.quota-line'), borrow: x('line.borrow-line')}; })()"""
    )
    # 40 in use of a quota of 32 (8 borrowed), 18 asked for: the bar spans 58 GPUs over 360 px
    assert bar == pytest.approx(
        {"scale": 58, "used": 32 / 58 * 360, "borrowed": 8 / 58 * 360, "pending": 18 / 58 * 360,
         "quota": 32 / 58 * 360, "borrow": 48 / 58 * 360},
        abs=0.01,
    )  # fmt: skip
    queue_row = browser.evaluate(
        "document.querySelector('.queue-table[data-manager=slurm] tr[data-queue=gpu]').innerText"
    )
    assert "125%" in queue_row
    twin = browser.evaluate("document.querySelector('.manager[data-manager=twin] [data-empty]')?.innerText")
    assert twin == "nothing pending"
    assert browser.evaluate("document.querySelector('.nav a[data-nav=scheduler]').classList.contains('on')")
    shot(browser, shots, "scheduler")
    no_page_errors(browser)


class _Gate:
    """The API in front of `app`, holding every request under `prefix` until `opened` is set, then answering it
    (or, with `fail`, refusing it with a 503 and the API's error shape): a slow or failing control plane."""

    def __init__(self, app: Any, prefix: str) -> None:
        import threading

        self.app, self.prefix = app, prefix
        self.opened = threading.Event()
        self.fail = False

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        import asyncio

        if scope["type"] == "http" and scope["path"].startswith(self.prefix):
            while not self.opened.is_set():
                await asyncio.sleep(0.05)
            if self.fail:
                body = json.dumps({"error": "the state database is not answering", "fix": "check its disk"}).encode()
                await send({"type": "http.response.start", "status": 503,
                            "headers": [(b"content-type", b"application/json")]})  # fmt: skip
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def test_a_slow_page_says_it_is_loading_and_a_failed_one_says_why(
    browser: Chromium, served: Served, shots: Path
) -> None:
    ident = served.incidents["gpu-lost"]
    gate = _Gate(served.app, "/api/v1/incidents/")
    with apiclient.serving(gate) as url:  # type: ignore[arg-type]
        browser.navigate(f"{url}/#/incident/{ident}")
        state = browser.wait_for(
            "(() => { const s = document.querySelector('#page-state'); return s && !s.hidden && s.dataset.state; })()",
            what="the loading state",
        )
        assert state == "loading"
        assert "Loading" in browser.evaluate("document.querySelector('#page-state').innerText")
        assert browser.evaluate("document.querySelector('#page-state .spinner') !== null")
        assert browser.evaluate("document.querySelector('#view').dataset.ready") is None
        shot(browser, shots, "incident-loading")
        gate.opened.set()
        _drawn(browser, f"#/incident/{ident}")
        assert browser.evaluate("document.querySelector('#page-state').hidden") is True
        assert ident in browser.evaluate("document.querySelector('#view').innerText")
        # the API fails: the page says so in its own words, not a blank page
        gate.fail = True
        browser.navigate(f"{url}/#/incidents")
        _drawn(browser, "#/incidents")
        browser.navigate(f"{url}/#/incident/{ident}")
        _drawn(browser, f"#/incident/{ident}")
        failed = browser.evaluate(
            "(() => { const s = document.querySelector('#page-state');"
            " return {state: s.dataset.state, hidden: s.hidden, text: s.innerText}; })()"
        )
        assert failed["state"] == "failed" and not failed["hidden"]
        assert "could not load (503)" in failed["text"] and "the state database is not answering" in failed["text"]
        assert "check its disk" in failed["text"]
        shot(browser, shots, "incident-failed")
    browser.errors[:] = [e for e in browser.errors if "503" not in e]  # the refusals, on purpose
    no_page_errors(browser)


def test_the_header_clock_says_it_is_the_twins(browser: Chromium, served: Served) -> None:
    _open(browser, served, "#/jobs")
    browser.wait_for("document.querySelector('#clock').dataset.clock", what="the clock")
    clock = browser.evaluate(
        "(() => { const c = document.querySelector('#clock'); return {kind: c.dataset.clock, text: c.innerText,"
        " title: c.title}; })()"
    )
    assert served.api("api/v1/summary")["simulated_time"] is True
    assert clock["kind"] == "simulated" and clock["text"].startswith("simulated")
    assert "not the wall clock" in clock["title"]
    no_page_errors(browser)


def test_a_lost_gpus_page_shows_its_values_as_lost(browser: Chromium, served: Served, shots: Path) -> None:
    """n-001's GPU 5 fell off the bus: no tile and no chart heads with its last reading as if current, and the
    inventory names its last Xid (79)."""
    _open(browser, served, "#/gpu/n-001/5")
    browser.wait_for("document.querySelector('#gpu-temp path.series')", what="the temperature timeline")
    tiles = browser.evaluate(
        "[...document.querySelectorAll('#readings .kpi')]"
        ".map(k => [k.dataset.reading, k.querySelector('.v').innerText])"
    )
    assert len(tiles) == 6 and all(t == ["lost", "lost"] for t in tiles), tiles
    heads = browser.evaluate(
        "['#gpu-temp', '#gpu-power', '#gpu-util', '#gpu-clock'].map(c => document.querySelector(c + ' .now').innerText)"
    )
    assert heads == ["lost"] * 4
    why = browser.evaluate("document.querySelector('#gpu-temp .now [data-stale]').title")
    assert "its last reading" in why and "°C" in why  # the last value, said to be the last
    inventory = browser.evaluate("document.querySelector('#inventory').innerText")
    assert "last Xid\n79" in inventory or "last Xid 79" in inventory, inventory
    shot(browser, shots, "gpu-lost")
    # a GPU that reads: its current values head its charts
    _open(browser, served, "#/gpu/n-001/4")
    browser.wait_for("document.querySelector('#gpu-temp .now').innerText.includes('°C')", what="a current reading")
    assert browser.evaluate("document.querySelector('#readings [data-reading=lost]')") is None
    no_page_errors(browser)


def test_a_gpu_without_an_index_is_named_by_its_pci_address(browser: Chromium, served: Served, shots: Path) -> None:
    """An Xid for a GPU NVML does not list on n-002 (the kernel log names it by PCI address), pushed through the
    door: the incident lists and the incident page name it gpu/n-002/0000:c1:00.0 and link its node, never
    gpu/n-002/null."""

    from gpufleet.model import RootCause, Severity
    from gpufleet.model.observation import Entity, EntityKind
    from gpufleet.model.observe import SCHEMA_VERSION, Batch, Finding, Record

    now = served.api("api/v1/summary")["time"]
    pci = "0000:c1:00.0"
    line = f"NVRM: Xid (PCI:{pci}): 79, GPU has fallen off the bus."
    gpu = Entity(EntityKind.gpu, "n-002", name=pci)
    finding = Finding(now, RootCause.gpu_lost, gpu, Severity.critical, f"Xid 79 on {pci}", line, "kmsg", xid=79)
    batch = Batch(v=SCHEMA_VERSION, agent="n-002-kmsg", incarnation="k", node="n-002", sent=now,
                  records=[Record(1, finding)])  # fmt: skip
    _push(served, batch)
    (row,) = [r for r in served.api("api/v1/incidents?node=n-002") if r["entity"]["name"] == pci]
    want = f"gpu/n-002/{pci}"
    assert row["entity"]["text"] == want

    _open(browser, served, "#/incidents")
    link = browser.wait_for(
        f"(() => {{ const a = document.querySelector('#incident-table a[data-entity=\"{want}\"]');"
        " return a && [a.innerText, a.getAttribute('href')]; })()",
        what="the PCI-named GPU in the incident list",
    )
    assert link == [want, "#/node/n-002"]
    assert "null" not in browser.evaluate("document.querySelector('#incident-table').innerText")
    _open(browser, served, f"#/incident/{row['id']}")
    browser.wait_for(f"document.querySelector('#view').innerText.includes('{want}')", what="the incident's entity")
    assert "/null" not in browser.evaluate("document.querySelector('#view').innerText")
    _open(browser, served, "#/node/n-002")
    browser.wait_for(f"document.querySelector('#incidents a[data-entity=\"{want}\"]')", what="the node's incident")
    shot(browser, shots, "gpu-by-pci")
    no_page_errors(browser)


def test_a_node_whose_gpu_source_is_down_is_shown_degraded(browser: Chromium, served: Served, shots: Path) -> None:
    """n-009's agent cannot load NVML: it lists no GPUs and exports gpufleet_source_up{source="nvml"} 0 with why.
    The node page shows it Degraded with the reason, never Ready with "GPUs healthy 0/0"; the overview lists it."""

    import numpy as np

    from gpufleet.model.observe import SCHEMA_VERSION, Batch, MetricSnapshot, NodeInventory

    now = served.api("api/v1/summary")["time"]
    why = "NVML Shared Library Not Found: libnvidia-ml.so.1"
    metrics = MetricSnapshot.of(now, [], [], np.zeros((0, 0)), sources_down={"nvml": why})
    batch = Batch(v=SCHEMA_VERSION, agent="n-009", incarnation="b", node="n-009", sent=now,
                  inventory=NodeInventory(hostname="n-009", driver="", cuda=""), metrics=metrics)  # fmt: skip
    _push(served, batch)

    _open(browser, served, "#/node/n-009")
    browser.wait_for("document.querySelector('#conditions [data-condition=GpuSourceDown]')", what="the condition")
    page = browser.evaluate(
        """(() => { const t = (s) => document.querySelector(s)?.innerText;
        return {status: t('#status'), cond: t('#conditions [data-condition=GpuSourceDown]'),
                down: t('#glance [data-sources-down]'), gpus: t('#glance [data-k=gpus-healthy]')}; })()"""
    )
    assert "Degraded" in page["status"] and "Ready" not in page["status"]
    assert "True" in page["cond"] and why in page["cond"]
    assert "nvml" in page["down"] and why in page["down"]
    assert page["gpus"].startswith("unknown") and "0 / 0" not in page["gpus"]
    shot(browser, shots, "node-gpu-source-down")
    _open(browser, served, "#/")
    row = browser.wait_for(
        "document.querySelector('.hrow[data-degraded][data-node=\"n-009\"]')?.innerText", what="the degraded node"
    )
    assert "GPU source down" in row and why in row
    no_page_errors(browser)
