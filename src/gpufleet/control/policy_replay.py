"""Rehearse a remediation policy over what this control plane recorded: the one entry point the command line and
the API share (gpufleet.remediate.replay does the replay). Reads the state database, changes nothing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpufleet.control.remediation import RESUME_EVERY_S
from gpufleet.errors import ManifestError, UserError
from gpufleet.remediate.config import RemediationPolicy
from gpufleet.remediate.replay import GPU_RESET_S, REBOOT_S, load_recording
from gpufleet.remediate.replay_report import Comparison, compare
from gpufleet.remediate.runbook import RunbookSet
from gpufleet.spec.base import format_duration, parse_duration
from gpufleet.state import Database

DEFAULT_SINCE = "30d"
MAX_POLICY_TEXT = 256 * 1024


def parse_since(text: str | float) -> float:
    """'30d', '12h', '90m' or seconds -> seconds (the window back from the newest recorded event)."""
    try:
        seconds = parse_duration(text)
    except ValueError:
        raise UserError(
            f"since {text!r} is not a duration", fix="give how far back to replay, e.g. 30d, 12h or 90m"
        ) from None
    if seconds <= 0:
        raise UserError(f"since {text!r} is an empty window", fix="give how far back to replay, e.g. 30d or 12h")
    return seconds


def policy_from_text(text: str, source: str = "policy") -> RemediationPolicy:
    """A RemediationPolicy manifest given as YAML or JSON text (JSON is YAML), validated."""
    from gpufleet import yaml_input
    from gpufleet.spec.loader import validate_as

    if len(text) > MAX_POLICY_TEXT:
        raise ManifestError(source, f"the policy is {len(text)} characters", fix="send one RemediationPolicy manifest")
    docs = [d for d in yaml_input.load_documents(text, source) if d is not None]
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise ManifestError(
            source,
            f"expected one RemediationPolicy manifest, found {len(docs)} document(s)",
            fix="send one mapping with apiVersion: gpufleet.io/v1, kind: RemediationPolicy and its spec",
        )
    doc = docs[0]
    if doc.get("kind") != "RemediationPolicy":
        raise ManifestError(
            source,
            f"expected kind: RemediationPolicy, got {doc.get('kind')!r}",
            fix="start the manifest with apiVersion: gpufleet.io/v1 and kind: RemediationPolicy",
        )
    policy: RemediationPolicy = validate_as(source, RemediationPolicy, doc)
    return policy


def rehearse(
    db: Database,
    policy: RemediationPolicy,
    since: str | float = DEFAULT_SINCE,
    *,
    runbooks: RunbookSet | None = None,
    reboot_s: float = REBOOT_S,
    gpu_reset_s: float = GPU_RESET_S,
    progress: Callable[[str, int, int], None] | None = None,
) -> Comparison:
    """`policy` replayed over the last `since` of recorded incidents and node events, next to what was done."""
    seconds = parse_since(since)
    recording = load_recording(db, seconds)
    if not recording.incidents:
        raise UserError(
            f"no incidents were recorded in the last {format_duration(seconds)} (up to t={recording.end:.0f}), so "
            "no policy would have done anything",
            fix="widen --since, or point --state at the data directory of the control plane that saw the faults",
        )
    return compare(
        recording,
        policy,
        runbooks,
        reboot_s=reboot_s,
        gpu_reset_s=gpu_reset_s,
        resume_every_s=RESUME_EVERY_S,
        progress=progress,
    )


def runbooks_for(policy: RemediationPolicy, base: Path | None) -> RunbookSet:
    """The built-in runbooks and the policy's extra runbook files (relative to `base`, the policy's folder)."""
    from gpufleet.remediate.runbook import load_runbooks

    books = RunbookSet.builtin()
    if policy.spec.runbooks and base is None:
        raise UserError(
            f"the policy names runbook files ({', '.join(policy.spec.runbooks)}) that cannot be read here",
            fix="rehearse it with `gpufleet remediate replay --policy FILE` where those files are, or leave out "
            "spec.runbooks",
        )
    for extra in policy.spec.runbooks:
        books.extend(load_runbooks((base or Path.cwd()) / extra))
    return books


def comparison_payload(result: Comparison) -> dict[str, Any]:
    return result.as_dict()
