"""Azure HPC node health checks (aznhc / LBNL NHC) `.health.log` lines: `node | Healthy` or `node | ERROR:
...`.

A failed check names itself (`check_gpu_xid: ...`) when NHC ran it; an Xid the check quotes is parsed into
kernel events, so it lands in the same pipeline as the node's own kernel log.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpufleet.errors import ParseError
from gpufleet.parsers.kernel.kmsg import KernelEvent, parse_kmsg

_LINE = re.compile(r"^(?P<node>[^|\s]+)\s*\|\s*(?P<status>.*)$")
_FAILED = re.compile(r"^ERROR:\s*(?:nhc:\s*)?(?:Health check failed:\s*)?(?P<detail>.*)$")
_CHECK = re.compile(r"^(?P<check>check_\w+):\s*(?P<message>.*)$")


@dataclass
class NodeHealth:
    node: str
    healthy: bool
    check: str | None = None  # the NHC check that failed, when the line names it
    message: str = ""
    kernel_events: list[KernelEvent] = field(default_factory=list)


def _quoted_kernel_line(message: str) -> str:
    """The kernel-log line a check quotes, from its `[ uptime]` stamp (if any) on."""
    at = message.find("NVRM:")
    if at < 0:
        return ""
    stamp = message.rfind("[", 0, at)
    return message[stamp if stamp >= 0 else at :]


def parse_health_log(text: str, *, source: str = "health.log") -> list[NodeHealth]:
    results: list[NodeHealth] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        match = _LINE.match(line.strip())
        if match is None:
            raise ParseError(
                f"{source}:{lineno}: expected `node | status`, got {line.strip()[:60]!r}", fix="pass an NHC .health.log"
            )
        node, status = match.group("node"), match.group("status").strip()
        if status.lower() == "healthy":
            results.append(NodeHealth(node, True))
            continue
        failed = _FAILED.match(status)
        if failed is None:
            raise ParseError(
                f"{source}:{lineno}: status is neither Healthy nor ERROR: {status[:60]!r}",
                fix="pass an NHC .health.log",
            )
        detail = failed.group("detail").strip()
        check = _CHECK.match(detail)
        message = check.group("message") if check else detail
        results.append(
            NodeHealth(
                node=node,
                healthy=False,
                check=check.group("check") if check else None,
                message=message,
                kernel_events=parse_kmsg(_quoted_kernel_line(message), host=node),
            )
        )
    return results
