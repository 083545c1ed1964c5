"""Headless Chromium driven through the DevTools protocol, for the dashboard's browser tests: navigate, evaluate
JavaScript in the page, wait for a condition, click and type as a person would (real input events), and take
screenshots. Exceptions the page throws and errors it logs are collected so a test can assert there were none."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-extensions",
    "--disable-default-apps",
    "--mute-audio",
]


LOCAL = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback, never through a proxy


class BrowserError(AssertionError):
    """The page threw, a condition never held, or the protocol answered with an error."""


class Chromium:
    """One headless Chromium with one page, driven over its DevTools websocket."""

    def __init__(self, executable: str, profile: Path, *, width: int = 1440, height: int = 1000) -> None:
        self.profile = profile
        self.width, self.height = width, height
        self.errors: list[str] = []  # exceptions thrown and console errors, in order
        self.console: list[str] = []
        self._next = 0
        self._stack = contextlib.ExitStack()
        self._log = (profile / "chromium.log").open("wb")
        self.process = subprocess.Popen(
            [
                executable,
                *FLAGS,
                f"--user-data-dir={profile}",
                "--remote-debugging-port=0",
                "--remote-debugging-address=127.0.0.1",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        try:
            self.port = self._devtools_port()
            self.ws = self._attach()
            for domain in ("Page", "Runtime", "Log"):
                self.send(f"{domain}.enable")
            self.send(
                "Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False
            )
        except Exception:
            self.close()
            raise

    # --- the protocol ----------------------------------------------------------------------------------------------

    def _devtools_port(self, timeout: float = 20.0) -> int:
        active = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise BrowserError(
                    f"chromium exited with {self.process.returncode}; see {self.profile / 'chromium.log'}"
                )
            if active.exists():
                first = active.read_text().splitlines()[:1]
                if first and first[0].strip().isdigit():
                    return int(first[0])
            time.sleep(0.05)
        raise BrowserError(f"chromium wrote no DevToolsActivePort in {timeout:.0f} s")

    def _attach(self) -> ClientConnection:
        with LOCAL.open(f"http://127.0.0.1:{self.port}/json/list", timeout=10) as resp:
            targets = json.load(resp)
        pages = [t for t in targets if t.get("type") == "page"]
        if not pages:
            raise BrowserError(f"no page target among {targets}")
        url = pages[0]["webSocketDebuggerUrl"]
        return self._stack.enter_context(connect(url, max_size=None, open_timeout=10, proxy=None))

    def send(self, method: str, timeout: float = 30.0, **params: Any) -> dict[str, Any]:
        """Call a DevTools method and return its result; events that arrive meanwhile are recorded."""
        self._next += 1
        ident = self._next
        self.ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError(f"{method}: no answer in {timeout:.0f} s")
            message = json.loads(self.ws.recv(timeout=left))
            if message.get("id") == ident:
                if "error" in message:
                    raise BrowserError(f"{method}: {message['error']}")
                return dict(message.get("result", {}))
            self._event(message)

    def _event(self, message: dict[str, Any]) -> None:
        method, params = message.get("method"), message.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            text = details.get("exception", {}).get("description") or details.get("text", "exception")
            self.errors.append(f"exception: {text}")
        elif method == "Runtime.consoleAPICalled":
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
            self.console.append(f"{params.get('type')}: {text}")
            if params.get("type") == "error":
                self.errors.append(f"console.error: {text}")
        elif method == "Log.entryAdded":
            entry = params.get("entry", {})
            if entry.get("level") == "error" and entry.get("source") not in ("network",):
                self.errors.append(f"log: {entry.get('text')}")

    # --- what a test does ------------------------------------------------------------------------------------------

    def navigate(self, url: str) -> None:
        result = self.send("Page.navigate", url=url)
        if result.get("errorText"):
            raise BrowserError(f"navigating to {url}: {result['errorText']}")

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited), as JSON."""
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise BrowserError(f"evaluating {expression!r}: {text}")
        return result.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout: float = 15.0, what: str | None = None) -> Any:
        """Poll until the expression is truthy (an element counts as true); return its value. On timeout say what
        was awaited and what the page had thrown."""
        deadline = time.monotonic() + timeout
        value: Any = None
        probe = f"(() => {{ const v = ({expression}); return v instanceof Node ? true : v; }})()"
        while time.monotonic() < deadline:
            value = self.evaluate(probe)
            if value:
                return value
            time.sleep(0.05)
        raise BrowserError(
            f"waited {timeout:.0f} s for {what or expression}; last value {value!r}; page errors: {self.errors}"
        )

    def _centre(self, selector: str) -> dict[str, Any]:
        box = self.evaluate(
            f"""(() => {{ const e = document.querySelector({json.dumps(selector)}); if (!e) return null;
            e.scrollIntoView({{block: "center"}}); const r = e.getBoundingClientRect();
            return {{x: r.left + r.width / 2, y: r.top + r.height / 2, disabled: !!e.disabled}}; }})()"""
        )
        if box is None:
            raise BrowserError(f"nothing matches {selector!r}")
        return dict(box)

    def hover(self, selector: str) -> None:
        """Move the mouse over the element's centre."""
        box = self._centre(selector)
        self.send("Input.dispatchMouseEvent", type="mouseMoved", x=box["x"], y=box["y"])

    def click(self, selector: str) -> None:
        """Scroll the element into view and click its centre with real mouse events."""
        box = self._centre(selector)
        if box["disabled"]:
            raise BrowserError(f"{selector!r} is disabled")
        x, y = box["x"], box["y"]
        self.send("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)
        self.send("Input.dispatchMouseEvent", type="mousePressed", x=x, y=y, button="left", clickCount=1)
        self.send("Input.dispatchMouseEvent", type="mouseReleased", x=x, y=y, button="left", clickCount=1)

    def type_text(self, selector: str, text: str) -> None:
        """Focus the field and type into it as keyboard input."""
        self.click(selector)
        self.send("Input.insertText", text=text)

    def screenshot(self, path: Path, full_page: bool = True) -> Path:
        """A PNG of the page (all of it, not only the viewport, when `full_page`)."""
        params: dict[str, Any] = {"format": "png", "captureBeyondViewport": full_page}
        if full_page:
            self.evaluate("window.scrollTo(0, 0)")  # else a sticky header is drawn where the page was scrolled to
            size = self.send("Page.getLayoutMetrics")["cssContentSize"]
            height = min(int(size["height"]) + 1, 8000)
            params["clip"] = {"x": 0, "y": 0, "width": self.width, "height": max(height, self.height), "scale": 1}
        data = self.send("Page.captureScreenshot", **params)["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        ws = getattr(self, "ws", None)
        if ws is not None:
            with contextlib.suppress(Exception):
                ws.send(json.dumps({"id": 0, "method": "Browser.close"}))
            self._stack.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=5)
        self._log.close()


# --- what the dashboard's browser tests share ------------------------------------------------------------------


def started(profile: Path) -> Iterator[Chromium]:
    """A headless Chromium on a fresh profile (skipped without it; required under CI), closed after; a fixture
    body: `yield from started(tmp_path_factory.mktemp("chromium-profile"))`."""
    from tests.conftest import require_tool

    require_tool("chromium")
    chromium = Chromium(shutil.which("chromium") or "chromium", profile)
    try:
        yield chromium
    finally:
        chromium.close()


def artifacts(tmp_path: Path) -> Path:
    """Where screenshots go: $GPUFLEET_ARTIFACTS when set, else the test's tmp_path."""
    env = os.environ.get("GPUFLEET_ARTIFACTS")
    path = Path(env) if env else tmp_path
    path.mkdir(parents=True, exist_ok=True)
    return path


def shot(browser: Chromium, shots: Path, name: str) -> Path:
    path = browser.screenshot(shots / f"dashboard-{name}.png")
    print(f"screenshot: {path}")
    assert path.stat().st_size > 20_000  # a rendered page, not a blank one
    return path


def no_page_errors(browser: Chromium) -> None:
    errors, browser.errors[:] = list(browser.errors), []
    assert not errors, errors
