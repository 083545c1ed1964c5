"""What an action term asks an operator to do, in steps (xid_actions.yaml): NVIDIA's Xid resolution buckets
(RESET_GPU, WORKFLOW_XID_48, ...) and gpufleet's own terms (ISOLATE_PORT, RMA, ...), each with a one-line title and the
steps in order, and the catalog reference an incident shows beside them ("NVIDIA WORKFLOW_XID_48, Xid 48")."""

from __future__ import annotations

import re
from functools import cache
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpufleet.catalog._files import read_text

ACTIONS_FILE = "xid_actions.yaml"
# a bucket as NVIDIA writes it inside a free-text cell: "Solo: RESTART_FM Not Solo: IGNORE (follow other Xid)",
# "IGNORE (sympathetic)", "REPORT_ISSUE (if seen >1 per day)", "CHECK_APP/CUDA"; not "N/A", not "Xid"
_TERM = re.compile(r"(?<![A-Za-z0-9_/])[A-Z][A-Z0-9_]+(?:/[A-Z0-9_]+)*(?![A-Za-z0-9_/])")


class ActionGuide(BaseModel):
    """One action term: what it asks for in a line, and the steps to do it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: Literal["nvidia", "gpufleet"]
    title: str = Field(min_length=1, max_length=45)  # a table's ACTION cell
    steps: tuple[str, ...] = Field(min_length=1)


class _ActionsFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: int = Field(ge=1, le=1)
    actions: dict[str, ActionGuide] = Field(min_length=1)


@cache
def load_action_guides() -> dict[str, ActionGuide]:
    """Every action term with its steps, by term."""
    try:
        return dict(_ActionsFile.model_validate(yaml.safe_load(read_text(ACTIONS_FILE))).actions)
    except ValidationError as exc:  # a packaging fault, not a user's: say which file and field
        where = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ValueError(f"catalog/data/{ACTIONS_FILE} is malformed: {where}") from None


def bucket_terms(text: str) -> tuple[str, ...]:
    """The action terms in a catalog cell, in order and once each: a bare bucket, or NVIDIA's free text around one."""
    return tuple(dict.fromkeys(_TERM.findall(text or "")))


def action_guide(term: str) -> ActionGuide | None:
    """The steps for `term`; None for an empty or unknown term."""
    return load_action_guides().get((term or "").strip())


def reference(term: str, xid: int | None = None) -> str:
    """Where the term comes from, as an incident shows it: "NVIDIA WORKFLOW_XID_48, Xid 48", "gpufleet ISOLATE_PORT";
    a term the catalog does not know is named as itself."""
    guide = action_guide(term)
    named = term if guide is None else f"{'NVIDIA' if guide.source == 'nvidia' else 'gpufleet'} {term}"
    return named + (f", Xid {xid}" if xid is not None else "")


def describe_action(term: str, xid: int | None = None) -> dict[str, Any]:
    """An incident's recommended action in words: its title, its steps and its catalog reference. A term the catalog
    does not know is shown as itself, with no steps."""
    guide = action_guide(term)
    if not term:
        return {"action_title": "", "action_steps": [], "action_reference": ""}
    if guide is None:
        return {"action_title": term, "action_steps": [], "action_reference": reference(term, xid)}
    return {"action_title": guide.title, "action_steps": list(guide.steps), "action_reference": reference(term, xid)}
