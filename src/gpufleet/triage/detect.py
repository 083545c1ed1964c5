"""Which tool printed a text, told by its content (never by a file name): each format has lines only it prints,
scored over the first lines of the cleaned input; the best score wins, and nothing recognisable is `None`."""

from __future__ import annotations

import re
from collections.abc import Iterable
from itertools import islice

SAMPLE_LINES = 400

# format -> (pattern, weight); a pattern scores once however often it matches
SIGNS: dict[str, tuple[tuple[str, int], ...]] = {
    "kernel-log": (
        (r"NVRM: (?:Xid|GPU at PCI|A GPU crash dump|Last reset|os_)", 10),
        (r"nvidia-nvswitch\d*: SXid", 10),
        (r"\bNVRM:", 4),
        (r"^\s*\[\s*\d+\.\d{3,}\]", 6),
        (r"^\[\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}\]", 4),
        (r"^\w{3} [ \d]\d \d\d:\d\d:\d\d \S+ kernel:", 6),
        (r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\S* \S+ kernel:", 6),
    ),
    "nvidia-smi-q": (
        (r"^=+NVSMI LOG=+", 10),
        (r"^Attached GPUs\s+:", 8),
        (r"^GPU [0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d\s*$", 6),
        (r"^\s+Product Name\s+:", 3),
        (r"^\s+(?:Volatile|Aggregate)\s*$", 2),
        (r"^\s+ECC Errors\s*$", 4),
        (r"^\s+(?:SRAM|DRAM) (?:Correctable|Uncorrectable)\s+:", 4),
        (r"^\s+(?:Remapped Rows|Retired Pages|Clocks Event Reasons|Clocks Throttle Reasons)\s*$", 4),
    ),
    "nvidia-smi-table": (
        (r"NVIDIA-SMI \d+\.\d+", 8),
        (r"^\|\s*GPU\s+Name\s+Persistence-M", 8),
        (r"^\+-{5,}\+", 2),
        (r"^\|\s+\d+\s+.*(?:On|Off)\s+\|\s+[0-9A-Fa-f]{8}:", 4),
    ),
    "nvidia-smi-nvlink": (
        (r"^GPU \d+: .*\(UUID: GPU-", 4),
        (r"^\s+Link \d+: (?:\d+(?:\.\d+)? GB/s|<inactive>|Inactive)", 8),
    ),
    "nvidia-smi-topo": (
        (r"^\s*GPU0\s+GPU1", 6),
        (r"X\s+= Self", 8),
        (r"NV\d+\s+= Connection traversing a bonded set", 4),
    ),
    "dcgmi-diag": (
        (r"^\|\s*Diagnostic\s+\|\s*Result\s*\|", 10),
        (r"^\|-+\s*(?:Deployment|Hardware|Integration|Stress)\s*-+\|", 8),
        (r"^Successfully ran diagnostic", 6),
        (r"^\|\s*[\w /-]+?\s*\|\s*(?:Pass|Fail|Warn|Skip)(?:\s*-\s*GPUs?:\s*[\d, ]+)?\s*\|", 6),
        (r"^\|\s*(?:Warning|Error|Info)\s+\|\s*\S", 3),
    ),
    "dcgmi-health": (
        (r"^\|\s*Health Monitor Report", 10),
        (r"^\|\s*Overall Health\s*\|", 8),
    ),
    "dcgm-exporter-metrics": (
        (r"^# (?:HELP|TYPE) DCGM_", 10),
        (r"^DCGM_FI_[A-Z0-9_]+\{", 8),
    ),
    "nccl-log": (
        (r"NCCL (?:INFO|WARN)\b", 8),
        (r"\bNCCL version \d+\.\d+\.\d+", 4),
        (r"ProcessGroupNCCL|Watchdog caught collective operation timeout", 6),
    ),
    "nccl-tests": (
        (r"^# nThread \d+ nGpus \d+", 10),
        (r"^#\s+(?:size\s+count\s+type|\(B\)\s+\(elements\))", 8),
        (r"^# Avg bus bandwidth\s*:", 8),
        (r"out-of-place\s+in-place", 6),
    ),
    "ibstat": (
        (r"^CA '[^']+'", 8),
        (r"^\s+Port \d+:\s*$", 3),
        (r"^\s+Physical state: ", 4),
        (r"^\s+Link layer: ", 3),
    ),
    "ibstatus": (
        (r"^Infiniband device '[^']+' port \d+ status:", 10),
        (r"^\s+phys state:\s+\d+: ", 4),
    ),
    "perfquery": (
        (r"^# Port (?:extended )?counters: Lid \d+ port \d+", 10),
        (r"^PortSelect:\.+\d+", 6),
        (r"^(?:SymbolErrorCounter|PortXmitData|LinkDownedCounter):\.+", 4),
    ),
    "ibqueryerrors": (
        (r"^Errors for (?:0x[0-9a-f]+ )?\"", 8),
        (r"^\s+GUID 0x[0-9a-f]+ port \d+:", 8),
        (r"^## Summary: \d+ nodes checked", 10),
    ),
    "iblinkinfo": (
        (r"^(?:Switch|CA): 0x[0-9a-f]+ ", 8),
        (r"\d+\[\s*\]\s+==\(", 8),
    ),
    "ibnetdiscover": (
        (r"^# Topology file: generated on", 10),
        (r"^(?:Switch|Ca)\s+\d+ \"[SH]-[0-9a-f]+\"", 8),
        (r"^vendid=0x", 4),
        (r"^sysimgguid=0x", 4),
    ),
    "kubectl-node-json": (
        (r"\"kind\":\s*\"Node\"", 10),
        (r"\"nodeInfo\":\s*\{", 4),
        (r"\"allocatable\":\s*\{", 3),
    ),
    "kubectl-describe-node": (
        (r"^Name:\s+\S", 3),
        (r"^Roles:\s+", 6),
        (r"^Capacity:\s*$", 5),
        (r"^Allocatable:\s*$", 5),
        (r"^Conditions:\s*$", 3),
    ),
}
_COMPILED = {fmt: tuple((re.compile(p), w) for p, w in signs) for fmt, signs in SIGNS.items()}
MIN_SCORE = 6  # below this, nothing is sure enough to name

FORMATS = tuple(SIGNS)


class Detector:
    """Scores lines as they come, each line looked at once: a sign counts the first time any line shows it."""

    def __init__(self) -> None:
        self._unseen = [(fmt, pattern, w) for fmt, signs in _COMPILED.items() for pattern, w in signs]
        self.scores: dict[str, int] = {}

    def feed(self, line: str) -> None:
        hits = [sign for sign in self._unseen if sign[1].search(line)]
        for fmt, _, w in hits:
            self.scores[fmt] = self.scores.get(fmt, 0) + w
        if hits:
            self._unseen = [sign for sign in self._unseen if sign not in hits]

    def best(self) -> str | None:
        """The format scoring highest, or None when none is sure enough."""
        if not self.scores:
            return None
        fmt = max((f for f in FORMATS if f in self.scores), key=self.scores.__getitem__)  # a tie: the first listed
        return fmt if self.scores[fmt] >= MIN_SCORE else None


def detect(lines: Iterable[str]) -> str | None:
    """The format of a text from its first SAMPLE_LINES lines, or None when no format is sure enough."""
    detector = Detector()
    for line in islice(lines, SAMPLE_LINES):
        detector.feed(line)
    return detector.best()
