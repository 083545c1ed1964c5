"""Where the control plane keeps its state on this host."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

DEFAULT_PORT = 8470


def data_dir() -> Path:
    path = Path(os.environ.get("GPUFLEET_HOME", Path.home() / ".gpufleet"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def server_url() -> str:
    return os.environ.get("GPUFLEET_SERVER", f"http://127.0.0.1:{DEFAULT_PORT}")


def api_token(create: bool = False) -> str | None:
    """The bearer token mutating API calls need: $GPUFLEET_TOKEN, else the one `gpufleet up` wrote."""
    env = os.environ.get("GPUFLEET_TOKEN")
    if env:
        return env
    path = data_dir() / "token"
    if path.exists():
        return path.read_text().strip()
    if not create:
        return None
    token = secrets.token_hex(24)
    path.write_text(token + "\n")
    path.chmod(0o600)
    return token
