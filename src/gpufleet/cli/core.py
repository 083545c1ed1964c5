"""Core verbs: up, sim, get, describe, validate."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Attach the core verbs to the top-level app."""
