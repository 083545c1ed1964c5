"""Ticket sinks: JSON files (filed once per id) and a webhook POST to a real local HTTP server."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

from gpufleet.errors import BackendError
from gpufleet.remediate import FileTicketSink, Ticket, WebhookTicketSink


def _ticket(ident: str = "inc-1.rma") -> Ticket:
    return Ticket(
        id=ident, kind="rma", created=1.0, incident="inc-1", cause="gpu-xid", severity="critical", node="n-1",
        gpu=3, serial="1650000000001", xid=48, summary="Xid 48",
    )  # fmt: skip


def test_file_sink_files_once(tmp_path: Path) -> None:
    sink = FileTicketSink(tmp_path / "t")
    first = sink.file(_ticket())
    second = sink.file(_ticket())
    assert "already filed" in second and first in second
    [t] = sink.tickets()
    assert t.serial == "1650000000001" and t.gpu == 3


def test_webhook_posts_json_with_idempotency_key() -> None:
    received: list[tuple[dict[str, Any], str | None]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append((json.loads(body), self.headers.get("Idempotency-Key")))
            self.send_response(201)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/tickets"
        assert "HTTP 201" in WebhookTicketSink(url).file(_ticket())
    finally:
        server.shutdown()
    [(body, key)] = received
    assert body["serial"] == "1650000000001" and body["kind"] == "rma" and key == "inc-1.rma"


def test_webhook_down_is_a_backend_error() -> None:
    with pytest.raises(BackendError, match="ticket webhook"):
        WebhookTicketSink("http://127.0.0.1:9/tickets", timeout_s=2).file(_ticket())
