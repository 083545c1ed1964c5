"""Read the cost table NCCL prints with ``NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING`` (tuning.cc, rank 0)::

      Algorithm   |                   Tree                   |                   Ring                   | ...
      Protocol    |             LL |          LL128 |         Simple |             LL |          LL128 | ...
     Max NThreads |            512 |            640 |            512 |            512 |            640 | ...
        Broadcast |     0.0/   0.0 |     0.0/   0.0 |     0.0/   0.0 |     9.3/   2.4 |    ...

Each cell is latency (us) / bandwidth (GB/s). Given such a log, the model uses NCCL's exact numbers instead of
its own transcription (for the cells the log has).
"""

from __future__ import annotations

import re

from gpufleet.errors import ParseError
from gpufleet.nccl.constants import ALGOS, PROTOS

FUNC_KEYS = {
    "broadcast": "broadcast",
    "reduce": "reduce",
    "allgather": "allgather",
    "reducescatter": "reducescatter",
    "allreduce": "allreduce",
}
CELL = re.compile(r"^\s*(-?[\d.]+)\s*/\s*(-?[\d.]+)\s*$")

# (collective, algorithm, protocol, latency us, bandwidth GB/s)
TuningCell = tuple[str, str, str, float, float]


def _payload(line: str) -> str:
    i = line.find("NCCL INFO")
    return line[i + len("NCCL INFO") :] if i >= 0 else line


def parse_tuning_log(text: str) -> tuple[TuningCell, ...]:
    cells: dict[tuple[str, str, str], TuningCell] = {}
    algos: list[str] = []
    canonical = {a.lower(): a for a in ALGOS}
    for raw in text.splitlines():
        line = _payload(raw)
        parts = line.split("|")
        if len(parts) < 2:
            continue
        head = parts[0].strip()
        if head == "Algorithm":
            algos = [canonical[p.strip().lower()] for p in parts[1:] if p.strip().lower() in canonical]
            continue
        func = FUNC_KEYS.get(head.lower())
        if func is None or not algos:
            continue
        values = [CELL.match(p) for p in parts[1:] if p.strip()]
        for i, m in enumerate(values):
            if m is None or i // len(PROTOS) >= len(algos):
                continue
            algo, proto = algos[i // len(PROTOS)], PROTOS[i % len(PROTOS)]
            cells[(func, algo, proto)] = (func, algo, proto, float(m.group(1)), float(m.group(2)))
    if not cells:
        raise ParseError(
            "no NCCL tuning table found",
            fix="capture rank 0's log with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING (NCCL >= 2.18)",
        )
    return tuple(cells.values())
