"""Kernel-log parsing throughput: gpufleet's full parser against a grep-style baseline, on corpus captures.

The baseline is the single regex peer tools use to spot Xids (`NVRM: Xid.*?: (\\d+),`, as in GPUd's README):
it finds the code and nothing else. gpufleet's parser also reads the frame (time, host), PCI, pid/name, root
Xid, NVLink5 registers, SXids and multi-line reports, and rejects malformed lines. The target is a day of a
busy node's kernel log (about a million lines) in under 10 s on one core, i.e. at least 100,000 lines/s, judged on
the CPU time of this process (a shared machine's wall time says more about its other users); wall time is shown too.

Run: python bench/kmsg_parse.py
"""

from __future__ import annotations

import re
import statistics
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from gpufleet.parsers.kernel.kmsg import scan_kmsg

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "corpus"
BASELINE = re.compile(r"NVRM: Xid.*?: (\d+),")
TARGET_LINES_PER_S = 100_000
REPEATS = 5


def corpus_lines() -> list[str]:
    lines: list[str] = []
    for path in sorted(CORPUS.glob("*.log")):
        lines.extend(path.read_text().splitlines())
    return lines


def fault_dense_log(lines_wanted: int) -> list[str]:
    """The corpus kernel logs as they are (Xid bursts, RPC-history tables, SXids): about 40 % fault lines."""
    source = corpus_lines()
    return (source * (lines_wanted // len(source) + 1))[:lines_wanted]


def realistic_log(lines_wanted: int, noise_per_fault: int = 99) -> list[str]:
    """Each corpus fault line followed by `noise_per_fault` of the corpus's other kernel lines (OOM killer,
    clocksource, stack traces, systemd): one fault line in a hundred, closer to a production node's log."""
    source = corpus_lines()
    faults = [line for line in source if BASELINE.search(line) or "SXid" in line]
    noise = [line for line in source if "NVRM" not in line and "SXid" not in line]
    out: list[str] = []
    i = j = 0
    while len(out) < lines_wanted:
        out.append(faults[i % len(faults)])
        for _ in range(noise_per_fault):
            out.append(noise[j % len(noise)])
            j += 1
        i += 1
    return out[:lines_wanted]


def time_it(fn: object, lines: list[str]) -> tuple[float, float, int]:
    """Median wall seconds, median CPU seconds, and what `fn` found."""
    runs = []
    cpu = []
    found = 0
    for _ in range(REPEATS):
        start, start_cpu = time.perf_counter(), time.process_time()
        found = fn(lines)  # type: ignore[operator]
        runs.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return statistics.median(runs), statistics.median(cpu), found


def gpufleet(lines: list[str]) -> int:
    return len(scan_kmsg(lines).events)


def baseline(lines: list[str]) -> int:
    return sum(1 for line in lines if BASELINE.search(line))


def main() -> int:
    if not CORPUS.is_dir():
        print(f"corpus not found at {CORPUS}", file=sys.stderr)
        return 2
    table = Table(title=f"kernel-log parsing, median of {REPEATS} runs")
    for col in (
        "log",
        "parser",
        "lines",
        "median s",
        "CPU s",
        "lines/s (CPU)",
        "events",
        "CPU vs baseline",
        "target",
        "meets target",
    ):
        table.add_column(col)
    for label, lines in (
        ("fault-dense (corpus as is)", fault_dense_log(200_000)),
        ("realistic (1 % fault lines)", realistic_log(500_000)),
    ):
        ours_s, ours_cpu, ours_n = time_it(gpufleet, lines)
        base_s, base_cpu, base_n = time_it(baseline, lines)
        ours_rate, base_rate = len(lines) / ours_cpu, len(lines) / base_cpu
        table.add_row(
            label,
            "gpufleet scan_kmsg",
            f"{len(lines):,}",
            f"{ours_s:.3f}",
            f"{ours_cpu:.3f}",
            f"{ours_rate:,.0f}",
            f"{ours_n:,}",
            f"{ours_cpu / base_cpu:.1f}x",
            f"{TARGET_LINES_PER_S:,}/s",
            "yes" if ours_rate >= TARGET_LINES_PER_S else "NO",
        )
        table.add_row(
            "",
            "baseline regex (code only)",
            f"{len(lines):,}",
            f"{base_s:.3f}",
            f"{base_cpu:.3f}",
            f"{base_rate:,.0f}",
            f"{base_n:,}",
            "1.0x",
            "",
            "",
        )
    Console().print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
