"""Training and serving code import the library with prometheus-client alone: nothing heavy comes along."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("numpy", "pydantic", "msgspec", "fastapi", "starlette", "torch", "httpx", "uvicorn")


def modules_after(code: str) -> set[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize(
    "code",
    [
        "import gpufleet.instrument",
        "from gpufleet.instrument import TrainingMetrics, InferenceMetrics, MetricsMiddleware, monitored_barrier",
        "import gpufleet.instrument.training, gpufleet.instrument.barrier, gpufleet.instrument.inference, "
        "gpufleet.instrument.asgi",
    ],
)
def test_importing_the_library_brings_nothing_heavy(code: str) -> None:
    loaded = modules_after(code)
    assert "gpufleet.instrument" in loaded
    assert not {m for m in HEAVY if m in loaded}
    others = {m for m in loaded if m.startswith("gpufleet.") and not m.startswith("gpufleet.instrument")}
    assert not others


def test_the_names_alone_need_not_even_prometheus_client() -> None:
    # The agent and the alert rules read the names where prometheus-client may be absent.
    loaded = modules_after("from gpufleet.instrument import names")
    assert "gpufleet.instrument.names" in loaded
    assert "prometheus_client" not in loaded
