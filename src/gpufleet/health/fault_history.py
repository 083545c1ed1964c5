"""What a GPU or node did before: the history the Xid escalation rules need, kept at the control plane.

One kernel report is judged on its own at the edge (the Xid policy). Two rules need what came before it:

- memory progression: a GPU that recorded a row remap (Xid 63/64) and later reports an uncorrectable ECC error
  (Xid 48) is failing, not recovering: the 48 becomes an RMA instead of another reset;
- repeated loss: a node whose GPUs fell off the bus (Xid 79, or the probe-time report) more than
  `max_in_window` times in the window needs its hardware replaced, not another reboot.

The history is rebuilt from incidents (open ones, and resolved ones still in the window), which the state database
keeps, so a control-plane restart does not reset the count.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import msgspec

from gpufleet.health.xid_policy import ROW_REMAP_XIDS, Rule, XidPolicy, default_policy
from gpufleet.health.xid_rating import finding_severity
from gpufleet.model import EntityKind, Incident, RootCause
from gpufleet.model.observe import Finding

DBE_XID = 48
GPU_LOST_XID = 79
# an Xid 63/64 line kept in an incident's evidence (one that joined a 48's incident in the same burst)
_REMAP_LINE = re.compile(r"NVRM: Xid \([^)]*\): 6[34],")


def _gpu_key(finding_or_incident: Finding | Incident) -> str | None:
    entity = finding_or_incident.entity
    if entity.kind is not EntityKind.gpu:
        return None
    return f"{entity.node}/{entity.index if entity.index is not None else entity.name}"


class FaultHistory:
    """Row-remap records per GPU and fall-off episodes per node, over the policy's windows."""

    def __init__(self, policy: XidPolicy | None = None) -> None:
        self.policy = policy or default_policy()
        self.remapped: dict[str, float] = {}  # GPU -> when it last recorded a row remap
        self.lost: dict[str, list[float]] = {}  # node -> when each fall-off episode began

    @property
    def window_s(self) -> float:
        """How far back the rules look: incidents older than this cannot change a verdict."""
        escalation = self.policy.escalation
        return max(escalation.memory_progression.window_s, escalation.repeated_gpu_lost.window_s)

    # -- remembering ------------------------------------------------------------------------------------------

    def remember(self, incidents: Iterable[Incident]) -> None:
        """Take the history back from kept incidents (any state)."""
        episode_s = self.policy.escalation.repeated_gpu_lost.episode_s
        for inc in incidents:
            gpu = _gpu_key(inc)
            if gpu is not None and (inc.xid in ROW_REMAP_XIDS or any(_REMAP_LINE.search(e.text) for e in inc.evidence)):
                self._note_remap(gpu, inc.first_seen)
            if inc.cause is RootCause.gpu_lost:
                times = [inc.first_seen] + [e.time for e in inc.evidence if e.source == "kmsg"]
                for t in sorted(times):
                    self._note_lost(inc.node, t, episode_s)

    def _note_remap(self, gpu: str, when: float) -> None:
        self.remapped[gpu] = max(self.remapped.get(gpu, when), when)

    def _note_lost(self, node: str, when: float, episode_s: float) -> bool:
        """Record a fall-off; True when it began a new episode."""
        episodes = self.lost.setdefault(node, [])
        if any(abs(when - t) <= episode_s for t in episodes):
            return False
        episodes.append(when)
        episodes.sort()
        return True

    # -- judging ----------------------------------------------------------------------------------------------

    def judge(self, finding: Finding) -> Finding:
        """The finding as the history sees it: escalated when a rule says so, else unchanged."""
        if finding.source != "kmsg":
            return finding
        if finding.cause is RootCause.gpu_lost:
            return self._lost(finding)
        gpu = _gpu_key(finding)
        if gpu is None:
            return finding
        if finding.xid in ROW_REMAP_XIDS:
            self._note_remap(gpu, finding.time)
            return finding
        if finding.xid == DBE_XID:
            return self._progression(gpu, finding)
        return finding

    def _progression(self, gpu: str, finding: Finding) -> Finding:
        rule = self.policy.escalation.memory_progression
        remapped = self.remapped.get(gpu)
        if remapped is None:
            return finding
        age = finding.time - remapped
        if age <= rule.same_event_s or age > rule.window_s:
            return finding
        why = f"row remap recorded {_ago(age)} earlier, now an uncorrectable ECC error (Xid 63/64 -> 48)"
        return _escalated(finding, rule.rule, why)

    def _lost(self, finding: Finding) -> Finding:
        rule = self.policy.escalation.repeated_gpu_lost
        node = finding.entity.node
        if not self._note_lost(node, finding.time, rule.episode_s):
            return finding  # another line of an episode already counted
        episodes = self.lost[node]
        episodes[:] = [t for t in episodes if finding.time - t <= rule.window_s]
        if len(episodes) <= rule.max_in_window:
            return finding
        days = rule.window_s / 86_400
        why = (
            f"fall-off episode {len(episodes)} on {node} in {days:.0f} days (more than {rule.max_in_window}): "
            "a reboot will not fix it"
        )
        return _escalated(finding, rule.rule, why)


def _ago(seconds: float) -> str:
    if seconds >= 86_400:
        return f"{seconds / 86_400:.1f} days"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds:.0f} s"


def _escalated(finding: Finding, rule: Rule, why: str) -> Finding:
    severity = finding_severity(rule)
    return msgspec.structs.replace(
        finding,
        cause=rule.cause or finding.cause,
        severity=severity,
        action=rule.action.value,
        summary=f"{finding.summary[:200]} - escalated: {why}",
        evidence=f"{finding.evidence[:12_000]}\nescalated ({rule.action.value}): {why}. {rule.reason}",
    )
