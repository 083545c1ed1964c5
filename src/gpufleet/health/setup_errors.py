"""The one judgement of a setup error in a log line (catalog/data/setup_errors.yaml: a driver, a CUDA runtime and a
GPU architecture that do not fit together): which fault the line reports, how bad it is, and what it names (the
CUDA version an image requires and the driver that version needs, the GPU's compute capability). `gpufleet triage`
of an application's log and of a pod's events read lines through this.

A line that only talks about an error is not a report of it: the text must stand where a program prints it (at the
line's start, after a colon, a bracket, an arrow, an error code or an identifier such as `cudaGetDeviceCount`), not
after a quote or in a sentence (`if you see "no kernel image is available ..."`, `fails with no kernel image ...`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpufleet.catalog.setup_errors import SetupError, find_setup_errors
from gpufleet.health.thresholds import load_thresholds
from gpufleet.model import Severity

# where a report of the text may stand: nothing before it, or a non-word character that is not a quote, a number
# (`returned 35`), an error word (CUDA samples' `(error code <text>)!`), or an identifier (`cudaGetDeviceCount`,
# `CUDA_ERROR_X`)
_REPORTED_AFTER = re.compile(
    r"(?:^|[^\w\s\"'`\u201c\u2018]|\d|\b(?:[Ee]rror|ERROR|[Ff]ailure|[Ff]ailed|FAILED|[Ss]tatus|stderr|error code)"
    r"|\b[A-Za-z]*_\w+|\b[a-z]+[A-Z]\w*)\s*$"
)
_QUOTES = ('"', "'", "`", "\u201c", "\u2018")
# the words a tool prints before an error's text (`nvidia-container-cli: `, `RuntimeError: CUDA error: `)
_LEAD = re.compile(r"[\w.-]+(?: [\w.-]+){0,3}:\s*$")
MAX_LEADS = 8
LOOK_BACK = 200  # characters before the text that decide whether it is quoted
# nvidia-smi missing in a script is not by itself a failed program: the GPU work may still run (or fail on its own)
_WARNING_ONLY = frozenset({"nvidia-smi-missing"})

_CONDITION = re.compile(r"unsatisfied condition: (?P<cond>[^,\\\"\n]+?)\s*(?:,|\\|\"|$| \()")
_CUDA_AT_LEAST = re.compile(r"^cuda\s*>=?\s*(?P<version>\d+\.\d+)")
_TOO_OLD = re.compile(r"too old \(found version (?P<version>\d+)\)")
_CAPABILITY = re.compile(
    r"(?P<name>[\w.()-]+(?: [\w.()-]+){0,7})?\s*with CUDA capability (?P<sm>sm_\d+) is not compatible"
)


@dataclass(slots=True)
class SetupIssue:
    error: SetupError
    severity: Severity
    details: list[str] = field(default_factory=list)  # what the line names: "the image requires cuda>=12.8"
    filled: str = ""  # what the tool filled in for the message's %s (the requirement: `cuda>=12.8`)

    @property
    def id(self) -> str:
        return self.error.id

    @property
    def text(self) -> str:
        """The error's message as this line printed it."""
        return self.error.message.replace("%s", self.filled or "...")


def reported(line: str, match: re.Match[str]) -> bool:
    """Whether the matched text stands where a program prints an error, not quoted or in a sentence. A quote right
    before it, or before the tool's words that lead it (`"nvidia-container-cli: requirement error: ...`,
    `'RuntimeError: CUDA error: ...`), makes it a quotation."""
    before = line[max(0, match.start() - LOOK_BACK) : match.start()]
    if before.rstrip().endswith(_QUOTES) or _without_lead(before).rstrip().endswith(_QUOTES):
        return False
    return _REPORTED_AFTER.search(before) is not None


def _without_lead(before: str) -> str:
    """The text before an error's words without the tool's words that lead them, one `word(s):` at a time (a
    repeated group in one pattern backtracks for seconds over a long line of words)."""
    for _ in range(MAX_LEADS):
        m = _LEAD.search(before)
        if m is None:
            break
        before = before[: m.start()]
    return before


def judge_setup_line(line: str) -> SetupIssue | None:
    """The setup error a log line reports, or None (no catalog text, or only a mention of one)."""
    # the first place the text stands as a report: a line may quote it before it prints it
    error = next((e for e, match in find_setup_errors(line) if reported(line, match)), None)
    if error is None:
        return None
    issue = SetupIssue(error, Severity.warning if error.id in _WARNING_ONLY else Severity.critical)
    issue.details.extend(_details(error.id, line))
    if error.id == "cuda-requirement-unsatisfied" and (m := _CONDITION.search(line)):
        issue.filled = m["cond"].strip()
    return issue


def _details(error_id: str, line: str) -> list[str]:
    if error_id == "cuda-requirement-unsatisfied" and (m := _CONDITION.search(line)):
        condition = m["cond"].strip()
        said = [f"the image requires {condition}"]
        if (cuda := _CUDA_AT_LEAST.match(condition.replace(" ", ""))) and (driver := min_driver(cuda["version"])):
            said.append(f"CUDA {cuda['version']} needs driver {driver} or newer")
        return said
    if error_id == "insufficient-driver" and (m := _TOO_OLD.search(line)):
        version = int(m["version"])  # cudaDriverGetVersion: 1000 * major + 10 * minor
        return [f"the driver supports CUDA {version // 1000}.{version % 1000 // 10} at most"]
    if error_id == "no-kernel-image" and (m := _CAPABILITY.search(line)):
        name = m["name"].strip()
        return [f"{name + ' ' if name else ''}is compute capability {m['sm']}, which the build does not carry"]
    return []


def min_driver(cuda: str) -> str | None:
    """The oldest Linux driver that runs CUDA `cuda` natively (health/data/thresholds.yaml software.cuda_min_driver)."""
    return load_thresholds().software.cuda_min_driver.get(cuda)


_ARCH_LIST = re.compile(r"supports CUDA capabilities (?P<archs>sm_\d+(?:\s+sm_\d+)*)")


def supported_archs(line: str) -> str | None:
    """PyTorch's `The current PyTorch install supports CUDA capabilities sm_50 sm_60 ...`: the list, or None."""
    m = _ARCH_LIST.search(line)
    return " ".join(m["archs"].split()) if m else None
