"""Run `gpufleet ...` in this process, the way a person runs it: the real entry point (errors become one red line
and an exit code), with stdin, stdout, stderr and the environment isolated by Typer's CliRunner.

A subprocess costs about 2.6 s of imports per call; tests that need a process of their own (a server that must
outlive the call, a kill -9) start one themselves.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Mapping
from dataclasses import dataclass

from typer.testing import CliRunner

from gpufleet.cli.main import run


@dataclass(frozen=True)
class Ran:
    """What a run of the command left: the fields of `subprocess.CompletedProcess` that tests read."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


def gpufleet(*args: str, env: Mapping[str, str] | None = None, input: str | None = None) -> Ran:
    """Run `gpufleet ARGS` in process. `env` adds to (or overrides) the environment for this call only."""
    saved_environ = dict(os.environ)
    saved_argv = sys.argv
    sys.argv = ["gpufleet", *args]
    code = 0
    try:
        with CliRunner().isolation(input=input, env=dict(env or {})) as (out, err, _):
            try:
                run()
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except Exception:  # --debug re-raises: print it as the interpreter would
                traceback.print_exc()
                code = 1
            sys.stdout.flush()
            sys.stderr.flush()
            stdout, stderr = out.getvalue().decode(), err.getvalue().decode()
    finally:
        sys.argv = saved_argv
        os.environ.clear()
        os.environ.update(saved_environ)
    return Ran(args=args, returncode=code, stdout=stdout, stderr=stderr)
