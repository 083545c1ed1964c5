"""Actions the control plane asks a node's agent to carry out on its own node, and what the agent answers.

Some remedies are not API operations of any scheduler: resetting one GPU (`nvidia-smi -r`), rebooting the node,
capping GPU power, restarting the NVIDIA persistence or fabric-manager daemon, running DCGM's diagnostics. The
control plane queues them per node; the node's agent pulls them in the acknowledgement of its own authenticated push
and reports each result in a later push (docs/wire.md, "Node actions"). Both sides key an action by its `id`, so it
runs at most once whatever restarts, and its result reaches the control plane at least once.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal, get_args

import msgspec

Name = Annotated[str, msgspec.Meta(min_length=1, max_length=253)]
Short = Annotated[str, msgspec.Meta(max_length=256)]
Text = Annotated[str, msgspec.Meta(max_length=4096)]
Output = Annotated[str, msgspec.Meta(max_length=65_536)]
MAX_OUTPUT = 65_536  # a result's command output is cut to this many characters (the end kept: that is where it fails)


class NodeActionKind(StrEnum):
    reset_gpu = "reset-gpu"
    reboot_node = "reboot-node"
    power_cap = "power-cap"
    restart_service = "restart-service"
    diag = "diag"


# The daemons an agent restarts on request; nothing else (a queue that could name any unit would be a remote shell).
Service = Literal["nvidia-persistenced", "nvidia-fabricmanager", "nvidia-dcgm", "nv-hostengine"]
RESTARTABLE_SERVICES: tuple[str, ...] = get_args(Service)


class Outcome(StrEnum):
    done = "done"  # carried out
    passed = "passed"  # a check that passed
    failed = "failed"  # carried out and it did not work, or a check that failed
    refused = "refused"  # a precondition did not hold (a pod holds the GPU): nothing was done
    expired = "expired"  # its deadline passed before it could start: nothing was done
    unsupported = "unsupported"  # this agent cannot carry it out (no command configured, an unknown kind)
    interrupted = "interrupted"  # the agent stopped while it ran: whether it took effect is unknown


FINISHED = frozenset(Outcome)


class NodeAction(msgspec.Struct, frozen=True):
    """One action for one node. `id` is the remediation step's key (`<incident>.<step>`) or a person's request."""

    id: Name
    kind: NodeActionKind
    node: Name
    deadline: float  # epoch seconds: an action not begun by then is not begun at all
    incident: Short = ""
    gpu: int | None = None  # reset-gpu, power-cap (None: every GPU of the node), diag (None: all)
    fraction: float | None = None  # power-cap: of the GPU's default power limit
    level: int | None = None  # diag: dcgmi diag -r LEVEL
    service: Service | None = None  # restart-service
    reason: Text = ""

    def describe(self) -> str:
        """The action as a person says it: "reset GPU 3 on dgx-01"."""
        gpu = f"GPU {self.gpu}" if self.gpu is not None else "every GPU"
        said = {
            NodeActionKind.reset_gpu: f"reset {gpu}",
            NodeActionKind.reboot_node: "reboot",
            NodeActionKind.power_cap: f"cap {gpu} at {self.fraction or 1.0:.0%} of its power limit",
            NodeActionKind.restart_service: f"restart {self.service}",
            NodeActionKind.diag: f"run diagnostics level {self.level or 1} on {gpu if self.gpu is not None else 'it'}",
        }[self.kind]
        return f"{said} on {self.node}"


class ActionResult(msgspec.Struct, frozen=True):
    id: Name
    outcome: Outcome
    detail: Text  # one line: what happened, or why not
    started: float = 0.0
    finished: float = 0.0
    output: Output = ""  # the command's own output (its end, when long)


def clip_output(text: str) -> str:
    """A command's output as a result carries it: its end, when it is longer than MAX_OUTPUT."""
    return text if len(text) <= MAX_OUTPUT else "…" + text[-(MAX_OUTPUT - 1) :]
