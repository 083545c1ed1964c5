"""The remediation policy: dry-run, the unavailability budget, the circuit breaker, rate limits, tickets.

Written as a manifest (`kind: RemediationPolicy`) so a typo in a safety setting is an error, not a silent default.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, model_validator

from gpufleet.remediate.runbook import ActionKind
from gpufleet.spec.base import Duration, Manifest, Metadata

_PERCENT = re.compile(r"^(\d+(?:\.\d+)?)%$")


def _check_limit(value: object) -> int | str:
    """An absolute count (5) or a percentage of the group's nodes ("20%")."""
    if isinstance(value, bool):
        raise ValueError("expected a count like 5 or a percentage like '20%'")
    if isinstance(value, int):
        if value < 0:
            raise ValueError("a limit cannot be negative")
        return value
    if isinstance(value, str):
        text = value.strip()
        if text.isdigit():
            return int(text)
        m = _PERCENT.match(text)
        if m and float(m.group(1)) <= 100:
            return text
    raise ValueError(f"expected a count like 5 or a percentage like '20%', got {value!r}")


Limit = Annotated[int | str, BeforeValidator(_check_limit)]


def resolve_limit(limit: int | str, total: int, *, at_least: int = 0) -> int:
    """A limit as a node count for a group of `total` nodes. Percentages round down, as Kubernetes' maxUnavailable."""
    if isinstance(limit, int):
        return max(limit, at_least)
    count = math.floor(float(limit.rstrip("%")) / 100.0 * total + 1e-9)
    return max(count, at_least)


class BudgetSpec(Manifest):
    """Nodes that may be out of service (cordoned, drained, rebooting) at once. A percentage of a group never
    rounds to zero: one node may always be taken out, otherwise a broken node could never be drained."""

    cluster: Limit | None = "20%"
    per_rack: Limit | None = None
    per_leaf: Limit | None = None


class BreakerSpec(Manifest):
    """Stop automatic action when too many distinct nodes fail inside the window, or when a wave of failures goes
    on window after window.

    Default 20% of nodes in 10 minutes, with a floor of 3 nodes. NVSentinel defaults to 50% in 5 minutes. We trip
    earlier and look back longer because independent hardware faults are rare on this time scale: Meta reported
    419 unexpected interruptions in 54 days on 16,384 GPUs (Llama 3 report), about one node-level fault every few
    hours across ~2,000 nodes, so even 1% of a fleet failing within ten minutes is a correlated cause (a driver or
    firmware rollout, a PDU or cooling loop, a leaf switch, or a detector producing false positives). Acting on such a
    wave takes capacity away for nothing; at 50% half the fleet is already gone before a human looks. Ten minutes
    rather than five also catches slower cascades such as a rolling update that breaks one rack at a time. The floor
    keeps small clusters from tripping on a single fault. Once tripped it stays tripped, across restarts, until a
    person runs `gpufleet remediate breaker reset`.

    The second rule is the rate of onset: it also trips when at least `wave_threshold` of the nodes (5%, with the
    same floor) failed in each of the last `wave_windows` (2) windows, i.e. the failures went on at half a percent of
    the fleet a minute or more for twenty minutes. A local fault takes its nodes at once and stops (a rack PDU is 4
    nodes, a leaf switch 32, 1.6% of 2,048: the 20% rule lets both through, since their nodes are broken either way,
    and a single burst fills one window, never two); a cooling cascade or a slow rollout keeps taking nodes window
    after window, at a rate no one-time burst explains, while never reaching 20% within any ten minutes (1% of the
    nodes a minute is 10% a window). 5% a window is three leaf switches and ~200 times the failures independent
    faults give at ten times the Llama 3 rate (about one node in twenty minutes on 2,048 nodes), and the floor keeps
    it off clusters where 5% is a node or two. bench/remediate_breaker.py replays failure patterns on a 2,048-node
    fleet: these defaults stop a false-positive storm, a bad rollout and a cooling cascade (1% of nodes a minute for
    40 minutes: tripped after about 15 minutes) that NVSentinel's lets through, and never trip on independent faults
    even at 10x the Llama 3 rate, one PDU or one leaf switch. `wave_threshold: null` turns the second rule off.
    """

    enabled: bool = True
    threshold: Limit = "20%"
    window: Duration = 600.0
    min_failures: int = Field(3, ge=1)
    wave_threshold: Limit | None = "5%"
    wave_windows: int = Field(2, ge=2)


class RateLimitSpec(Manifest):
    min_interval: Duration = 0.0  # draino-style spacing between two actions of this kind
    max_per_hour: int | None = Field(None, ge=1)


def _default_rate_limits() -> dict[ActionKind, RateLimitSpec]:
    # Cordons are immediate (as draino does); drains and reboots are spaced so a wave of faults cannot empty a
    # fleet faster than a person can notice. draino spaces drains 10 min apart for whole-node evictions of
    # healthy-looking nodes; a node with a dead GPU is already lost capacity, so our default spacing is shorter.
    return {
        ActionKind.drain: RateLimitSpec(min_interval=30.0),
        ActionKind.reboot_node: RateLimitSpec(min_interval=60.0, max_per_hour=30),
        # NVIDIA's PDR plugin isolates at most max(10, 0.5 % of the fabric) ports: more at once is a fabric-wide
        # cause (a switch, a firmware push, a detector gone wrong) that isolation would only make worse
        ActionKind.isolate_port: RateLimitSpec(max_per_hour=10),
    }


class TicketSpec(Manifest):
    directory: str | None = None  # JSON files here (default: <state dir>/tickets)
    webhook: str | None = None  # or POSTed as JSON to this URL

    @model_validator(mode="after")
    def _one_sink(self) -> TicketSpec:
        if self.directory and self.webhook:
            raise ValueError("set either `directory` or `webhook` for tickets, not both")
        return self


def _default_deadlines() -> dict[ActionKind, float]:
    return {
        ActionKind.reset_gpu: 900.0,
        ActionKind.power_cap: 900.0,
        ActionKind.restart_service: 900.0,
        ActionKind.reboot_node: 1800.0,
        ActionKind.diag: 3600.0,
    }


class NodeActionSpec(Manifest):
    """Node-local actions (GPU reset, reboot, power cap, service restart, diagnostics) carried out by the node's own
    agent: queued by the control plane, pulled by the agent with its next push (model/actions.py).

    `route: auto` sends them to the agent when the backend cannot do them itself (Kubernetes); `agent` always does
    (the twin then acts through its nodes' agents, as real nodes would). An action the agent has not begun within
    its deadline is not begun at all."""

    route: Literal["auto", "agent"] = "auto"
    deadline: dict[ActionKind, Duration] = Field(default_factory=_default_deadlines)


class RmaSpec(Manifest):
    """A GPU that needed a reset (or a node that needed a reboot) `after` times within `window` goes to RMA
    instead of being reset again: faults that come back after every recovery are the hardware's."""

    after: int = Field(3, ge=1)
    window: Duration = 7 * 86400.0


EvictionMode = Literal["evict", "delete", "leave"]


class EvictionSpec(Manifest):
    """How a GPU-scoped drain moves the pods on the faulty GPU away, per namespace (the default for the rest):

    - evict: through the Eviction API (policy/v1), so PodDisruptionBudgets are honoured; a 429 is retried with
      back-off and a pod still held makes the step an error the runbook retries later;
    - delete: delete the pod with `deleteGracePeriod` seconds to stop (past its budget: the GPU is bad either way);
    - leave: keep the pod running and tell its owner (an Event on the pod naming the GPU and the incident).

    A whole-node drain (before a reboot or a return of the board) evicts every pod, as `kubectl drain` does."""

    default: EvictionMode = "evict"
    namespaces: dict[str, EvictionMode] = {}
    delete_grace_period: int = Field(30, ge=0, description="seconds a deleted pod gets to stop")

    def mode(self, namespace: str) -> EvictionMode:
        return self.namespaces.get(namespace, self.default)


class RemediationBody(Manifest):
    dry_run: bool = False
    node_actions: NodeActionSpec = Field(default_factory=NodeActionSpec)
    rma: RmaSpec = Field(default_factory=RmaSpec)
    budget: BudgetSpec = Field(default_factory=BudgetSpec)
    breaker: BreakerSpec = Field(default_factory=BreakerSpec)
    rate_limits: dict[ActionKind, RateLimitSpec] = Field(default_factory=_default_rate_limits)
    cost_per_gpu_hour: dict[str, float] = {}  # by GPU model, for idle-GPU notices; the cluster's own rates win
    tickets: TicketSpec = Field(default_factory=TicketSpec)
    eviction: EvictionSpec = Field(default_factory=EvictionSpec)
    runbooks: list[str] = []  # extra runbook files; a runbook with a built-in's name replaces it


class RemediationPolicy(Manifest):
    api_version: Literal["gpufleet.io/v1"] = "gpufleet.io/v1"
    kind: Literal["RemediationPolicy"] = "RemediationPolicy"
    metadata: Metadata = Field(default_factory=lambda: Metadata(name="default"))
    spec: RemediationBody = Field(default_factory=RemediationBody)


def load_policy(path: Path) -> RemediationPolicy:
    from gpufleet.spec.loader import load_one

    policy: RemediationPolicy = load_one(Path(path), RemediationPolicy)
    return policy
