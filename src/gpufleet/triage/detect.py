"""Which tool printed a text, told by its content (never by a file name): each format has lines only it prints,
scored over the first lines of the cleaned input; the best score wins, and nothing recognisable is `None`."""

from __future__ import annotations

import re
from collections.abc import Iterable
from itertools import islice

SAMPLE_LINES = 400
SIGN_CHARS = 1024  # a sign is in a line's first characters; a longer line is not scanned whole by every pattern

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
        # a syslog or journal line of any program, and the link events its reader counts
        (r"^(?:\w{3} [ \d]\d \d\d:\d\d:\d\d|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\S*) [\w.-]+ [\w.@-]+(?:\[\d+\])?: ", 3),
        (r": (?:lost carrier|Gained carrier)$|mlx5_core \S+ \S+: Link (?:up|down)\b", 6),
        # the OOM killer's report (mm/oom_kill.c, mm/memcontrol.c): a kill, its constraint line, who invoked it
        (r"(?:Memory cgroup out of memory|Out of memory): Kill(?:ed)? process \d+|oom-kill:constraint=", 8),
        (r"\binvoked oom-killer: |oom_reaper: reaped process \d+", 6),
    ),
    "nvidia-smi-q": (
        (r"^=+NVSMI LOG=+", 10),
        (r"^Attached GPUs\s+:", 8),
        (r"^GPU [0-9A-Fa-fXx]{4,8}:(?:[0-9A-Fa-fXx]{2}:[0-9A-Fa-fXx]{2}\.[\dXx]|\.\.\.)\s*$", 6),
        (r"^\s*Product Name\s+:", 3),
        (r"^\s+(?:Volatile|Aggregate)\s*$", 2),
        (r"^\s*ECC Errors\s*$", 4),
        (r"^\s*(?:SRAM|DRAM) (?:Correctable|Uncorrectable)\s+:", 4),
        (r"^\s*(?:Remapped Rows|Retired Pages|Clocks Event Reasons|Clocks Throttle Reasons)\s*$", 4),
        (r"^\s*<nvidia_smi_log>", 10),  # -q -x
    ),
    "nvidia-smi-table": (
        (r"NVIDIA-SMI \d+\.\d+", 8),
        (r"^\|\s*GPU\s+Name\s+Persistence-M", 8),
        (r"^\+-{5,}\+", 2),
        (r"^\|\s+\d+\s+.*(?:On|Off)\s+\|\s+[0-9A-Fa-f]{8}:", 4),
        (r"^\|\s*(?:\d+%|N/A|ERR!)\s+(?:-?\d+C|N/A|ERR!)\s+(?:P\d+|N/A|ERR!)\s+[^\s/|]+\s*/\s*[^\s|]+\s*\|", 6),
    ),
    "nvidia-smi-nvlink": (
        (r"^GPU \d+: .*\(UUID: GPU-", 4),
        (r"^\s*Link \d+: (?:\d+(?:\.\d+)? ?GB/s|(?i:<inactive>|inactive)|ERR!)\s*$", 8),
        (r"(?i)^NVML: Unable to retrieve NVLink information as all links are inactive", 8),
        (r"(?i)^Device does not have or support NVLink", 6),
    ),
    "nvidia-smi-topo": (
        (r"^\s*GPU0\s+(?:GPU1|NIC0|mlx\d+_\d+|CPU Affinity)", 6),
        (r"^GPU\d+\s+(?:X|NV\d+|PIX|PXB|PHB|NODE|SYS)\s+(?:X|NV\d+|PIX|PXB|PHB|NODE|SYS)\b", 6),
        (r"X\s+= Self", 8),
        (r"NV\d+\s+= Connection traversing a bonded set", 4),
    ),
    # dcgmi/Diag.cpp (2.x-4.x): the table's header, its category rows, result rows (`Pass - All`, `Fail - GPU: 0`,
    # 4.x `GPU0: Pass`), message rows, and dcgmi's own failures when it prints no table
    "dcgmi-diag": (
        (r"^\|\s*Diagnostic\s+\|\s*Result\s*\|", 10),
        (r"^[|+]-+\s+(?:Metadata|Deployment|Hardware|Integration|Stress|Training)\s+-+\+", 8),
        (r"^Successfully ran diagnostic", 6),
        (r"^\| [\w /-]{1,40}\| (?:Pass|Fail|Warn|Skip|Not Run)(?: - (?:All|GPUs?: [\d, ]{1,60}))? {0,50}\|", 6),
        (r"^\|\s+\|\s*(?:GPU|CPU)\d+:\s*(?:Pass|Fail|Warn|Skip|Not Run)\s*\|", 6),
        (r"^\|\s*(?:Warning|Error|Info)(?::\s*(?:GPU|CPU)\d+)?\s+\|\s*\S", 3),
        (r"^Error: (?:Unable to complete diagnostic|Diagnostic (?:could not be run|can only be performed))", 8),
        (r"^\s*\"DCGM (?:GPU )?Diagnostic\"\s*:", 10),  # `dcgmi diag -j` (NvvsJsonStrings.h NVVS_NAME)
        (r"^\s*\"test_categories\"\s*:", 4),
    ),
    # dcgmi/Health.cpp (2.x-4.x): `dcgmi health -c` (and `-f`, the list of watches), or its own failure
    "dcgmi-health": (
        (r"^\|\s*Health Monitor Report", 10),
        (r"^\|\s*Overall Health\s*\|", 8),
        (r"^\|\s*Health monitor systems report", 10),
        (r"^\| {1,12}-> (?:Errors|\d+) {1,40}\|", 4),
        (r"^Error: (?:Unable to check health watches|Health watches not enabled)", 8),
    ),
    # dcgm-exporter's /metrics (rendermetrics templates), and the 1.x `dcgm_*` names
    "dcgm-exporter-metrics": (
        (r"^# (?:HELP|TYPE) DCGM_", 10),
        (r"^DCGM_(?:FI|EXP)_[A-Z0-9_]+\{", 8),
        (r"^# (?:HELP|TYPE) dcgm_[a-z0-9_]+ ", 6),
        (r"^dcgm_[a-z0-9_]+\{[^}]*\bgpu=\"", 6),
    ),
    "nccl-log": (
        (r"NCCL (?:INFO|WARN)\b", 8),
        # NCCL before 2.1 printed `host:pid:tid [dev] INFO ...` without its name
        (r"^[\w.-]+:\d+:\d+ \[\d+\] (?:INFO|WARN) ", 8),
        (r"\bNCCL version \d+\.\d+\.\d+", 4),
        (r"ProcessGroupNCCL|Watchdog caught collective operation timeout", 6),
    ),
    "nccl-tests": (
        (r"^#? ?nThread \d+ nGpus \d+", 10),
        (r"^#?\s+(?:size\s+count\s+type|\(B\)\s+\(elements\))", 8),
        (r"^#? ?Avg bus bandwidth\s*:", 8),
        (r"out-of-place\s+in-place", 6),
        (r"^# (?:nccl-tests version|Collective test (?:starting|concluded):)", 10),
        (r"^#? ?Out of bounds values\s*:", 6),
        (r"^#?\s+Rank\s+\d+\s+(?:Group\s+\d+\s+)?(?:Pid\s+\d+\s+)?on\s+\S+\s+device\s+\d+\s+\[", 8),
        # a row: size, count, type, redop, root, then time and bandwidths
        (
            r"^\s*\d+\s+\d+\s+(?:u?int(?:8|32|64)?|half|b?float(?:16)?|double|char|f8e[45]m[23])\s+"
            r"(?:(?:sum|prod|max|min|avg|mulsum|none)\s+)?-?\d+\s+\d+(?:\.\d+)?\s+\d+\.\d+\s",
            8,
        ),
    ),
    "ibstat": (
        (r"^(?:CA|Switch|Router) '[^']+'\s*$", 8),
        (r"^(?:CA|Switch|Router): '[^']+'\s*$", 8),  # `ibstat <ca> <port>`
        (r"^\s*(?:CA|Switch|Router) type: ", 4),
        (r"^\s*Port \d+:\s*$", 3),
        (r"^\s*Physical state: ", 4),
        (r"^\s*Link layer: ", 3),
        (r"^\s*Port GUID: 0x[0-9a-fA-F]+", 3),
    ),
    "ibstatus": (
        (r"^Infiniband device '[^']+' port \S+ status:", 10),
        (r"^\s+phys state:\s+\d+: ", 4),
        (r"^\s+rate:\s+\d+(?:\.\d+)? Gb/sec", 4),
        (r"^\s+default gid:\s", 3),
    ),
    "perfquery": (
        (r"^# Port (?:extended )?counters: .*\bport \d+", 10),
        (r"^# Port\w+(?: counters)?: .*\bport \d+", 8),  # -E, -D and the other attributes
        (r"^PortSelect:\.+\d+", 6),
        (r"^(?:SymbolErrorCounter|PortXmitData|LinkDownedCounter|SymbolErrors|XmtData|LinkDowned):\.+", 4),
        # libibmad's dotted fields, for an excerpt without the header
        (
            r"^(?:Port[A-Z]\w+|SymbolError\w*|Link\w+(?:Counter|Errors|Recovers|Downed)|ExcessiveBuffer\w+|"
            r"ExcBufOverrunErrors|VL15Dropped|QP1Dropped|(?:Xmt|Rcv)\w+):\.{2,}\d+\s*$",
            6,
        ),
        (r"^perfquery: iberror: ", 10),
    ),
    "ibqueryerrors": (
        (r"^(?:Errors|Data Counters) for\s+(?:0x[0-9a-fA-F]+\s+)?\"", 8),
        (r"^\s+GUID 0x[0-9a-fA-F]+ port (?:\d+|ALL):", 8),
        (r"^## Summary: \d+ nodes checked", 10),
        (r"^##\s+\d+ ports checked, \d+ ports have errors", 6),
    ),
    "iblinkinfo": (
        (r"^(?:Switch|CA|Router):? (?:0x[0-9a-fA-F]+ )?\S.*:\s*$", 4),
        (r"^(?:Switch|CA|Router): 0x[0-9a-fA-F]+ ", 4),
        (r"\d+\[[\s\d]*\]\s+==\(", 8),
    ),
    "ibnetdiscover": (
        (r"^# Topology file: generated on", 10),
        (r"^(?:Switch|Ca|Rt)\s+\d+ \"[SHR]-[0-9a-fA-F]+\"", 8),
        (r"^\[\d+\](?:\[ext \d+\])?(?:\([0-9a-fA-F]+\))?\s+\"[SHR]-[0-9a-fA-F]+\"\[\d+\]", 6),
        (r"^vendid=0x", 4),
        (r"^sysimgguid=0x", 4),
        # `ibnetdiscover -p`: one port a line, with its far end or its own name
        (r"^(?:CA|SW|RT)\s+\d+\s+\d+\s+0x[0-9a-fA-F]{16} (?:\d+x|\?\?) \S+\s+(?:- (?:CA|SW|RT)\s|')", 8),
    ),
    "kubectl-node-json": (
        (r"\"kind\":\s*\"Node\"", 10),
        (r"\"nodeInfo\":\s*\{", 4),
        (r"\"allocatable\":\s*\{", 3),
        (r"\"lastHeartbeatTime\":\s*\"", 4),
    ),
    "kubectl-pod-json": (
        (r"\"kind\":\s*\"Pod\"", 10),
        (r"\"containerStatuses\":\s*\[", 6),  # a Pod's fields without its kind, as other tools copy them
        (r"\"restartCount\":\s*\d", 3),
        (r"\"lastState\":\s*\{", 3),
        (r"\"qosClass\":\s*\"", 3),
    ),
    "kubectl-describe-node": (
        (r"^Name:\s+\S", 3),
        (r"^Roles:\s+", 6),
        (r"^Capacity:\s*$", 5),
        (r"^Allocatable:\s*$", 5),
        (r"^Conditions:\s*$", 3),
        (r"^Unschedulable:\s+(?:true|false)\s*$", 6),
        (r"^\s+Type\s+Status\s+LastHeartbeatTime\s+LastTransitionTime", 8),  # only a node's conditions have these
    ),
    # an application's own log: told only by an out-of-memory report, each framework's wording (readers/oom.py), so
    # it never outscores a format with signs of its own (an NCCL log with an OOM line stays an NCCL log); listed
    # last, it loses ties
    "app-log": (
        (
            r"(?:CUDA|HIP) out of memory\.(?:\*\*)? Tried to allocate|CUDA error: out of memory|RESOURCE_EXHAUSTED: "
            r"Out of memory|Resource exhausted: Out of memory while|OOM when allocating tensor|No available memory "
            r"for the cache blocks|KV cache is needed, which is larger than|Cuda failure (?:2 )?'out of memory'",
            7,
        ),
        (r"Detected \d+ oom[-_]kill events? in |srun: error: \S+: tasks? [\d,-]+: Out Of Memory", 7),  # Slurm
        (r"^\W{0,3}(?:\[\w+(?:,\d+)?\](?:<std\w+>)?:\s*)*Traceback \(most recent call last\)", 1),
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
        line = line[:SIGN_CHARS]
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
