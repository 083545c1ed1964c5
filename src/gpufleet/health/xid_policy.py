"""Severity and action for kernel fault events, from the Xid catalog through a configurable policy.

The facts are data: NVIDIA's Xid catalog (gpufleet.catalog), NVIDIA's NVLink5 decode table
(catalog/data/nvl5_decode.csv) and the policy document (data/xid_policy.yaml) that records where the sources disagree
and what we chose. A site's own policy file is merged over the default, so it names only what it changes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from enum import StrEnum
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpufleet import yaml_input
from gpufleet.catalog import XidInfo, load_xid_catalog
from gpufleet.catalog.xid import Nvl5Rule, load_nvl5_decode
from gpufleet.errors import ManifestError
from gpufleet.health.vendor_policy import VendorAction, classify_vendor
from gpufleet.model.incident import RootCause
from gpufleet.model.kernel import NVL5_XIDS, RECOVERY_XID, KernelEvent, Nvl5Detail

if TYPE_CHECKING:
    from gpufleet.telemetry.monitoring.alert_rules import XidRatings

DEFAULT_POLICY = "xid_policy.yaml"
ROW_REMAP_XIDS = frozenset({63, 64})  # row-remap / page-retirement recording event, and its recording failure
# Xid 154's announcement as the driver prints it, and where a line cut inside its new state leaves the state's code
_ANNOUNCEMENT = "GPU recovery action changed from "
_CUT_IN_NEW_STATE = re.compile(r"\)\s*to\s*(?:0[xX](?P<hex>[0-9a-fA-F]*)|(?P<dec>\d*))$")


class XidSeverity(StrEnum):
    """NVIDIA's fatality of an Xid (NVSentinel's FATAL/NONFATAL), not an incident's severity."""

    FATAL = "FATAL"
    NONFATAL = "NONFATAL"


class Action(StrEnum):
    """NVIDIA's immediate resolution buckets."""

    IGNORE = "IGNORE"
    RESTART_APP = "RESTART_APP"
    RESET_GPU = "RESET_GPU"
    RESTART_BM = "RESTART_BM"
    RESTART_VM = "RESTART_VM"
    RESTART_FM = "RESTART_FM"
    CHECK_MECHANICALS = "CHECK_MECHANICALS"
    CHECK_UVM = "CHECK_UVM"
    UPDATE_SWFW = "UPDATE_SWFW"
    CONTACT_SUPPORT = "CONTACT_SUPPORT"
    WORKFLOW_XID_13 = "WORKFLOW_XID_13"
    WORKFLOW_XID_31 = "WORKFLOW_XID_31"
    WORKFLOW_XID_45 = "WORKFLOW_XID_45"
    WORKFLOW_XID_48 = "WORKFLOW_XID_48"
    WORKFLOW_NVLINK_ERR = "WORKFLOW_NVLINK_ERR"
    WORKFLOW_NVLINK5_ERR = "WORKFLOW_NVLINK5_ERR"
    XID_154 = "XID_154"
    # not a bucket: NVML's recovery action NVML_GPU_RECOVERY_ACTION_DRAIN_P2P, which an Xid 154 can announce and no
    # bucket says (stop the GPU's peer-to-peer work, then read the recovery action again: data/xid_policy.yaml)
    DRAIN_P2P = "DRAIN_P2P"
    # not an NVIDIA bucket: what the escalation rules ask for when repeats show the part itself is failing
    # (NVIDIA's investigatory CONTACT_SUPPORT for these codes is the return-merchandise process)
    RMA = "RMA"


# how much each action disturbs: when several decode rows apply, the most disruptive wins
_ACTION_WEIGHT = {
    Action.IGNORE: 0,
    Action.XID_154: 1,
    Action.RESTART_APP: 2,
    Action.CONTACT_SUPPORT: 3,
    Action.DRAIN_P2P: 3,  # ends the GPU's peer-to-peer work and holds it out until the driver says what follows
    Action.RESET_GPU: 4,
    Action.RESTART_BM: 5,
}


class Rule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    severity: XidSeverity
    action: Action
    investigatory: str | None = None
    cause: RootCause | None = None  # the root cause to file it under, where the code alone would mislead
    reason: str = ""


class ActionRule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    action: Action
    severity: XidSeverity | None = None  # None: the catalog's rating of the code that announced it
    reason: str = ""


class Nvl5Policy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    decode: bool = True
    undecoded_fatal: Rule
    undecoded_nonfatal: Rule
    xid_154_eval: Action = Action.XID_154


class RowRemapPolicy(BaseModel):
    """Xid 63 and 64: a recorded remap is watched; only a text that names a real failure escalates."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    recorded: Rule
    failed: Rule
    failure_text: tuple[str, ...] = Field(min_length=1)  # regular expressions, matched case-insensitively

    def names_a_failure(self, message: str) -> bool:
        return any(re.search(pattern, message, re.IGNORECASE) for pattern in self.failure_text)


class MemoryProgression(BaseModel):
    """An uncorrectable error (Xid 48) on a GPU that recorded a row remap (63/64) before: the memory is failing."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    window_s: float = Field(gt=0)
    same_event_s: float = Field(ge=0)  # a 63 printed with the 48 that caused it is one event, not a progression
    rule: Rule


class RepeatedGpuLost(BaseModel):
    """A node whose GPUs keep falling off the bus: past `max_in_window` episodes a reboot is no longer the fix."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    window_s: float = Field(gt=0)
    max_in_window: int = Field(ge=1)
    episode_s: float = Field(ge=0)  # the lines of one fall-off (Xid 79, the probe report, other GPUs) are one
    rule: Rule


class Escalation(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    memory_progression: MemoryProgression
    repeated_gpu_lost: RepeatedGpuLost


class SxidPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    fatal: Rule
    nonfatal: Rule
    unmarked: Rule


class XidPolicy(BaseModel):
    """The policy document (data/xid_policy.yaml explains every choice)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: int = Field(1, ge=1, le=1)
    unknown_xid: Rule
    unrated: Rule
    overrides: dict[int, Rule] = Field(default_factory=dict)
    nvlink5: Nvl5Policy
    recovery_actions: dict[int, ActionRule]
    unknown_recovery_action: ActionRule
    xid45_with_root: Rule
    row_remap: RowRemapPolicy
    escalation: Escalation
    sxid: SxidPolicy
    fallen_off_bus: Rule
    reset_required: Rule
    api_mismatch: Rule = Rule(
        severity=XidSeverity.FATAL,
        action=Action.UPDATE_SWFW,
        reason="user-space driver and kernel module versions differ: nothing CUDA starts until they match",
    )
    init_failed: Rule = Rule(
        severity=XidSeverity.FATAL,
        action=Action.RESTART_BM,
        investigatory="CONTACT_SUPPORT",
        cause=RootCause.gpu_lost,
        reason="the driver could not initialise the GPU (RmInitAdapter failed): it is unusable until the node is "
        "rebooted",
    )


class Verdict(BaseModel):
    """What one event means and what to do about it, and which rule said so."""

    model_config = ConfigDict(frozen=True)

    severity: XidSeverity
    action: Action | VendorAction  # NVIDIA's buckets; another vendor's events use the vendor-neutral terms
    investigatory: str | None = None
    bucket: str | None = None  # NVIDIA's catalog bucket for the code, e.g. WORKFLOW_NVLINK5_ERR or XID_154
    cause: RootCause | None = None  # set where the policy files the event under a cause other than the code's
    rule: str  # which step decided: catalog, override, nvl5-decode, xid154, ...
    reason: str = ""


def _data_text(name: str) -> str:
    return resources.files("gpufleet.health").joinpath("data", name).read_text(encoding="utf-8")


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _validation_message(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    return f"{where}: {first['msg']}" + (f" ({len(exc.errors())} problems)" if len(exc.errors()) > 1 else "")


@cache
def default_policy() -> XidPolicy:
    return XidPolicy.model_validate(yaml.safe_load(_data_text(DEFAULT_POLICY)))


def policy_from_text(text: str, *, source: str = "<policy>") -> XidPolicy:
    """A policy document merged over the default one."""
    overlay = yaml_input.load(text, source) or {}
    if not isinstance(overlay, dict):
        raise ManifestError(source, "a policy file must be a mapping", fix="start from the default policy's keys")
    merged = _merge(yaml.safe_load(_data_text(DEFAULT_POLICY)), overlay)
    try:
        return XidPolicy.model_validate(merged)
    except ValidationError as exc:
        raise ManifestError(
            source,
            _validation_message(exc),
            fix="see `gpufleet xid policy` for the default document and its keys",
        ) from exc


def load_policy(path: Path | str | None = None) -> XidPolicy:
    """The default policy, or the default with the file at `path` merged over it."""
    if path is None:
        return default_policy()
    return policy_from_text(yaml_input.read_file(path), source=str(path))


def default_policy_text() -> str:
    return _data_text(DEFAULT_POLICY)


def _from_rule(rule: Rule, step: str, bucket: str | None) -> Verdict:
    return Verdict(
        severity=rule.severity,
        action=rule.action,
        investigatory=rule.investigatory,
        bucket=bucket,
        cause=rule.cause,
        rule=step,
        reason=rule.reason,
    )


def decode_nvl5(xid: int, detail: Nvl5Detail) -> list[Nvl5Rule]:
    """The decode-table rows that apply to one NVLink5 Xid line (several when the status word has several
    bits)."""
    rows = [r for r in load_nvl5_decode() if r.xid == xid and detail.unit in r.units]
    by_intrinfo = [r for r in rows if r.matches_intrinfo(detail.intrinfo)]
    rows = by_intrinfo or rows
    status = detail.error_status
    exact = [r for r in rows if r.error_status == status]
    if exact:
        return exact
    return [r for r in rows if r.error_status and status & r.error_status]


def _nvl5_action(row: Nvl5Rule, policy: XidPolicy) -> Action:
    return policy.nvlink5.xid_154_eval if row.resolution == "XID_154_EVAL" else Action(row.resolution)


def _nvl5_row_verdict(row: Nvl5Rule, bucket: str | None, policy: XidPolicy) -> Verdict:
    return Verdict(
        severity=XidSeverity.FATAL if row.fatal else XidSeverity.NONFATAL,
        action=_nvl5_action(row, policy),
        investigatory=row.investigatory or None,
        bucket=bucket,
        rule=f"nvl5-decode: {row.unit} status {row.error_status:#010x} ({row.severity})",
        reason=row.effect,
    )


def _nvl5_verdict(event: KernelEvent, info: XidInfo | None, policy: XidPolicy) -> Verdict | None:
    detail = event.nvl5
    if detail is None or not policy.nvlink5.decode or event.xid is None:
        return None
    bucket = info.nvidia_immediate_action if info else None
    rows = decode_nvl5(event.xid, detail)
    if not rows:
        fallback = policy.nvlink5.undecoded_fatal if detail.fatal else policy.nvlink5.undecoded_nonfatal
        step = f"nvl5-undecoded: {detail.unit} status {detail.error_status:#010x}"
        return _from_rule(fallback, step, bucket)
    worst = max(rows, key=lambda r: (r.fatal, _ACTION_WEIGHT.get(_nvl5_action(r, policy), 3)))
    return _nvl5_row_verdict(worst, bucket, policy)


def _catalog_verdict(code: int, info: XidInfo, policy: XidPolicy) -> Verdict:
    bucket = info.nvidia_immediate_action or None
    if not info.nvidia_immediate_action or not info.nvsentinel_fatality:
        return _from_rule(policy.unrated, "unrated", bucket)
    return Verdict(
        severity=XidSeverity(info.nvsentinel_fatality),
        action=Action(info.nvidia_immediate_action),
        investigatory=info.nvidia_investigatory_action or None,
        bucket=bucket,
        rule="catalog",
        reason=info.description,
    )


def classify_xid(event: KernelEvent, policy: XidPolicy, info: XidInfo | None) -> Verdict:
    code = event.xid
    if code is None or info is None:
        return _from_rule(policy.unknown_xid, "unknown-xid", None)
    if code in policy.overrides:  # a site's explicit choice for a code wins over every derived rule
        return _from_rule(policy.overrides[code], f"override {code}", info.nvidia_immediate_action or None)
    if code in ROW_REMAP_XIDS:
        bucket = info.nvidia_immediate_action or None
        if code == 64 and policy.row_remap.names_a_failure(event.message):
            return _from_rule(policy.row_remap.failed, "row-remap: the driver reports a failure", bucket)
        return _from_rule(policy.row_remap.recorded, f"row-remap: Xid {code} recorded, not failed", bucket)
    if code in NVL5_XIDS:
        decoded = _nvl5_verdict(event, info, policy)
        if decoded is not None:
            return decoded
    if code == RECOVERY_XID and event.recovery is not None:
        base = _catalog_verdict(code, info, policy)
        announced = policy.recovery_actions.get(event.recovery.to_code, policy.unknown_recovery_action)
        return base.model_copy(
            update={
                "severity": announced.severity or base.severity,
                "action": announced.action,
                "rule": f"xid154: announced {event.recovery.to_code:#x} ({event.recovery.to_name})",
                "reason": announced.reason,
            }
        )
    if code == RECOVERY_XID and (possible := recovery_states_possible(event.message, policy.recovery_actions)):
        return _cut_recovery_verdict(possible, _catalog_verdict(code, info, policy), policy)
    if code == 45 and event.root_xid is not None:
        return _from_rule(policy.xid45_with_root, f"xid45 follows root Xid {event.root_xid}", "WORKFLOW_XID_45")
    return _catalog_verdict(code, info, policy)


def recovery_states_possible(message: str, known: Iterable[int]) -> list[int | None] | None:
    """The recovery states an Xid 154 line cut before its new state could still announce (None in the list: one the
    policy does not know, from `known`), or None when the message is not a cut announcement. A line that ends inside
    the state's code allows only the codes that start with the digits shown; one that ends before them allows any."""
    if not (_ANNOUNCEMENT.startswith(message) or message.startswith(_ANNOUNCEMENT)):
        return None
    states = sorted(known)
    cut = _CUT_IN_NEW_STATE.search(message)
    if cut is None or cut["dec"] in ("", "0"):  # no digit yet, or a 0 that may begin 0x
        return [*states, None]
    if cut["hex"] is not None:
        return [n for n in states if f"{n:x}".startswith(cut["hex"].lower())] + [None]
    return [n for n in states if str(n).startswith(cut["dec"])] + [None]


def _cut_recovery_verdict(possible: list[int | None], base: Verdict, policy: XidPolicy) -> Verdict:
    """Xid 154 with its new state cut off: the most disruptive action a state it could announce asks for, never the
    catalog's informational reading (that reading is only for a line whose state was read)."""
    rules = {n: policy.recovery_actions.get(n, policy.unknown_recovery_action) if n is not None
             else policy.unknown_recovery_action for n in possible}  # fmt: skip
    state, worst = max(rules.items(), key=lambda item: _ACTION_WEIGHT.get(item[1].action, 3))
    could = ", ".join(f"{n:#x}" for n in possible if n is not None)
    named = f"{state:#x}" if state is not None else "a state the policy does not know"
    return base.model_copy(
        update={
            "severity": worst.severity or base.severity,
            "action": worst.action,
            "rule": f"xid154: the line is cut before the new recovery state (it could be {could or 'any'}, or one "
            f"the policy does not know); the most disruptive reading, {named}, is taken",
            "reason": f"Cut before the recovery state it announces; the most disruptive it could be ({named}): "
            + worst.reason,
        }
    )


def classify(event: KernelEvent, policy: XidPolicy | None = None) -> Verdict:
    """Severity and action for one kernel event under `policy` (the default policy when None).

    The policy is NVIDIA's: another vendor's event (amdgpu, habanalabs) is judged by that vendor's rules instead.
    """
    if event.vendor != "nvidia":
        said = classify_vendor(event)
        return Verdict(
            severity=XidSeverity.FATAL if said.fatal else XidSeverity.NONFATAL,
            # the terms NVIDIA's vocabulary has too (RESET_GPU, RESTART_APP, IGNORE) are its members, so a reader
            # of verdicts compares them one way
            action=Action(said.action) if said.action in Action.__members__ else said.action,
            cause=said.cause,
            rule=f"{event.vendor}: {said.rule}",
            reason=said.reason,
        )
    policy = policy or default_policy()
    if event.kind == "xid":
        return classify_xid(event, policy, load_xid_catalog().get(event.xid or -1))
    if event.kind == "sxid":
        fatal = event.sxid_detail.fatal if event.sxid_detail else None
        rule = policy.sxid.unmarked if fatal is None else policy.sxid.fatal if fatal else policy.sxid.nonfatal
        step = "sxid-unmarked" if fatal is None else "sxid-fatal" if fatal else "sxid-nonfatal"
        return _from_rule(rule, step, "SXID")
    if event.kind == "fallen_off_bus":
        return _from_rule(policy.fallen_off_bus, "fallen-off-bus", None)
    if event.kind == "api_mismatch":
        return _from_rule(policy.api_mismatch, "api-mismatch", None)
    if event.kind == "init_failed":
        return _from_rule(policy.init_failed, "init-failed", None)
    return _from_rule(policy.reset_required, "reset-required", None)


def code_verdicts(code: int, policy: XidPolicy | None = None) -> tuple[Verdict, ...]:
    """Every verdict `policy` can give a report of Xid `code`, whatever else its line says. The first is the verdict
    on a report that carries nothing but the code (what a metric series such as DCGM_EXP_XID_ERRORS_COUNT{xid="N"}
    can be judged by); the others are what the rest of a line can make of it: a row-remap Xid 64 whose text names a
    failure, an NVLink5 Xid 144-150 by its decoded unit and status (or the driver's own word when the table has no
    row), an Xid 154 by the recovery state it announces, an Xid 45 that names its root."""
    policy = policy or default_policy()
    info = load_xid_catalog().get(code)
    bare = classify_xid(KernelEvent(kind="xid", line=0, raw="", message="", xid=code), policy, info)
    if info is None or code in policy.overrides:  # an unknown code, or a site's choice: the line changes nothing
        return (bare,)
    bucket = info.nvidia_immediate_action or None
    more: list[Verdict] = []
    if code == 64:
        more.append(_from_rule(policy.row_remap.failed, "row-remap: the driver reports a failure", bucket))
    if code in NVL5_XIDS and policy.nvlink5.decode:
        more += [_nvl5_row_verdict(row, bucket, policy) for row in load_nvl5_decode() if row.xid == code]
        more.append(_from_rule(policy.nvlink5.undecoded_fatal, "nvl5-undecoded (printed Fatal)", bucket))
        more.append(_from_rule(policy.nvlink5.undecoded_nonfatal, "nvl5-undecoded (printed Nonfatal)", bucket))
    if code == RECOVERY_XID:
        more += [verdict for _, verdict in recovery_verdicts(policy)]
    if code == 45:
        more.append(_from_rule(policy.xid45_with_root, "xid45 follows its root Xid", info.nvidia_immediate_action))
    return (bare, *more)


def recovery_verdicts(policy: XidPolicy | None = None) -> list[tuple[int | None, Verdict]]:
    """The verdict on an Xid 154 that announces each recovery state the policy knows (in state order), then on one
    announcing a state it does not (None): the state's action, and its severity, or the catalog's rating of Xid 154
    where the state sets none."""
    policy = policy or default_policy()
    info = load_xid_catalog()[RECOVERY_XID]
    base = _catalog_verdict(RECOVERY_XID, info, policy)
    states: list[tuple[int | None, ActionRule]] = [
        *sorted(policy.recovery_actions.items()),
        (None, policy.unknown_recovery_action),
    ]
    out = []
    for state, rule in states:
        named = f"{state:#x}" if state is not None else "a state the policy does not know"
        update = {"severity": rule.severity or base.severity, "action": rule.action, "reason": rule.reason}
        out.append((state, base.model_copy(update={**update, "rule": f"xid154: announced {named}"})))
    return out


# NVML's nvmlDeviceGpuRecoveryAction_t states by the names nvidia-smi prints (`-q` "GPU Recovery Action" and
# `--query-gpu=gpu_recovery_action`: None, Reset, Reboot, Drain P2P, Drain and Reset; R550-R580) and the names the
# Xid 154 line gives them (GPU Reset Required, Node Reboot Required)
RECOVERY_STATES = {
    "none": 0, "reset": 1, "gpu reset": 1, "gpu reset required": 1, "reboot": 2, "node reboot": 2,
    "node reboot required": 2, "drain p2p": 3, "drain and reset": 4,
}  # fmt: skip


def recovery_state(printed: str) -> int | None:
    """The recovery state a printed value names (`Drain and Reset`, `0x4`, `4`); None when it names none."""
    word = " ".join(printed.strip().strip("[]").split()).lower()
    if re.fullmatch(r"0x[0-9a-f]{1,4}|\d{1,4}", word):
        return int(word, 0)
    return RECOVERY_STATES.get(word)


def recovery_state_verdict(state: int, policy: XidPolicy | None = None) -> Verdict:
    """The verdict on a GPU whose recovery action is `state`: the one an Xid 154 announcing it gets."""
    verdicts = dict(recovery_verdicts(policy))
    return verdicts.get(state) or verdicts[None]


def code_severities(code: int, policy: XidPolicy | None = None) -> frozenset[XidSeverity]:
    """The severities a report of Xid `code` can get under `policy`: one when the code alone decides, both when the
    rest of its line does (see `code_verdicts`)."""
    return frozenset(v.severity for v in code_verdicts(code, policy))


def xid_ratings(policy: XidPolicy | None = None) -> XidRatings:
    """The policy's ratings of every code the catalog lists, and of a code it does not, in the form the shipped alert
    rules are generated from (telemetry/monitoring/alert_rules.py), so the rules page as the policy rates."""
    from gpufleet.telemetry.monitoring.alert_rules import XidRatings

    policy = policy or default_policy()
    return XidRatings(
        severities={code: frozenset(s.value for s in code_severities(code, policy)) for code in load_xid_catalog()},
        unknown=policy.unknown_xid.severity.value,
    )
