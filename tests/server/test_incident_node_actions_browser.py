"""The incident page in a real headless Chromium shows what the node's own agent was asked to do for the incident
and what it did: a Xid 48 on the twin with node actions routed to the agents, its GPU reset and diagnostics listed
with their outcome and the agent's words."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from gpufleet.sim.faults import InjectedFault
from gpufleet.sim.runner import run_headless
from gpufleet.spec.scenario_spec import FaultType
from gpufleet.state import Database
from tests import apiclient
from tests.browser import Chromium, no_page_errors, started
from tests.twins import door, small_twin

pytestmark = pytest.mark.real


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    twin = small_twin(faults=[InjectedFault(0, FaultType.ecc_dbe, 30.0, node="n-000", gpu=5)])
    plane, fleet = door(twin, remediation="on", db=Database(tmp_path_factory.mktemp("state") / "state.db"))
    plane.remediation.remediator.policy.spec.node_actions.route = "agent"  # type: ignore[attr-defined]
    run_headless(twin, fleet, plane.ingest, plane.tick, 600)  # type: ignore[attr-defined]
    [ident] = [r["id"] for r in plane.incidents() if r["cause"] == "ecc-dbe"]  # type: ignore[attr-defined]
    with apiclient.serving(apiclient.app(plane)) as url:
        yield f"{url}/", ident


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chromium]:
    yield from started(tmp_path_factory.mktemp("chromium-profile"))


def test_the_incident_lists_its_node_actions(browser: Chromium, served: tuple[str, str]) -> None:
    url, ident = served
    route = f"#/incident/{ident}"
    browser.navigate(url + route)
    browser.wait_for(
        f"(() => {{ const v = document.querySelector('#view'); return v && v.dataset.ready === '1' && "
        f"v.dataset.route === {json.dumps(route)}; }})()",
        what="the incident page",
    )
    browser.wait_for("document.querySelector('#node-actions')", what="the node actions")
    rows = browser.evaluate(
        "[...document.querySelectorAll('#node-actions tbody tr')]"
        ".map(r => [r.dataset.id, r.dataset.state, r.innerText])"
    )
    assert [(r[0], r[1]) for r in rows] == [(f"{ident}.reset", "done"), (f"{ident}.diag", "passed")]
    assert "GPU 5 on n-000 reset" in rows[0][2] and "diag r2 PASS" in rows[1][2]
    assert "returned to service after diag passed" in browser.evaluate("document.querySelector('#trail').innerText")
    no_page_errors(browser)
