"""The agent's HTTP endpoint: /metrics (the body rendered at the last collection) and /healthz."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from gpufleet.agent.collector import Collector
from gpufleet.telemetry.exposition.config import CONTENT_TYPE


def make_server(
    collector: Collector, host: str, port: int, extra: Callable[[], dict[str, Any]] | None = None
) -> ThreadingHTTPServer:
    """`extra` adds to /healthz (the push to the control plane: connected, records waiting)."""

    class Handler(BaseHTTPRequestHandler):
        # keep-alive: a scraper reuses its connection (and its thread here) instead of a new one each scrape, which
        # cost most of an idle agent's CPU; every answer carries its Content-Length. An idle connection is closed.
        protocol_version = "HTTP/1.1"
        timeout = 300

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, CONTENT_TYPE, collector.body)
            elif path == "/healthz":
                age = time.time() - collector.last_collect if collector.collections else None
                healthy = age is not None and age < max(3 * collector.interval, 5.0)
                body = {
                    "status": "ok" if healthy else "stale",
                    "last_collection_age_s": None if age is None else round(age, 3),
                    "sources": collector.source_up,
                    "collections": collector.collections,
                    **(extra() if extra is not None else {}),
                }
                self._send(200 if healthy else 503, "application/json", json.dumps(body).encode())
            else:
                self._send(404, "text/plain", b"not found: try /metrics or /healthz\n")

        def _send(self, status: int, ctype: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:  # scrapes every few seconds would flood the log
            return

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server


def serve_in_thread(server: ThreadingHTTPServer) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True)
    thread.start()
    return thread
