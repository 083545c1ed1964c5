"""The setup-error catalog: every entry's own text is found by its own patterns and by no entry before it, each has
its codes' numbers, a cause, a fix and a source."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from gpufleet.catalog.setup_errors import (
    SetupError,
    any_setup_error_pattern,
    literal_prefix,
    load_setup_errors,
    search_setup_error,
    setup_error,
    setup_error_hint,
)

ERRORS = load_setup_errors()


def test_the_catalog_holds_each_fault_the_playbook_names() -> None:
    assert {"no-kernel-image", "insufficient-driver", "nvml-version-mismatch", "driver-not-loaded",
            "cuda-requirement-unsatisfied", "nvidia-smi-missing"} <= set(ERRORS)  # fmt: skip
    assert setup_error("insufficient-driver").codes == ("cudaErrorInsufficientDriver = 35",)
    assert setup_error("insufficient-driver").code == "cudaErrorInsufficientDriver"
    assert setup_error("nvidia-smi-missing").code == "nvidia-smi-missing"  # no enum: its id


@pytest.mark.parametrize("error_id", sorted(ERRORS))
def test_each_message_is_found_as_itself(error_id: str) -> None:
    error = ERRORS[error_id]
    assert error.cause and error.fix and error.source and error.patterns
    assert all(re.fullmatch(r"\w+ = \d+", code) for code in error.codes), error.codes
    text = error.message.replace("%s", "cuda>=12.8")
    found = search_setup_error(text)
    assert found is not None and found[0].id == error_id
    assert re.search(any_setup_error_pattern(), text)


def test_each_code_name_is_found_as_its_entry() -> None:
    for error in ERRORS.values():
        for code in error.codes:
            name = code.split(" =")[0]
            found = search_setup_error(f"error: {name}")
            assert found is not None and found[0].id == error.id, name


def test_a_line_without_any_is_none() -> None:
    assert search_setup_error("run nvidia-smi to see the driver version") is None
    assert search_setup_error("CUDA out of memory. Tried to allocate 2.00 GiB") is None


def test_every_text_holds_the_literal_start_the_hint_searches_for() -> None:
    """Lines are passed over unless the hint (the patterns' literal starts) is in them: it must be in every text."""
    hint = setup_error_hint()
    for error in ERRORS.values():
        assert hint.search(error.message.replace("%s", "cuda>=12.8")), error.id
        for pattern in error.patterns:
            prefix = literal_prefix(pattern)
            assert len(prefix) >= 4 and hint.search(prefix), pattern
    assert literal_prefix("nvidia-smi: (?:command )?not found") == "nvidia-smi: "
    assert literal_prefix("The driver is too old \\(found") == "The driver is too old "
    assert literal_prefix("abcd?e") == "abc"


def test_a_pattern_without_a_literal_start_is_refused() -> None:
    with pytest.raises(ValidationError, match="literal text"):
        SetupError(id="x", layer="cuda", codes=(), message="m", patterns=("(?:a|b)c",), cause="c", fix="f", source="s")
