"""The setup errors that stop a GPU program before it computes (data/setup_errors.yaml): a driver, a CUDA runtime
and a GPU architecture that do not fit together, in the words CUDA, NVML, nvidia-smi, the NVIDIA container toolkit
and a shell print them, each with its error codes, cause, fix and source. One entry per fault: triage, nvidia-smi's
failure lines, DCGM's diagnostic messages and NCCL's log classes take the same text's meaning from here."""

from __future__ import annotations

import re
from functools import cache

import yaml
from pydantic import BaseModel, ConfigDict, field_validator

from gpufleet.catalog._files import read_text


class SetupError(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    layer: str  # who prints it: cuda, nvml, nvidia-smi, container-toolkit, shell
    codes: tuple[str, ...]  # "cudaErrorInsufficientDriver = 35"
    message: str  # the exact text
    patterns: tuple[str, ...]  # regular expressions searched in one line
    cause: str
    fix: str
    source: str

    @field_validator("patterns")
    @classmethod
    def _compiles(cls, patterns: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in patterns:
            re.compile(pattern)
        return patterns

    @property
    def code(self) -> str:
        """The first error enum name, or the id when the text has none (a shell's, the container toolkit's)."""
        return self.codes[0].split(" =")[0] if self.codes else self.id


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")

    errors: tuple[SetupError, ...]


@cache
def load_setup_errors() -> dict[str, SetupError]:
    """The catalog by id, in the file's order."""
    errors = _File.model_validate(yaml.safe_load(read_text("setup_errors.yaml"))).errors
    by_id = {e.id: e for e in errors}
    if len(by_id) != len(errors):
        raise ValueError("setup_errors.yaml lists an id twice")
    return by_id


def setup_error(error_id: str) -> SetupError:
    return load_setup_errors()[error_id]


@cache
def _compiled() -> tuple[tuple[re.Pattern[str], SetupError], ...]:
    return tuple((re.compile(p), e) for e in load_setup_errors().values() for p in e.patterns)


def search_setup_error(line: str) -> tuple[SetupError, re.Match[str]] | None:
    """The first catalog entry (in the file's order) whose pattern the line holds, with where it matched."""
    for pattern, error in _compiled():
        if (m := pattern.search(line)) is not None:
            return error, m
    return None


def any_setup_error_pattern() -> str:
    """One regular expression that matches a line holding any entry's text (the triage format's sign)."""
    return "|".join(f"(?:{p})" for e in load_setup_errors().values() for p in e.patterns)
