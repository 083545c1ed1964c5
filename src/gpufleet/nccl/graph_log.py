"""Read NCCL's own topology-search results from an ``NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=GRAPH`` log.

``ncclTopoPrintGraph`` prints one line per searched graph::

    NCCL INFO Pattern 4, crossNic 0, nChannels 12, bw 30.000000/30.000000, type NVL/PIX, sameChannels 1

Patterns (graph.h): 1 balanced tree, 2 split tree, 3 tree, 4 ring, 5 NVLS, 6 CollNet direct. When a log is
given, these replace the derived search results for the algorithms they cover.
"""

from __future__ import annotations

import re

from gpufleet.errors import ParseError

GRAPH_LINE = re.compile(
    r"Pattern (\d+), crossNic \d+, nChannels (\d+), bw ([\d.]+)/([\d.]+), type (\w+)/(\w+), sameChannels (\d)"
)
PATTERN_ALGOS = {1: "Tree", 2: "Tree", 3: "Tree", 4: "Ring", 5: "NVLS", 6: "CollNetDirect"}

# (algo, nChannels, bwIntra, bwInter, typeIntra, typeInter, sameChannels, plain TREE pattern)
GraphOverride = tuple[str, int, float, float, str, str, bool, bool]


def parse_graph_log(text: str) -> tuple[GraphOverride, ...]:
    """The first graph printed for each algorithm (rank 0 prints them in search order)."""
    found: dict[str, GraphOverride] = {}
    for line in text.splitlines():
        m = GRAPH_LINE.search(line)
        if not m:
            continue
        pattern = int(m.group(1))
        algo = PATTERN_ALGOS.get(pattern)
        if algo is None or algo in found:
            continue
        found[algo] = (
            algo,
            int(m.group(2)),
            float(m.group(3)),
            float(m.group(4)),
            m.group(5),
            m.group(6),
            m.group(7) == "1",
            pattern == 3,
        )
    if not found:
        raise ParseError(
            "no 'Pattern N, crossNic N, nChannels N, bw X/Y, type A/B' lines found",
            fix="capture the log with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,GRAPH",
        )
    return tuple(found.values())
