"""The examples run as their users would run them: the training loop on CPU (one process, two over gloo, one with
a rank that never reaches the barrier) and the inference server in-process and under uvicorn."""

from __future__ import annotations

import asyncio
import importlib.util
import math
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import httpx
import pytest
from prometheus_client import CollectorRegistry

from gpufleet.instrument import names
from tests.conftest import REPO_ROOT
from tests.instrument.conftest import Scrape, free_port, require_torch, scrape

EXAMPLES = REPO_ROOT / "examples" / "instrument"
SERVE = {"model": "toy-lm", "version": "1"}


def load_server() -> ModuleType:
    spec = importlib.util.spec_from_file_location("serve_asgi_example", EXAMPLES / "serve_asgi.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextmanager
def running(args: list[str], ready: str | None, timeout: float = 120.0) -> Iterator[subprocess.Popen[str]]:
    """An example as a process of its own session, once it prints `ready` (at once if None); the session is
    ended after."""
    proc = subprocess.Popen(
        [sys.executable, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO_ROOT,
        start_new_session=True,
    )
    assert proc.stdout is not None
    seen: list[str] = []
    try:
        deadline = time.monotonic() + timeout
        while ready is not None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            seen.append(line)
            if ready in line:
                break
        assert ready is None or any(ready in line for line in seen), "".join(seen)
        yield proc
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


def metrics_at(port: int) -> Scrape:
    return Scrape.parse(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text)


def two_free_ports() -> int:
    """A port p with p + 1 free as well (rank r serves on p + r)."""
    for _ in range(50):
        port = free_port()
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise AssertionError("no two adjacent free ports")


# --- training ---------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_train_torch_one_process(tmp_path: Path) -> None:
    require_torch()
    port = free_port()
    args = [str(EXAMPLES / "train_torch.py"), "--steps", "30", "--eval-every", "10", "--checkpoint-every", "10"]
    args += ["--metrics-port", str(port), "--checkpoint-dir", str(tmp_path), "--linger", "120"]
    with running(args, "rank 0: serving /metrics"):
        s = metrics_at(port)
    job = {"job": "example-regression"}
    assert s.value(names.TRAINING_STEP, **job) == 30
    assert s.value(names.TRAINING_SAMPLES, **job) == 30 * 32
    assert s.value(names.TRAINING_CHECKPOINTS, **job, result=names.CHECKPOINT_SUCCESS) == 3
    assert s.value(names.TRAINING_CHECKPOINTS, **job, result=names.CHECKPOINT_FAILURE) == 0
    assert (tmp_path / "checkpoint.pt").is_file()
    for name in (names.TRAINING_LOSS, names.TRAINING_VALIDATION_LOSS, names.TRAINING_GRADIENT_NORM):
        assert math.isfinite(s.value(name, **job) or math.nan), name
    assert (s.value(names.TRAINING_LEARNING_RATE, **job) or 0) > 0
    assert s.label_sets(names.TRAINING_RANK_COMPUTE) == [{**job, "rank": "0"}]


@pytest.mark.slow
def test_train_torch_two_processes_export_one_job(tmp_path: Path) -> None:
    require_torch()
    port = two_free_ports()
    args = [str(EXAMPLES / "train_torch.py"), "--steps", "20", "--world-size", "2", "--checkpoint-every", "10"]
    args += ["--metrics-port", str(port), "--checkpoint-dir", str(tmp_path), "--linger", "120"]
    with running(args, "rank 0: serving /metrics"):
        rank0 = metrics_at(port)
        rank1 = metrics_at(port + 1)
    job = {"job": "example-regression"}
    assert rank0.value(names.TRAINING_WORLD_SIZE, **job) == 2
    assert rank0.value(names.TRAINING_SAMPLES, **job) == 20 * 32 * 2  # the global batch
    assert rank0.value(names.TRAINING_CHECKPOINTS, **job, result=names.CHECKPOINT_SUCCESS) == 2
    assert rank1.names() & {names.TRAINING_LOSS, names.TRAINING_STEP, names.TRAINING_WORLD_SIZE} == set()
    assert rank1.label_sets(names.TRAINING_RANK_DATA_WAIT) == [{**job, "rank": "1"}]
    assert not rank0.label_sets(names.TRAINING_BARRIER_TIMEOUTS)  # the checkpoint barriers passed


@pytest.mark.slow
def test_train_torch_names_the_rank_that_never_arrives() -> None:
    require_torch()
    args = [str(EXAMPLES / "train_torch.py"), "--steps", "10", "--world-size", "2", "--absent-rank", "1"]
    args += ["--barrier-timeout", "2"]
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=REPO_ROOT, timeout=300)
    assert done.returncode == 3, done.stderr
    assert "rank 0: Rank 1 failed to pass monitored barrier 'end' in 2000 ms" in done.stderr


# --- serving ----------------------------------------------------------------------------------------------------


def test_serve_asgi_in_process() -> None:
    module = load_server()
    registry = CollectorRegistry()
    app = module.create_app(registry=registry, prefill_s=0.001, token_s=0.001)

    async def run() -> list[httpx.Response]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            return [
                await client.get("/v1/generate", params={"prompt": "hi", "max_tokens": 6}),
                await client.get("/v1/generate", params={"prompt": "hi", "max_tokens": 6}),
                await client.get("/v1/generate", params={"prompt": "hi", "max_tokens": 4, "stream": "false"}),
                await client.get("/v1/fail"),
                await client.get("/healthz"),
                await client.get("/metrics"),
            ]

    streamed, again, whole, failed, health, exposition = asyncio.run(run())
    assert streamed.text == again.text  # the toy model is deterministic
    assert streamed.text.split() == list(module.generate("hi", 6))
    assert whole.text.split() == list(module.generate("hi", 4))
    assert (failed.status_code, health.status_code) == (500, 200)
    s = Scrape.parse(exposition.text)
    assert s.value(names.INFERENCE_GENERATED_TOKENS, **SERVE) == 6 + 6 + 4
    assert s.value(f"{names.INFERENCE_TIME_TO_FIRST_TOKEN}_count", **SERVE) == 3
    assert s.value(f"{names.INFERENCE_INTER_TOKEN_LATENCY}_count", **SERVE) == 5 + 5 + 3
    assert s.value(f"{names.INFERENCE_REQUEST_DURATION}_count", **SERVE) == 4  # /healthz is not timed
    assert s.value(names.INFERENCE_REQUESTS, **SERVE, outcome="ok") == 3
    assert s.value(names.INFERENCE_REQUESTS, **SERVE, outcome="error") == 1
    assert s.value(names.INFERENCE_QUEUE_DEPTH, **SERVE) == 0
    assert s.value(names.INFERENCE_IN_FLIGHT, **SERVE) == 0


def test_serve_asgi_crash_is_an_error() -> None:
    registry = CollectorRegistry()
    app = load_server().create_app(registry=registry)

    async def crash() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            await client.get("/v1/crash")

    with pytest.raises(RuntimeError, match="crashed"):
        asyncio.run(crash())
    assert scrape(registry).value(names.INFERENCE_ERRORS, **SERVE) == 1


def test_serve_asgi_under_uvicorn() -> None:
    port = free_port()
    args = [str(EXAMPLES / "serve_asgi.py"), "--port", str(port)]
    with running(args, ready=None):
        base = f"http://127.0.0.1:{port}"
        for _attempt in range(200):
            try:
                httpx.get(f"{base}/healthz", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.05)
        with httpx.stream("GET", f"{base}/v1/generate", params={"prompt": "x", "max_tokens": 8}, timeout=10) as r:
            chunks = [c for c in r.iter_text() if c]
        crash = httpx.get(f"{base}/v1/crash", timeout=10)
        s = metrics_at(port)
    assert "".join(chunks).split() == list(load_server().generate("x", 8))
    assert crash.status_code == 500
    assert s.value(names.INFERENCE_GENERATED_TOKENS, **SERVE) == 8
    assert s.value(f"{names.INFERENCE_TIME_TO_FIRST_TOKEN}_count", **SERVE) == 1
    assert s.value(f"{names.INFERENCE_INTER_TOKEN_LATENCY}_count", **SERVE) == 7
    assert s.value(names.INFERENCE_REQUESTS, **SERVE, outcome="error") == 1
    assert s.value(names.INFERENCE_REQUESTS, **SERVE, outcome="ok") == 1
