"""Shared fixtures: where the shared reference data lives, and how tests that need real components behave."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def shared_dir() -> Path:
    """The shared data folder that sits beside the repository (corpus, openb trace, catalogs)."""
    env = os.environ.get("GPUFLEET_SHARED_DIR")
    return Path(env) if env else REPO_ROOT.parent / "shared"


@pytest.fixture(scope="session")
def shared() -> Path:
    path = shared_dir()
    if not path.is_dir():
        if IN_CI:
            pytest.fail(f"shared data folder missing at {path}")
        pytest.skip(f"shared data folder not found at {path} (set GPUFLEET_SHARED_DIR)")
    return path


@pytest.fixture(scope="session")
def corpus(shared: Path) -> Path:
    return shared / "corpus"


def require_tool(*names: str) -> None:
    """Skip when a real external tool is missing; under CI=true a missing tool is a failure, not a skip."""
    missing = [n for n in names if shutil.which(n) is None]
    if missing:
        msg = f"needs {', '.join(missing)} (installed by scripts/install-components.sh)"
        if IN_CI:
            pytest.fail(msg)
        pytest.skip(msg)


@pytest.fixture
def make_twin():  # type: ignore[no-untyped-def]
    from tests.twins import small_twin

    return small_twin
