"""The control plane's API for tests: an app whose tokens the test chose, and an in-process client on loopback."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn
from fastapi import FastAPI
from fastapi.testclient import TestClient

from gpufleet.server.app import HealthCheck, create_app
from gpufleet.state.tokens import TokenStore

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
LOOPBACK = ("127.0.0.1", 50000)


def grant(plane: Any, secret: str = TOKEN, role: str = "admin", name: str | None = None) -> TokenStore:
    """`secret` as a token of `role` in the plane's state database (once)."""
    tokens = TokenStore(plane.db)
    if tokens.authenticate(secret) is None:
        name = name or role
        if tokens.get(name, missing_ok=True) is not None:
            name = f"{name}-{len(tokens.list())}"
        tokens.adopt(name, role, secret, "test")
    return tokens


def app(plane: Any, checks: list[HealthCheck] | None = None, secret: str = TOKEN) -> FastAPI:
    return create_app(plane, checks, tokens=grant(plane, secret))


def client(
    plane: Any, checks: list[HealthCheck] | None = None, secret: str = TOKEN, remote: str | None = None
) -> TestClient:
    """A client on loopback, or from the address `remote` (where reads need a token too)."""
    return TestClient(app(plane, checks, secret), client=(remote, 50000) if remote else LOOPBACK)


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now, for a server a test starts."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@contextmanager
def serving(app: FastAPI, host: str = "127.0.0.1") -> Iterator[str]:
    """`app` served by uvicorn on a free port of `host` (loopback unless said) for the block; yields its base URL.
    Open event streams (a dashboard's) are cut after 2 s at the end."""
    port = free_port(host)
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="error", timeout_graceful_shutdown=2))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def outside_address() -> str | None:
    """An IPv4 address of this machine that is not loopback (a browser there is "another host" to the API), or
    None when it has none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("203.0.113.1", 9))  # sends nothing: only asks which local address a route would use
            address = str(s.getsockname()[0])
        except OSError:
            return None
    return None if address.startswith("127.") or address == "0.0.0.0" else address
