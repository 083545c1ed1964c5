"""How fast gpufleet starts: the command line's CPU time, and `scripts/up` on a fresh clone to the first page.

1. CPU time (user + system of the child process, median of --rounds runs) of
   - `gpufleet --help`,
   - `gpufleet get nodes` against a running control plane (this bench starts `gpufleet up` on a free port first),
   - `gpufleet triage FILE` on a small kernel-log capture from tests/corpus,
   beside `kubectl version --client` as the peer (a Go binary: what a command line costs when it imports nothing).
   Target: --help and get nodes within 0.3 s.
2. `scripts/up` on a fresh clone of this repository (`git clone`, so what is committed): seconds to the first HTTP 200
   of the dashboard, and how many of them installing .venv took. Run twice (--up-rounds): the first fills pip's
   cache as a newcomer's first run would, the second is a fresh clone with the cache warm. Target: 90 s warm.

Run: python bench/cli_startup.py [--rounds 7] [--up-rounds 2 | --no-up] [--ref COMMIT]
(An older tree's command line: PYTHONPATH=OLD/src python bench/cli_startup.py --no-up.)
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
CAPTURE = ROOT / "tests" / "corpus" / "burst_xid79_sxid_gpud.log"
CLI_TARGET_S = 0.3
UP_TARGET_S = 90.0


def gpufleet_command() -> list[str]:
    """The console entry point a user runs, beside this interpreter (else the module, which is the same code)."""
    script = Path(sys.executable).with_name("gpufleet")
    return [str(script)] if script.exists() else [sys.executable, "-m", "gpufleet.cli.main"]


def cpu_seconds(argv: Sequence[str], env: Mapping[str, str]) -> tuple[float, int]:
    """User + system CPU seconds of one run of argv (and any child it waited for), and its exit status."""
    proc = subprocess.Popen(argv, env=dict(env), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime, proc.returncode


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def first_200(url: str, deadline: float, proc: subprocess.Popen[bytes]) -> float | None:
    """Poll url until it answers 200 (the monotonic time then), the process exits, or the deadline passes."""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return None
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return time.monotonic()
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    return None


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop a process started in a session of its own, with everything it started."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def median_row(
    label: str, argv: Sequence[str], env: Mapping[str, str], rounds: int, ok: tuple[int, ...] = (0,)
) -> tuple[str, list[float]]:
    runs = []
    for _ in range(rounds):
        seconds, code = cpu_seconds(argv, env)
        if code not in ok:
            raise SystemExit(f"{label}: exited {code}; run it by hand to see why")
        runs.append(seconds)
    return label, runs


def cli_rows(rounds: int) -> list[tuple[str, list[float] | None, float | None]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    rows: list[tuple[str, list[float] | None, float | None]] = []
    kubectl = shutil.which("kubectl")
    with tempfile.TemporaryDirectory(prefix="gpufleet-bench-") as home:
        env["GPUFLEET_HOME"] = home
        port = free_port()
        server = subprocess.Popen(
            [*gpufleet_command(), "up", "--port", str(port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            if first_200(f"http://127.0.0.1:{port}/", time.monotonic() + 120, server) is None:
                raise SystemExit("gpufleet up did not answer within 120 s")
            client_env = {**env, "GPUFLEET_SERVER": f"http://127.0.0.1:{port}"}
            cli = gpufleet_command()
            for label, argv, target, ok in (
                ("gpufleet --help", [*cli, "--help"], CLI_TARGET_S, (0,)),
                ("gpufleet get nodes (32 nodes, running server)", [*cli, "get", "nodes"], CLI_TARGET_S, (0,)),
                # triage's exit status is its verdict: this capture is faulty (1)
                (f"gpufleet triage {CAPTURE.relative_to(ROOT)}", [*cli, "triage", str(CAPTURE)], None, (1,)),
            ):
                rows.append((*median_row(label, argv, client_env, rounds, ok), target))
        finally:
            stop(server)
    if kubectl:
        version = subprocess.run([kubectl, "version", "--client"], capture_output=True, text=True, check=False)
        first = (version.stdout.splitlines() or ["?"])[0].replace("Client Version: ", "")
        rows.append(
            (*median_row(f"kubectl version --client ({first})", [kubectl, "version", "--client"], env, rounds), None)
        )
    else:
        rows.append(("kubectl version --client: not installed (scripts/install-components.sh kubectl)", None, None))
    return rows


def up_once(port: int, ref: str) -> tuple[float | None, float | None, float]:
    """scripts/up on a fresh clone at ref: (seconds to the first 200, seconds installing .venv, .venv MB)."""
    with tempfile.TemporaryDirectory(prefix="gpufleet-upclone-") as tmp:
        clone = Path(tmp) / "gpufleet"
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
        subprocess.run(["git", "-C", str(clone), "checkout", "--quiet", "--detach", ref], check=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUFLEET_", "VIRTUAL_ENV"))}
        env["GPUFLEET_HOME"] = str(Path(tmp) / "home")
        env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p)
        start = time.monotonic()
        wall_start = time.time()
        proc = subprocess.Popen(
            ["scripts/up", "--port", str(port)],
            cwd=clone,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            answered = first_200(f"http://127.0.0.1:{port}/", start + 900, proc)
        finally:
            stop(proc)
        stamp = clone / ".venv" / ".gpufleet-installed"
        installed = stamp.stat().st_mtime - wall_start if stamp.exists() else None
        size = sum(f.stat().st_size for f in (clone / ".venv").rglob("*") if f.is_file() and not f.is_symlink())
        return (None if answered is None else answered - start), installed, size / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="runs of each command (the median is shown)")
    parser.add_argument("--up-rounds", type=int, default=2, help="fresh clones started with scripts/up")
    parser.add_argument("--no-up", action="store_true", help="skip scripts/up on a fresh clone")
    parser.add_argument("--ref", default="HEAD", help="the commit to clone for scripts/up (e.g. an older one)")
    args = parser.parse_args()
    console = Console(width=None if sys.stdout.isatty() else 150)  # piped: one line a row

    rows = cli_rows(args.rounds)
    peer = next((statistics.median(r) for label, r, _ in rows if label.startswith("kubectl") and r), None)
    table = Table(title=f"CPU time to run a command (user + system, median of {args.rounds})")
    for column in ("command", "CPU s (median)", "min - max", "x kubectl", "target"):
        table.add_column(column, justify="left" if column == "command" else "right")
    for label, runs, target in rows:
        if runs is None:
            table.add_row(label, "-", "-", "-", "-")
            continue
        median = statistics.median(runs)
        ratio = f"{median / peer:.1f}x" if peer else "-"
        verdict = "-" if target is None else f"<= {target} s " + ("met" if median <= target else "MISSED")
        table.add_row(label, f"{median:.3f}", f"{min(runs):.3f} - {max(runs):.3f}", ratio, verdict)
    console.print(table)

    if args.no_up:
        return
    up = Table(title=f"scripts/up on a fresh clone ({args.ref}): seconds to the dashboard's first HTTP 200")
    for column in ("run", "first 200 (s)", "installing .venv (s)", "starting (s)", ".venv MB", "target"):
        up.add_column(column, justify="left" if column == "run" else "right")
    for n in range(args.up_rounds):
        to_200, installing, size = up_once(free_port(), args.ref)
        label = "first (pip cache as found)" if n == 0 else "again (pip cache warm)"
        if to_200 is None:
            up.add_row(label, "no answer", "-", "-", f"{size:.0f}", "-")
            continue
        start = "-" if installing is None else f"{to_200 - installing:.1f}"
        verdict = f"<= {UP_TARGET_S:.0f} s " + ("met" if to_200 <= UP_TARGET_S else "MISSED")
        inst = "-" if installing is None else f"{installing:.1f}"
        up.add_row(label, f"{to_200:.1f}", inst, start, f"{size:.0f}", verdict)
    console.print(up)


if __name__ == "__main__":
    main()
