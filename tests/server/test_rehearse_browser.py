"""The dashboard's "rehearse a policy" page in a real headless Chromium (tests/browser.py): reached from the
incidents page, it posts the candidate policy typed into it to /api/v1/remediation/replay and draws the totals
(current, candidate, difference) and the incidents handled differently, the same as the API answers; a policy that
does not validate is shown with its fix. A screenshot is kept as an artifact."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpufleet.state import open_state
from tests import apiclient
from tests.browser import LOCAL, Chromium, artifacts, no_page_errors, shot, started
from tests.control.helpers import Clock, plane_at
from tests.remediate.recorded_day import record_day

pytestmark = pytest.mark.real

STRICT = """apiVersion: gpufleet.io/v1
kind: RemediationPolicy
metadata: {name: strict-breaker}
spec:
  breaker: {threshold: 2, minFailures: 2, window: 10m}
"""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A control plane started again on seven hours the twin recorded with remediation on."""
    home: Path = record_day(tmp_path_factory.mktemp("home"), hours=7.0)
    plane = plane_at(open_state(home, create=False), Clock())
    with apiclient.serving(apiclient.app(plane)) as url:
        yield f"{url}/"
    plane.close()
    plane.db.close()


@pytest.fixture(scope="module")
def browser(served: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chromium]:
    yield from started(tmp_path_factory.mktemp("chromium-profile"))


def _replay(served: str, policy: str) -> Any:
    request = urllib.request.Request(
        served + "api/v1/remediation/replay",
        data=json.dumps({"policy": policy, "since": "30d"}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with LOCAL.open(request, timeout=60) as resp:
        return json.load(resp)


def _ready(browser: Chromium, route: str) -> None:
    browser.wait_for(
        "(() => { const v = document.querySelector('#view'); return v && v.dataset.ready === '1' && "
        f"v.dataset.route === {json.dumps(route)}; }})()",
        timeout=30,
        what=f"{route} drawn",
    )


def _enter(browser: Chromium, policy: str) -> None:
    browser.evaluate("document.querySelector('#replay-policy').value = ''")
    browser.type_text("#replay-policy", policy)
    browser.click("#replay-run")


def test_a_stricter_breaker_rehearsed_from_the_incidents_page(browser: Chromium, served: str, tmp_path: Path) -> None:
    expected = _replay(served, STRICT)
    browser.navigate(served + "#/incidents")
    _ready(browser, "#/incidents")
    browser.click("#rehearse-link")
    _ready(browser, "#/rehearse")
    assert browser.evaluate("document.querySelector('.nav a.on').dataset.nav") == "incidents"
    _enter(browser, STRICT)
    browser.wait_for("document.querySelector('#view').dataset.replayed === 'ok'", timeout=60, what="the replay drawn")
    totals = browser.evaluate(
        """Object.fromEntries([...document.querySelectorAll('#replay-totals tr[data-total]')].map(r =>
            [r.dataset.total, [...r.querySelectorAll('td.num')].map(c => c.innerText.trim())]))"""
    )
    assert list(totals) == list(expected["totals"])
    assert totals["breaker_trips"] == ["0", "1", "+1"] and totals["refusals"] == ["0", "3", "+3"]
    assert totals["gpu_hours"][2].startswith("-")
    rows = browser.evaluate(
        "[...document.querySelectorAll('#replay-diffs tr[data-incident]')].map(r => r.dataset.incident)"
    )
    assert rows == [d["incident"] for d in expected["differences"]] == ["INC-000003", "INC-000004", "INC-000005"]
    first = browser.evaluate("document.querySelector('#replay-diffs tr[data-incident=\"INC-000003\"]').innerText")
    assert "cordon node/n-004" in first and "cordon refused" in first
    assert "current = recorded" in browser.evaluate("document.querySelector('#replay-baseline').innerText")
    assert "2 of 5 incidents handled the same" in browser.evaluate("document.querySelector('#replay-same').innerText")
    shot(browser, artifacts(tmp_path), "rehearse")
    no_page_errors(browser)


def test_a_policy_that_does_not_validate_is_shown_with_its_fix(browser: Chromium, served: str) -> None:
    browser.navigate(served + "#/rehearse")
    _ready(browser, "#/rehearse")
    _enter(browser, STRICT.replace("threshold", "treshold"))
    browser.wait_for("document.querySelector('#view').dataset.replayed === 'failed'", timeout=60, what="the refusal")
    said = browser.evaluate("document.querySelector('[data-error=\"replay\"]').innerText")
    assert "treshold" in said and "fix:" in said and "threshold" in said
    assert browser.evaluate("document.querySelector('#replay-diffs') === null")
