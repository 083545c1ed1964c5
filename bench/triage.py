"""`gpufleet triage` speed and accuracy.

1. Accuracy on the real captures: each corpus file's format, verdict and codes against the expected ones.
2. Speed per format on the same files (files/s and MB/s, median of several rounds, in this process).
3. A 1 GB kernel log (a busy node's noise with GPU faults sprinkled through it), triaged by the command as a user
   runs it: wall time, CPU time (user + system, of the child: steady on a shared machine) and peak resident memory,
   beside `grep -c` on the same file (the peer: finding the Xid lines, nothing more). Targets: every corpus file
   right; the 1 GB log in <= 20 s of CPU with < 200 MB resident.
4. Long lines: the NCCL log classifier on one line of 100 KB and one of 1 MB holding a message's words but not the
   whole message (CPU seconds and their ratio: linear is about 10x), beside the catalogue's regex searched whole on
   lines of 2 KB and 4 KB (the peer: a search retried at every position, cubic with two wildcards). Target: the
   ratio under 20x.

Run: python bench/triage.py [--gb 1.0] [--rounds 5] [--keep]
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from rich.console import Console
from rich.table import Table

from gpufleet.nccl.diagnose import catalog, classify_line
from gpufleet.triage.run import triage_stream

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "corpus"
EXPECTED = ROOT / "tests" / "triage" / "data" / "corpus_verdicts.csv"
TARGET_S = 20.0
TARGET_RSS_MB = 200.0

# a node's everyday kernel and syslog traffic
NOISE = (
    "[{t:>12.6f}] IPv6: ADDRCONF(NETDEV_CHANGE): veth{n:x}: link becomes ready",
    "[{t:>12.6f}] cni0: port {p}(veth{n:x}) entered forwarding state",
    '[{t:>12.6f}] audit: type=1400 audit({t:.3f}:{n}): apparmor="DENIED" operation="open" profile="cri-containerd"',
    "[{t:>12.6f}] EXT4-fs (nvme0n1p{p}): mounted filesystem with ordered data mode. Quota mode: none.",
    "[{t:>12.6f}] eth0: renamed from veth{n:x}",
    "[{t:>12.6f}] Memory cgroup out of memory: Killed process {n} (python3) total-vm:{n}kB, anon-rss:{p}kB",
    "[{t:>12.6f}] nfs: server 10.0.{p}.1 not responding, still trying",
    "[{t:>12.6f}] TCP: request_sock_TCP: Possible SYN flooding on port {p}. Sending cookies.",
    "[{t:>12.6f}] overlayfs: upper fs does not support RENAME_WHITEOUT.",
    "[{t:>12.6f}] infiniband mlx5_{p}: mlx5_ib_event:{n}: mlx5_core port event",
)
FAULTS = (
    "[{t:>12.6f}] NVRM: Xid (PCI:0000:{b:02x}:00): 13, pid={n}, name=python3, Graphics SM Warp Exception on "
    "(GPC 9, TPC 1, SM 1): Out Of Range Address",
    "[{t:>12.6f}] NVRM: Xid (PCI:0000:{b:02x}:00): 43, pid={n}, name=python3, Ch 00000008",
    "[{t:>12.6f}] NVRM: Xid (PCI:0000:{b:02x}:00): 31, pid={n}, name=python3, Ch 0000000a, intr 00000000. "
    "MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f6b_9c000000. Fault is of type FAULT_PDE ACCESS_TYPE_READ",
)
FATAL = "[{t:>12.6f}] NVRM: Xid (PCI:0000:{b:02x}:00): 79, pid={n}, name=python3, GPU has fallen off the bus."


def write_kernel_log(path: Path, size: int, seed: int = 0) -> int:
    """A kernel log of about `size` bytes: one GPU fault line per 2,000 lines, one fallen-off-the-bus report
    near the end. Returns the number of lines."""
    rng = random.Random(seed)
    lines = 0
    t = 0.0
    written = 0
    with path.open("w") as out:
        while written < size:
            batch = []
            for _ in range(10_000):
                t += rng.random() * 0.01
                pattern = rng.choice(FAULTS) if rng.random() < 0.0005 else rng.choice(NOISE)
                batch.append(pattern.format(t=t, n=rng.randrange(1 << 20), p=rng.randrange(64), b=rng.randrange(256)))
            text = "\n".join(batch) + "\n"
            out.write(text)
            written += len(text)
            lines += len(batch)
        out.write(FATAL.format(t=t + 1, n=1, b=0x3B) + "\n")
    return lines + 1


def accuracy(console: Console) -> tuple[int, int]:
    rows = list(csv.DictReader(EXPECTED.open()))
    table = Table(title="Accuracy on the real captures")
    for col in ("file", "format", "verdict", "codes", "right"):
        table.add_column(col)
    right = 0
    present = 0
    for row in rows:
        path = CORPUS / row["file"]
        if not path.exists():
            continue
        present += 1
        with path.open("rb") as stream:
            report = triage_stream(stream, str(path))
        codes = {f.code for f in report.findings}
        want_codes = {c for c in row["codes"].split(";") if c}
        ok = report.format == row["format"] and report.verdict == row["verdict"] and want_codes <= codes
        right += ok
        shown = f"{report.verdict}" + ("" if report.verdict == row["verdict"] else f" (want {row['verdict']})")
        table.add_row(row["file"], report.format, shown, ";".join(sorted(want_codes)) or "-", "yes" if ok else "NO")
    console.print(table)
    return right, present


FIXTURES = (ROOT / "tests" / "triage" / "readers" / "data", ROOT / "tests" / "captures")


def _inputs() -> dict[str, list[tuple[str, bytes]]]:
    """Inputs by the format triage tells: the real captures, then the test fixtures for formats the captures lack
    (InfiniBand tools, kubectl, dcgmi health)."""
    by_format: dict[str, list[tuple[str, bytes]]] = {}
    for row in csv.DictReader(EXPECTED.open()):
        path = CORPUS / row["file"]
        if path.exists():
            by_format.setdefault(row["format"], []).append(("corpus", path.read_bytes()))
    for folder in FIXTURES:
        for path in sorted(folder.rglob("*")):
            if not path.is_file() or path.suffix in (".md", ".csv", ".py"):
                continue
            data = path.read_bytes()
            fmt = triage_stream(io.BytesIO(data), str(path)).format
            if fmt != "unknown" and not any(kind == "corpus" for kind, _ in by_format.get(fmt, [])):
                by_format.setdefault(fmt, []).append(("fixtures", data))
    return by_format


def speed(console: Console, rounds: int) -> None:
    table = Table(title=f"Speed per format (median of {rounds} rounds, one process)")
    for col in ("format", "from", "files", "KB", "files/s", "MB/s"):
        table.add_column(col, justify="left" if col in ("format", "from") else "right")
    for fmt, inputs in sorted(_inputs().items()):
        blobs = [data for _, data in inputs]
        size = sum(map(len, blobs))
        times = []
        for _ in range(rounds):
            start = time.perf_counter()
            for blob in blobs:
                triage_stream(io.BytesIO(blob), "bench")
            times.append(time.perf_counter() - start)
        took = statistics.median(times)
        row = [fmt, inputs[0][0], str(len(blobs)), f"{size / 1024:.0f}", f"{len(blobs) / took:.0f}"]
        table.add_row(*row, f"{size / took / 1e6:.1f}")
    console.print(table)


def _timed(cmd: list[str]) -> tuple[float, float, float, str]:
    """Wall seconds, CPU seconds (user + system) and peak resident MB of the child, and its stdout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    took = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return took, cpu, max(after.ru_maxrss, before.ru_maxrss) / 1024, done.stdout


def big_log(console: Console, gb: float, keep: bool) -> tuple[float, float]:
    folder = Path(tempfile.mkdtemp(prefix="triage-bench-"))
    path = folder / "kern.log"
    try:
        with console.status(f"writing a {gb:g} GB kernel log"):
            lines = write_kernel_log(path, int(gb * 1e9))
        size = path.stat().st_size
        gpufleet = shutil.which("gpufleet", path=str(Path(sys.executable).parent)) or "gpufleet"
        grep_s, grep_cpu, _, grep_out = _timed(["grep", "-c", "NVRM: Xid", str(path)])
        took, cpu, rss, out = _timed([gpufleet, "triage", str(path), "-o", "json"])
        verdict = out.split('"verdict": "', 1)[1].split('"', 1)[0] if '"verdict": "' in out else "?"
        table = Table(title=f"A {size / 1e9:.2f} GB kernel log ({lines:,} lines)")
        for col in ("reader", "seconds", "CPU s", "MB/s", "peak MB", "answer"):
            table.add_column(col, justify="right" if col not in ("reader", "answer") else "left")
        table.add_row("gpufleet triage", f"{took:.1f}", f"{cpu:.1f}", f"{size / took / 1e6:.0f}", f"{rss:.0f}",
                      verdict)  # fmt: skip
        table.add_row("grep -c 'NVRM: Xid' (peer)", f"{grep_s:.1f}", f"{grep_cpu:.2f}", f"{size / grep_s / 1e6:.0f}",
                      "-", f"{grep_out.strip()} lines")  # fmt: skip
        console.print(table)
        console.print(f"triage / grep time: {took / grep_s:.1f}x wall, {cpu / max(grep_cpu, 1e-3):.1f}x CPU")
        return cpu, rss
    finally:
        if keep:
            console.print(f"kept {path}")
        else:
            shutil.rmtree(folder, ignore_errors=True)


NEAR_MISS = "x: connect to y "  # every word of `(.*?): connect to (.*?) failed : (.*)` but "failed"
LONG_LINE_TARGET = 20.0


def _cpu_best(work: Callable[[], object], rounds: int = 3) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.process_time()
        work()
        best = min(best, time.process_time() - start)
    return max(best, 1e-6)


def long_lines(console: Console) -> float:
    """CPU seconds of the classifier on near-miss lines of 100 KB and 1 MB, and the whole regex on 2 and 4 KB."""
    whole = next(entry.regex.regex for entry in catalog() if entry.regex.pattern.startswith("(.*?): connect to"))
    table = Table(title="One long NCCL log line of near misses (CPU seconds, best of 3)")
    for col in ("matcher", "line", "seconds", "growth"):
        table.add_column(col, justify="left" if col == "matcher" else "right")
    times = {}
    for size in (100_000, 1_000_000):
        line = "h:1:1 [0] NCCL WARN " + NEAR_MISS * (size // len(NEAR_MISS))
        times[size] = _cpu_best(partial(classify_line, line))
    ratio = times[1_000_000] / times[100_000]
    table.add_row("classify_line (stretches)", "100 KB", f"{times[100_000]:.4f}", "")
    table.add_row("classify_line (stretches)", "1 MB", f"{times[1_000_000]:.4f}", f"{ratio:.1f}x for 10x")
    peer = {}
    for size in (2_000, 4_000):
        line = "h:1:1 [0] NCCL WARN " + NEAR_MISS * (size // len(NEAR_MISS))
        peer[size] = _cpu_best(partial(whole.search, line), rounds=1)
    table.add_row("one catalogue regex, whole (peer)", "2 KB", f"{peer[2_000]:.4f}", "")
    table.add_row("one catalogue regex, whole (peer)", "4 KB", f"{peer[4_000]:.4f}",
                  f"{peer[4_000] / peer[2_000]:.1f}x for 2x")  # fmt: skip
    console.print(table)
    return ratio


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--gb", type=float, default=1.0, help="size of the generated kernel log (0 skips it)")
    args.add_argument("--rounds", type=int, default=5)
    args.add_argument("--keep", action="store_true", help="keep the generated log")
    opts = args.parse_args()
    console = Console()
    os.environ.setdefault("COLUMNS", "160")
    right, present = accuracy(console)
    console.print(f"corpus: {right} of {present} right")
    speed(console, opts.rounds)
    ratio = long_lines(console)
    console.print(f"long lines: 1 MB / 100 KB = {ratio:.1f}x, target < {LONG_LINE_TARGET:.0f}x: "
                  f"{'met' if ratio < LONG_LINE_TARGET else 'NOT met'}")  # fmt: skip
    if opts.gb > 0:
        cpu, rss = big_log(console, opts.gb, opts.keep)
        met = cpu <= TARGET_S * opts.gb and rss < TARGET_RSS_MB
        console.print(f"target <= {TARGET_S * opts.gb:g} s of CPU ({TARGET_S:.0f} s per GB) and "
                      f"< {TARGET_RSS_MB:.0f} MB: {'met' if met else 'NOT met'}")  # fmt: skip


if __name__ == "__main__":
    main()
