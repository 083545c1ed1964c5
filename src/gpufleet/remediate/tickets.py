"""Repair and RMA tickets, and notices: JSON files in a directory or a webhook POST. Each carries the GPU serial."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from pathlib import Path

from gpufleet.errors import BackendError
from gpufleet.private_files import private_dir, write_private


@dataclass(slots=True)
class Ticket:
    id: str  # incident id + step id: filing twice for the same incident gives the same ticket
    kind: str  # rma, repair, notice
    created: float
    incident: str
    cause: str
    severity: str
    node: str
    gpu: int | None
    serial: str | None
    xid: int | None
    summary: str
    message: str = ""
    evidence: list[str] = field(default_factory=list)
    effects: list[str] = field(default_factory=list)
    actions_taken: list[str] = field(default_factory=list)


class TicketSink(ABC):
    @abstractmethod
    def file(self, ticket: Ticket) -> str:
        """File the ticket; return where it went. Filing the same id again must not open a second ticket."""


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


class FileTicketSink(TicketSink):
    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory)

    def file(self, ticket: Ticket) -> str:
        private_dir(self.directory)
        path = self.directory / f"{_safe(ticket.id)}.json"
        if path.exists():
            return f"{path} (already filed)"
        write_private(path, json.dumps(asdict(ticket), indent=2) + "\n")  # whole, and its owner's only
        return str(path)

    def tickets(self) -> list[Ticket]:
        if not self.directory.is_dir():
            return []
        return [Ticket(**json.loads(p.read_text())) for p in sorted(self.directory.glob("*.json"))]


class WebhookTicketSink(TicketSink):
    """POST the ticket as JSON. The receiver dedupes on the `Idempotency-Key` header (the ticket id)."""

    def __init__(self, url: str, timeout_s: float = 10.0) -> None:
        self.url = url
        self.timeout_s = timeout_s

    def file(self, ticket: Ticket) -> str:
        body = json.dumps(asdict(ticket)).encode()
        req = urllib.request.Request(
            self.url,
            data=body,
            method="POST",
            headers={"Content-Type": "application/json", "Idempotency-Key": ticket.id},
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                return f"{self.url} -> HTTP {resp.status}"
        except (urllib.error.URLError, OSError) as exc:
            raise BackendError(f"ticket webhook {self.url} failed: {exc}") from None
