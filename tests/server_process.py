"""`gpufleet ...` as a process of its own, started from a shell line as a person types it: for a server (or an agent)
that must run while a test acts on it. Its output goes to files (a pipe nobody reads would stall it), and a test that
fails says what each process wrote to stderr."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import httpx

T = TypeVar("T")

# Where `gpufleet` is found: the interpreter's own bin folder (the project's virtualenv) first.
BIN = str(Path(sys.executable).parent)


def shell_env(home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a person's shell on one host whose gpufleet keeps its files in `home`: no token or server
    inherited from the test's own environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    env.update(GPUFLEET_HOME=str(home), PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", PYTHONUNBUFFERED="1")
    env.update(extra or {})
    return env


def sh(line: str, env: Mapping[str, str], cwd: Path, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """Run one shell line to its end, as bash runs what is typed."""
    return subprocess.run(
        ["bash", "-c", line], env=dict(env), cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )


class Proc:
    """One shell line running in the background (its own process group, so it is stopped whole)."""

    def __init__(self, name: str, line: str, env: Mapping[str, str], cwd: Path) -> None:
        self.name, self.line = name, line
        self.stdout, self.stderr = cwd / f"{name}.stdout", cwd / f"{name}.stderr"
        with self.stdout.open("ab") as out, self.stderr.open("ab") as err:
            self.popen = subprocess.Popen(
                ["bash", "-c", line], env=dict(env), cwd=cwd, stdout=out, stderr=err, start_new_session=True
            )

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    def output(self) -> str:
        return self.stderr.read_text(errors="replace") if self.stderr.exists() else ""

    def tail(self, lines: int = 25) -> str:
        state = "running" if self.alive else f"exited {self.popen.returncode}"
        text = "\n".join(self.output().splitlines()[-lines:])
        return f"--- {self.name} ({state}): {self.line}\n{text}"

    def stop(self) -> None:
        """SIGTERM to the line's process group (bash and what it runs), SIGKILL if it is still there after 15 s."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, sig)
            try:
                self.popen.wait(timeout=15)
                return
            except subprocess.TimeoutExpired:
                continue


def wait_for(check: Callable[[], T | None], what: str, within_s: float, procs: list[Proc]) -> T:
    """Poll `check` until it returns something truthy (a request that fails meanwhile counts as not yet); fail
    with the processes' stderr when `within_s` passes or one of them exits."""
    deadline = time.monotonic() + within_s
    while True:
        dead = [p for p in procs if not p.alive]
        if dead:
            raise AssertionError(
                f"{dead[0].name} exited while waiting for {what}\n" + "\n".join(p.tail() for p in procs)
            )
        try:
            result = check()
        except httpx.HTTPError:
            result = None
        if result:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(f"waited {within_s:.0f} s for {what}\n" + "\n".join(p.tail() for p in procs))
        time.sleep(0.2)


@contextmanager
def running(procs: list[Proc]) -> Iterator[list[Proc]]:
    """Stop every process started into `procs` at the end of the block, the last started first."""
    try:
        yield procs
    finally:
        for proc in reversed(procs):
            proc.stop()


def healthy(url: str) -> Callable[[], bool]:
    """Whether the control plane at `url` answers /healthz."""

    def check() -> bool:
        return httpx.get(f"{url}/healthz", timeout=5, trust_env=False).status_code in (200, 503)

    return check
