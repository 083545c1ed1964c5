"""Where the control plane keeps its state on this host."""

from __future__ import annotations

import os
from pathlib import Path

from gpufleet.private_files import private_dir

DEFAULT_PORT = 8470


def data_dir() -> Path:
    """$GPUFLEET_HOME (default ~/.gpufleet), made or kept 0700: everything gpufleet writes in it is its owner's
    only (gpufleet.private_files)."""
    return private_dir(Path(os.environ.get("GPUFLEET_HOME", Path.home() / ".gpufleet")))


def api_token() -> str | None:
    """The bearer token API calls send: $GPUFLEET_TOKEN, else the admin token the control plane wrote on its first
    start in this data directory."""
    env = os.environ.get("GPUFLEET_TOKEN")
    if env:
        return env.strip()
    path = data_dir() / "token"
    if path.exists():
        return path.read_text().strip()
    return None
