"""The remediation policy in force, with what it names: its extra runbook files and its ticket sink.

One reading for the control plane (`gpufleet server --policy`) and the CLI (`gpufleet remediate apply --policy`), so
a policy rehearsed with `gpufleet remediate replay --policy` acts the same once enabled.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpufleet.remediate.config import RemediationPolicy, load_policy
from gpufleet.remediate.runbook import RunbookSet, load_runbooks
from gpufleet.remediate.tickets import FileTicketSink, TicketSink, WebhookTicketSink


@dataclass(frozen=True)
class InForce:
    policy: RemediationPolicy
    runbooks: RunbookSet
    tickets: TicketSink | None


def in_force(path: Path | None, state_dir: Path | None) -> InForce:
    """The policy at `path` (the built-in defaults without one); its runbook files are read relative to it, and
    its tickets go to its webhook, its directory, or `state_dir`/tickets (none when there is no such place)."""
    policy = load_policy(path) if path is not None else RemediationPolicy()
    runbooks = RunbookSet.builtin()
    for extra in policy.spec.runbooks:
        runbooks.extend(load_runbooks((path.parent if path is not None else Path.cwd()) / extra))
    t = policy.spec.tickets
    tickets: TicketSink | None
    if t.webhook:
        tickets = WebhookTicketSink(t.webhook)
    elif t.directory or state_dir is not None:
        tickets = FileTicketSink(Path(t.directory) if t.directory else Path(state_dir or ".") / "tickets")
    else:
        tickets = None
    return InForce(policy, runbooks, tickets)
