"""A minimal inference server instrumented with gpufleet.instrument: a deterministic toy "model" that streams
words, pure ASGI, wrapped in MetricsMiddleware, with /metrics beside it.

    python examples/instrument/serve_asgi.py --port 8000
    uvicorn --app-dir examples/instrument serve_asgi:app --port 8000

    curl -N 'localhost:8000/v1/generate?prompt=hello&max_tokens=8'            # streamed: a chunk per token
    curl 'localhost:8000/v1/generate?prompt=hello&max_tokens=8&stream=false'  # one body; the app counts tokens
    curl -i localhost:8000/v1/fail                                            # a 500, counted as an error
    curl localhost:8000/metrics

At most `slots` requests generate at once; the others wait in the queue (gpufleet_inference_queue_depth).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
from collections.abc import AsyncIterator, Iterator
from urllib.parse import parse_qs

from prometheus_client import CollectorRegistry

from gpufleet.instrument import InferenceMetrics, MetricsMiddleware, request_handle
from gpufleet.instrument.asgi import ASGIApp, Receive, Scope, Send

VOCABULARY = ("the", "a", "GPU", "cluster", "trains", "serves", "models", "tokens", "fast", "fabric", "links", "ranks")

TEXT = (b"content-type", b"text/plain; charset=utf-8")


def generate(prompt: str, max_tokens: int) -> Iterator[str]:
    """The toy model: the same words for the same prompt, every time."""
    seed = int.from_bytes(hashlib.sha256(prompt.encode()).digest()[:4], "big")
    for i in range(max_tokens):
        yield VOCABULARY[(seed + 7 * i) % len(VOCABULARY)]


class ToyServer:
    """The ASGI app. Prefill takes `prefill_s` before the first word, each further word `token_s`."""

    def __init__(self, prefill_s: float = 0.02, token_s: float = 0.005, slots: int = 4) -> None:
        self.prefill_s, self.token_s = prefill_s, token_s
        self.slots = asyncio.Semaphore(slots)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        path = scope["path"]
        if path == "/healthz":
            await _respond(send, 200, b"ok\n")
        elif path == "/v1/fail":
            await _respond(send, 500, b"the model is not loaded\n")
        elif path == "/v1/crash":
            raise RuntimeError("the toy model crashed")
        elif path == "/v1/generate":
            await self.generate(scope, send)
        else:
            await _respond(send, 404, b"not found\n")

    async def generate(self, scope: Scope, send: Send) -> None:
        query = parse_qs(scope.get("query_string", b"").decode())
        prompt = query.get("prompt", [""])[0]
        max_tokens = int(query.get("max_tokens", ["16"])[0])
        stream = query.get("stream", ["true"])[0] != "false"
        handle = request_handle(scope)
        if handle is not None:
            with handle.queued():
                await self.slots.acquire()
        else:
            await self.slots.acquire()
        try:
            if stream:
                await send({"type": "http.response.start", "status": 200, "headers": [TEXT]})
                async for word in self.words(prompt, max_tokens):  # a chunk per word: the middleware's tokens
                    await send({"type": "http.response.body", "body": f"{word} ".encode(), "more_body": True})
                await send({"type": "http.response.body", "body": b""})
                return
            # One body: the middleware would see one token, so the app reports each as it is generated.
            words = []
            async for word in self.words(prompt, max_tokens):
                words.append(word)
                if handle is not None:
                    handle.token()
            await _respond(send, 200, " ".join(words).encode())
        finally:
            self.slots.release()

    async def words(self, prompt: str, max_tokens: int) -> AsyncIterator[str]:
        for i, word in enumerate(generate(prompt, max_tokens)):
            await asyncio.sleep(self.prefill_s if i == 0 else self.token_s)
            yield word


async def _respond(send: Send, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [TEXT]})
    await send({"type": "http.response.body", "body": body})


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def create_app(
    model: str = "toy-lm",
    version: str = "1",
    registry: CollectorRegistry | None = None,
    prefill_s: float = 0.02,
    token_s: float = 0.005,
    slots: int = 4,
) -> ASGIApp:
    """The server wrapped in the middleware: requests under /v1/ are timed, /metrics is served."""
    metrics = InferenceMetrics(model, version, registry=registry)
    return MetricsMiddleware(ToyServer(prefill_s, token_s, slots), metrics, paths=["/v1/"], metrics_path="/metrics")


app = create_app()


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
