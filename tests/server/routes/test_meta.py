"""The API's docs at /docs, from a real `gpufleet server` in a real headless Chromium: the viewer reads the server's
OpenAPI 3.1 document and draws every operation it describes, from assets the server itself serves (nothing from
another host); and without the viewer's package the page says what to install instead of loading one from a CDN."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpufleet.server.routes import meta
from tests import apiclient
from tests.apiclient import free_port
from tests.browser import LOCAL, Chromium, artifacts, no_page_errors, started
from tests.server_process import Proc, healthy, running, shell_env, wait_for

START_WITHIN_S = 90.0
METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`gpufleet server` as its own process on a free loopback port; yields its URL."""
    home, cwd = tmp_path_factory.mktemp("home"), tmp_path_factory.mktemp("cwd")
    url = f"http://127.0.0.1:{(port := free_port())}"
    procs: list[Proc] = []
    with running(procs):
        procs.append(Proc("server", f"gpufleet server --port {port}", shell_env(home), cwd))
        wait_for(healthy(url), "the control plane's /healthz", START_WITHIN_S, procs)
        yield url


@pytest.fixture(scope="module")
def browser(server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chromium]:
    yield from started(tmp_path_factory.mktemp("chromium-profile"))


@pytest.mark.real
def test_docs_draw_every_operation_of_the_openapi_document(server: str, browser: Chromium, tmp_path: Path) -> None:
    with LOCAL.open(f"{server}/openapi.json", timeout=10) as resp:
        spec = json.load(resp)
    assert spec["openapi"].startswith("3.1")  # what the viewer must read
    described = {
        f"{method.upper()} {path}"
        for path, ops in spec["paths"].items()
        for method, op in ops.items()
        if method in METHODS
    }
    assert "GET /api/v1/incidents" in described

    browser.navigate(f"{server}/docs")
    browser.wait_for(
        "document.querySelectorAll('.opblock').length > 0"
        " || (document.body?.innerText ?? '').includes('Unable to render')",
        timeout=30,
        what="the viewer to draw the operations",
    )
    text = browser.evaluate("document.body.innerText")
    assert "Unable to render" not in text and "does not specify a valid version" not in text
    drawn = browser.evaluate(
        """[...document.querySelectorAll('.opblock')].map(o =>
             o.querySelector('.opblock-summary-method').innerText.trim() + ' ' +
             o.querySelector('.opblock-summary-path').getAttribute('data-path'))"""
    )
    assert set(drawn) == described
    # the incidents list, found by its path in the page and opened to show its query parameters
    browser.evaluate(
        """[...document.querySelectorAll('.opblock')].find(o =>
             o.querySelector('.opblock-summary-path').getAttribute('data-path') === '/api/v1/incidents'
             && o.classList.contains('opblock-get')).querySelector('.opblock-summary-control').click()"""
    )
    params = browser.wait_for(
        """(() => { const o = [...document.querySelectorAll('.opblock.is-open')].find(o =>
             o.querySelector('.opblock-summary-path').getAttribute('data-path') === '/api/v1/incidents');
             return o && [...o.querySelectorAll('.parameter__name')]
               .map(p => p.innerText.split('\\n')[0].trim()); })()""",
        what="the incidents list's parameters",
    )
    assert {"severity", "limit"} <= {p.rstrip("*").strip() for p in params}
    loaded = browser.evaluate("performance.getEntriesByType('resource').map(e => e.name)")
    assert loaded and all(name.startswith(server + "/") for name in loaded), loaded  # nothing from another host
    no_page_errors(browser)
    browser.screenshot(artifacts(tmp_path) / "docs.png", full_page=False)


def test_without_the_viewer_the_page_says_what_to_install(monkeypatch: pytest.MonkeyPatch, make_twin: Any) -> None:
    from tests.twins import door

    monkeypatch.setattr(meta, "_swagger_ui", lambda: None)
    plane, _ = door(make_twin())
    client = apiclient.client(plane)
    page = client.get("/docs")
    assert page.status_code == 503
    assert f"pip install {meta.SWAGGER_UI_PACKAGE}" in page.text and "/openapi.json" in page.text
    assert "cdn" not in page.text.lower()
