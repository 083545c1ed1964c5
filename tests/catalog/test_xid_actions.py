"""The action terms' steps (catalog/data/xid_actions.yaml): every term the Xid catalog, the NVLink5 decode table, the
Xid policy and the vendor policy use has words an operator can follow, so a new bucket without them fails here."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from gpufleet.catalog import xid_actions
from gpufleet.catalog._files import read_text
from gpufleet.catalog.xid_actions import (
    action_guide,
    bucket_terms,
    describe_action,
    load_action_guides,
    reference,
)
from gpufleet.health.vendor_policy import VendorAction
from gpufleet.health.xid_policy import Action


def _policy_terms(node: Any) -> Iterator[str]:
    """Every action term the Xid policy document names, wherever it sits (rules, escalations, recovery actions)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("action", "investigatory", "xid_154_eval") and isinstance(value, str):
                yield from bucket_terms(value)
            else:
                yield from _policy_terms(value)
    elif isinstance(node, list):
        for item in node:
            yield from _policy_terms(item)


def terms_in_use() -> dict[str, str]:
    """Each action term in use, with where it was found."""
    found: dict[str, str] = {}
    for row in csv.DictReader(io.StringIO(read_text("xid_catalog.csv"))):
        for column in ("nvidia_immediate_action", "nvidia_investigatory_action"):
            for term in bucket_terms(row[column]):
                found.setdefault(term, f"xid_catalog.csv Xid {row['code']} {column}")
    for row in csv.DictReader(io.StringIO(read_text("nvl5_decode.csv"))):
        for column in ("resolution", "investigatory"):
            for term in bucket_terms(row[column]):
                found.setdefault(term, f"nvl5_decode.csv Xid {row['xid']} {column}")
    from importlib import resources

    policy = yaml.safe_load(resources.files("gpufleet.health").joinpath("data", "xid_policy.yaml").read_text())
    for term in _policy_terms(policy):
        found.setdefault(term, "health/data/xid_policy.yaml")
    for action in Action:
        found.setdefault(action.value, "health/xid_policy.py Action")
    for vendor in VendorAction:
        found.setdefault(vendor.value, "health/vendor_policy.py VendorAction")
    return found


def missing(terms: dict[str, str], guides: dict[str, Any]) -> list[str]:
    return sorted(f"{term} ({where})" for term, where in terms.items() if term not in guides)


def test_every_term_in_use_has_steps() -> None:
    terms = terms_in_use()
    # the sources are read: the catalog's buckets of both columns are among them
    expected = {"WORKFLOW_XID_48", "RESTART_BM", "WORKFLOW_XID_13", "XID_137_FLOW", "RESTART_FM", "XID_154_EVAL"}
    assert expected <= set(terms)
    assert missing(terms, load_action_guides()) == []


def test_a_new_bucket_without_steps_is_reported() -> None:
    terms = {**terms_in_use(), "WORKFLOW_XID_999": "xid_catalog.csv Xid 999 nvidia_immediate_action"}
    reported = missing(terms, load_action_guides())
    assert reported == ["WORKFLOW_XID_999 (xid_catalog.csv Xid 999 nvidia_immediate_action)"]


def test_every_guide_has_a_title_and_steps_in_plain_words() -> None:
    for term, guide in load_action_guides().items():
        assert guide.title and guide.steps, term
        for text in (guide.title, *guide.steps):
            assert "\n" not in text and text == text.strip(), term
            # written out, not a bare bucket name standing in for the words
            assert bucket_terms(text) != (text,), term


@pytest.mark.parametrize(
    ("cell", "terms"),
    [
        ("WORKFLOW_XID_48", ("WORKFLOW_XID_48",)),
        ("Solo: RESTART_FM Not Solo: IGNORE (follow other Xid)", ("RESTART_FM", "IGNORE")),
        ("IGNORE (sympathetic)", ("IGNORE",)),
        ("REPORT_ISSUE (if seen >1 per day)", ("REPORT_ISSUE",)),
        ("CHECK_APP/CUDA", ("CHECK_APP/CUDA",)),
        ("INVESTIGATE_SW/USER", ("INVESTIGATE_SW/USER",)),
        ("N/A Informational only regarding another Xid", ()),
        ("", ()),
    ],
)
def test_bucket_terms_reads_nvidias_cells(cell: str, terms: tuple[str, ...]) -> None:
    assert bucket_terms(cell) == terms


def test_describe_action_gives_title_steps_and_the_catalog_reference() -> None:
    words = describe_action("WORKFLOW_XID_48", 48)
    assert words["action_reference"] == "NVIDIA WORKFLOW_XID_48, Xid 48"
    assert "reset" in words["action_title"].lower()
    assert len(words["action_steps"]) >= 3
    assert any("63 or 64" in step for step in words["action_steps"])  # the workflow's fork, spelled out
    assert reference("ISOLATE_PORT") == "gpufleet ISOLATE_PORT"
    assert reference("RESET_GPU", 79) == "NVIDIA RESET_GPU, Xid 79"


def test_an_unknown_or_empty_term_is_shown_as_itself() -> None:
    assert action_guide("NOT_A_BUCKET") is None
    assert describe_action("NOT_A_BUCKET") == {
        "action_title": "NOT_A_BUCKET",
        "action_steps": [],
        "action_reference": "NOT_A_BUCKET",
    }
    assert describe_action("") == {"action_title": "", "action_steps": [], "action_reference": ""}


def test_a_malformed_file_names_the_file_and_the_field(monkeypatch: pytest.MonkeyPatch) -> None:
    broken = "version: 1\nactions:\n  X: {source: nvidia, title: t}\n"  # no steps
    monkeypatch.setattr(xid_actions, "read_text", lambda name: broken)
    load_action_guides.cache_clear()
    try:
        with pytest.raises(ValueError, match=r"xid_actions\.yaml.*steps"):
            load_action_guides()
    finally:
        monkeypatch.undo()
        load_action_guides.cache_clear()
