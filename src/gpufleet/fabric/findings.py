"""What the fabric checks report: one finding per problem, naming the cable (both ends) or the port."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpufleet.fabric.graph import End
from gpufleet.model import Severity


@dataclass(frozen=True, slots=True)
class FabricFinding:
    kind: str  # missing-link, miscabled, link-width, link-speed, duplicate-guid, link-down, symbol-errors, ...
    severity: Severity
    message: str
    fix: str
    ends: tuple[End, End] | None = None  # a cable
    port: End | None = None  # one port
    action: str = ""  # what remediation may do about it: isolate-port, or nothing
    source: str = ""  # where the fact behind the verdict is documented (settings findings)

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"kind": self.kind, "severity": str(self.severity)}
        if self.ends is not None:
            body["ends"] = [str(self.ends[0]), str(self.ends[1])]
        if self.port is not None:
            body["port"] = str(self.port)
        body["message"] = self.message
        body["fix"] = self.fix
        if self.action:
            body["action"] = self.action
        if self.source:
            body["source"] = self.source
        return body

    @property
    def key(self) -> str:
        """Stable across polls: the same problem on the same ports is the same finding."""
        where = f"{self.ends[0]}|{self.ends[1]}" if self.ends else str(self.port or "")
        return f"{self.kind}:{where}"


def worst_first(findings: list[FabricFinding]) -> list[FabricFinding]:
    return sorted(findings, key=lambda f: (-f.severity.rank, f.kind, f.key))
