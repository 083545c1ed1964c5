"""The dashboard's Cost page in a real headless Chromium (tests/browser.py): it fetches /api/v1/cost and draws the
money, the GPUs held / idle / unallocated over time (a chart whose points are counted), a bar per team, namespace
and model sized by cost, the idle-cost table, the waste report and the scale-to-zero settings; the period buttons
deep-link and reload. A screenshot is kept as an artifact."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpufleet.sim.faults import InjectedFault
from gpufleet.sim.runner import run_headless
from gpufleet.spec.scenario_spec import FaultType
from tests import apiclient
from tests.browser import LOCAL, Chromium, artifacts, no_page_errors, shot, started
from tests.twins import door, small_twin

pytestmark = pytest.mark.real


@pytest.fixture(scope="module")
def served() -> Iterator[str]:
    """Five nodes for an hour and a half: a training job on n-000 and n-001, a service on n-002 next to a reserved
    pod that does nothing, n-003 empty the whole time, and n-004 empty too but faulty (a GPU off the bus after five
    minutes: it awaits repair, it is not idle capacity)."""
    twin = small_twin(nodes=5, job_nodes=2, service_node="n-002",
                      faults=[InjectedFault(0, FaultType.idle_gpu, 0.0, node="n-002", gpu=7),
                              InjectedFault(1, FaultType.gpu_off_bus, 300.0, node="n-004", gpu=3)])  # fmt: skip
    plane, fleet = door(twin)
    run_headless(twin, fleet, plane.ingest, plane.tick, 5400)  # type: ignore[attr-defined]
    with apiclient.serving(apiclient.app(plane)) as url:
        yield f"{url}/"


@pytest.fixture(scope="module")
def browser(served: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chromium]:
    yield from started(tmp_path_factory.mktemp("chromium-profile"))


def _api(served: str, path: str) -> Any:
    with LOCAL.open(served + path, timeout=30) as resp:
        return json.load(resp)


def _drawn(browser: Chromium, route: str, since: str) -> None:
    browser.wait_for(
        "(() => { const v = document.querySelector('#view'); return v && v.dataset.ready === '1' && "
        f"v.dataset.route === {json.dumps(route)} && v.dataset.costSince === {json.dumps(since)}; }})()",
        timeout=30,
        what=f"{route} drawn for {since}",
    )


def test_cost_page(browser: Chromium, served: str, tmp_path: Path) -> None:
    report = _api(served, "api/v1/cost?since=24h")
    browser.navigate(served + "#/cost?since=24h")
    _drawn(browser, "#/cost?since=24h", "24h")
    assert browser.evaluate("document.querySelector('.nav a.on').dataset.nav") == "cost"
    kpis = browser.evaluate("document.querySelector('#cost-kpis').innerText")
    assert f"${report['totals']['cost_usd']:,.0f}" in kpis and "idle allocated" in kpis.lower()
    # the timeline: held, held-idle and unallocated GPUs; 24 h drawn in 240 points of 6 minutes, 90 minutes of data
    lines = browser.evaluate(
        """[...document.querySelectorAll('#cost-gpus path.series')].map(p => ({label: p.dataset.label,
            points: (p.getAttribute('d').match(/[ML]/g) || []).length}))"""
    )
    assert [x["label"] for x in lines] == ["held", "held, idle", "unallocated"]
    reported = sum(v is not None for v in report["usage"]["timeline"]["held"])
    assert reported >= 14 and all(x["points"] == reported for x in lines), (reported, lines)
    # a bar per namespace, its length the namespace's cost against the costliest, its idle part amber
    bars = browser.evaluate(
        """[...document.querySelectorAll('#namespace-bars tr')].map(r => { const s = r.querySelector('svg');
            return {name: r.dataset.bar, held: +s.dataset.held, idle: +s.dataset.idle,
                    width: +s.querySelector('rect.held').getAttribute('width')
                         + +s.querySelector('rect.idle').getAttribute('width')}; })"""
    )
    expected = {n["name"]: n for n in report["by_namespace"]}
    assert [b["name"] for b in bars] == [n["name"] for n in report["by_namespace"]] == ["training", "inference",
                                                                                        "default"]  # fmt: skip
    top = bars[0]["held"]
    for b in bars:
        assert b["held"] == pytest.approx(expected[b["name"]]["cost_usd"])
        assert b["width"] == pytest.approx(b["held"] / top * 420, abs=0.01)
    default = next(b for b in bars if b["name"] == "default")
    assert default["idle"] == pytest.approx(default["held"])  # the reserved pod did nothing: all of it idle
    model = browser.evaluate("+document.querySelector('#model-bars svg').dataset.spare")
    assert model == pytest.approx(report["by_model"][0]["unallocated_cost_usd"])
    idle_rows = browser.evaluate("[...document.querySelectorAll('#idle-table tbody tr')].map(r => r.dataset.namespace)")
    assert idle_rows == ["default"]
    rows = "[...document.querySelectorAll('#workload-table tr[data-workload]')]"
    workloads = browser.evaluate(f"{rows}.map(r => r.dataset.workload)")
    assert workloads == [w["workload"] for w in report["by_workload"]]
    # n-003 sat empty: listed as idle, and its pool gets settings to scale it to zero; n-004, faulty, is neither
    assert browser.evaluate("[...document.querySelectorAll('#idle-nodes tbody tr')].map(r => r.dataset.node)") == [
        "n-003"
    ]
    rec = browser.evaluate(
        """(() => { const r = document.querySelector('.recommendation');
            return {pool: r.dataset.pool, karpenter: r.querySelector('pre.karpenter').innerText,
                    autoscaler: r.querySelector('pre.autoscaler').innerText, text: r.innerText}; })()"""
    )
    assert rec["pool"] == report["recommendations"][0]["pool"]
    assert "consolidationPolicy: WhenEmpty" in rec["karpenter"] and "consolidateAfter: 30m" in rec["karpenter"]
    assert "--scale-down-unneeded-time=30m" in rec["autoscaler"] and "n-003" in rec["text"]
    assert report["recommendations"][0]["removable_nodes"] == ["n-003"]
    held_back = browser.evaluate(
        "document.querySelector('.recommendation .held-back [data-node=\"n-004\"]')?.innerText"
    )
    assert held_back is not None and "faulty" in held_back and "gpu-lost" in held_back
    assert "p5.48xlarge" in browser.evaluate("document.querySelector('#prices').innerText")
    shot(browser, artifacts(tmp_path), "cost")

    browser.click('#periods button[data-since="7d"]')
    _drawn(browser, "#/cost?since=7d", "7d")
    assert "last 7d" in browser.evaluate("document.querySelector('#cost-sub').innerText")
    assert browser.evaluate("document.querySelector('#periods button.on').dataset.since") == "7d"
    no_page_errors(browser)
