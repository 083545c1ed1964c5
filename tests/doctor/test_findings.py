"""The doctor's severities are the model's; only its words differ, at its edges: the model's critical is an
"error" in the rule files and in every output."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gpufleet.doctor.catalog import RuleInfo
from gpufleet.doctor.findings import Finding, from_label, label, ordered
from gpufleet.model import Severity


def test_the_doctors_words_round_trip() -> None:
    assert [label(s) for s in Severity] == ["error", "warning", "info"]
    assert [from_label(label(s)) for s in Severity] == list(Severity)


def test_a_rule_file_says_error_and_the_catalog_dumps_error() -> None:
    raw = {"id": "GF999", "title": "t", "severity": "error", "description": "d", "sources": []}
    info = RuleInfo.model_validate(raw)
    assert info.severity is Severity.critical
    assert info.model_dump(mode="json")["severity"] == "error"
    for wrong in ("critical", "note", 2):
        with pytest.raises(ValidationError):
            RuleInfo.model_validate({**raw, "severity": wrong})


def test_a_finding_is_written_with_the_doctors_word_and_errors_come_first() -> None:
    info = Finding("GF001", Severity.info, "a.yaml", "", "m", "f", 1)
    error = Finding("GF002", Severity.critical, "b.yaml", "", "m", "f", 9)
    assert error.to_json()["severity"] == "error"
    assert ordered([info, error]) == [error, info]
