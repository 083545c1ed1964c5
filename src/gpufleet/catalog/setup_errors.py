"""The setup errors that stop a GPU program before it computes (data/setup_errors.yaml): a driver, a CUDA runtime
and a GPU architecture that do not fit together, in the words CUDA, NVML, nvidia-smi, the NVIDIA container toolkit
and a shell print them, each with its error codes, cause, fix and source. One entry per fault: triage, nvidia-smi's
failure lines, DCGM's diagnostic messages and NCCL's log classes take the same text's meaning from here."""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache

import yaml
from pydantic import BaseModel, ConfigDict, field_validator

from gpufleet.catalog._files import read_text

MIN_PREFIX = 4  # each pattern starts with this much literal text: the hint every log line is searched for
_META = re.compile(r"[\\.^$*+?{}\[\]|()]")


def literal_prefix(pattern: str) -> str:
    """The literal text every match of `pattern` starts with: what comes before its first regex syntax (less the
    last character when a quantifier follows it)."""
    m = _META.search(pattern)
    if m is None:
        return pattern
    prefix = pattern[: m.start()]
    return prefix[:-1] if m.group() in "?*{" else prefix


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
            if len(literal_prefix(pattern)) < MIN_PREFIX:
                raise ValueError(f"{pattern!r} does not start with {MIN_PREFIX} characters of literal text")
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
    return next(find_setup_errors(line), None)


def find_setup_errors(line: str) -> Iterator[tuple[SetupError, re.Match[str]]]:
    """Every place the line holds an entry's text, the entries in the file's order."""
    for pattern, error in _compiled():
        for m in pattern.finditer(line):
            yield error, m


@cache
def setup_error_hint() -> re.Pattern[str]:
    """A line that holds none of the patterns' literal starts holds no setup error: one search of plain strings,
    tried before the patterns (an alternation of the patterns themselves is several times slower per line)."""
    prefixes = sorted({literal_prefix(p) for e in load_setup_errors().values() for p in e.patterns}, key=len)
    return re.compile("|".join(map(re.escape, reversed(prefixes))))


def any_setup_error_pattern() -> str:
    """One regular expression that matches a line holding any entry's text (the triage format's sign)."""
    return "|".join(f"(?:{p})" for e in load_setup_errors().values() for p in e.patterns)
