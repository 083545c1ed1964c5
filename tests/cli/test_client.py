"""How the CLI reaches a control plane, against a real HTTP server on a free port: the query, the token, the JSON
body, every error status as its one clear error, a redirect never followed, a server that is not there, and the
live stream's frames."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from gpufleet.cli.client import Api
from gpufleet.errors import AuthError, BackendError, NotFoundError, UserError

SEEN: list[dict[str, Any]] = []


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass

    def answer(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:
        SEEN.append({"path": self.path, "auth": self.headers.get("Authorization"), "ua": self.headers["User-Agent"]})
        if self.path.startswith("/api/v1/nodes"):
            self.answer(200, [{"name": "dgx-001"}])
        elif self.path == "/denied":
            self.answer(401, {"error": "no token given"})
        elif self.path == "/missing":
            self.answer(404, {"error": "no node dgx-999", "fix": "gpufleet get nodes"})
        elif self.path == "/bad":
            self.answer(422, {"error": "limit must be positive"})
        elif self.path == "/broken":
            self.send_response(500)
            self.send_header("Content-Length", "4")
            self.end_headers()
            self.wfile.write(b"oops")
        elif self.path == "/moved":
            self.answer(302, {}, {"Location": "/api/v1/nodes?moved=1"})
        elif self.path == "/api/v1/stream":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            self.wfile.write(
                b'event: nodes\ndata: {"n": 1}\n\n: keep-alive\n\nevent: incident\r\ndata: {"id": 7}\r\n\r\n'
            )

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        SEEN.append({"path": self.path, "type": self.headers.get("Content-Type"), "body": raw})
        self.answer(200, {"ok": True})


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("GPUFLEET_HOME", str(tmp_path))
    for name in ("GPUFLEET_SERVER", "GPUFLEET_TOKEN", "http_proxy", "HTTP_PROXY"):
        monkeypatch.delenv(name, raising=False)
    SEEN.clear()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_read_sends_the_query_and_the_token_and_returns_the_json(server: str, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    api = Api(server, token_file=token)
    assert api.get("/api/v1/nodes", node="dgx-001", limit=5, pool=None) == [{"name": "dgx-001"}]
    assert SEEN[-1]["path"] == "/api/v1/nodes?node=dgx-001&limit=5"
    assert SEEN[-1]["auth"] == "Bearer s3cret"
    assert SEEN[-1]["ua"].startswith("gpufleet/")


def test_a_change_posts_its_body_as_json(server: str) -> None:
    assert Api(server).post("/api/v1/nodes/dgx-001/cordon", {"dryRun": True}) == {"ok": True}
    assert SEEN[-1]["type"] == "application/json"
    assert json.loads(SEEN[-1]["body"]) == {"dryRun": True}


@pytest.mark.parametrize(
    ("path", "error", "message"),
    [
        ("/denied", AuthError, "no token given"),
        ("/missing", NotFoundError, "no node dgx-999"),
        ("/bad", UserError, "limit must be positive"),
        ("/broken", BackendError, "oops"),
    ],
)
def test_each_error_status_is_one_clear_error(server: str, path: str, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message) as caught:
        Api(server).get(path)
    if path == "/denied":
        assert "token" in (caught.value.fix or "")  # type: ignore[attr-defined]
    if path == "/missing":
        assert caught.value.fix == "gpufleet get nodes"  # type: ignore[attr-defined]


def test_a_redirect_is_not_followed(server: str) -> None:
    assert Api(server).get("/moved") == {}
    assert [seen["path"] for seen in SEEN] == ["/moved"]


def test_no_server_is_named_with_where_the_address_came_from(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFLEET_HOME", str(tmp_path))
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(BackendError, match=rf"no control plane answers at http://127.0.0.1:{port} \(from --server\)"):
        Api(f"http://127.0.0.1:{port}").get("/api/v1/nodes")


def test_the_stream_yields_each_event_with_its_data(server: str) -> None:
    assert list(Api(server).stream()) == [("nodes", {"n": 1}), ("incident", {"id": 7})]
