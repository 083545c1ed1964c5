"""YAML a person hands gpufleet is read with bounds: alias bombs, self-references and deep nesting are refused with
a message naming the limit, quickly, instead of exhausting memory or the stack."""

from __future__ import annotations

import pytest

from gpufleet import yaml_input
from gpufleet.errors import ManifestError

LAUGHS = "\n".join(
    ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    + [f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]" for p, n in zip("abcdefgh", "bcdefghi", strict=True)]
)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (LAUGHS, "expands to more than"),
        ("k: &k [" + ", ".join(["1"] * 1000) + "]\nl: [" + ", ".join(["*k"] * 300) + "]\n", "expands to more than"),
        ("&a [*a]", "holds itself"),
        ("a: &a {b: *a}", "holds itself"),
        ("[" * 200 + "]" * 200, "nested deeper than"),
        ("a: [\n", "not valid YAML at line 2"),
    ],
)
def test_what_is_refused_and_why(text: str, why: str) -> None:
    with pytest.raises(ManifestError, match=why) as err:
        yaml_input.load(text, "policy.yaml")
    assert err.value.message.startswith("policy.yaml: ") and err.value.fix


def test_plain_documents_and_shared_anchors_read_as_usual() -> None:
    assert yaml_input.load("x: &x {a: 1}\ny: *x\nz: [1, 2, {c: d}]\n", "ok") == {
        "x": {"a": 1},
        "y": {"a": 1},
        "z": [1, 2, {"c": "d"}],
    }
    assert yaml_input.load_documents("a: 1\n---\nb: 2\n", "two") == [{"a": 1}, {"b": 2}]
    assert yaml_input.load("", "empty") is None
    with pytest.raises(ManifestError, match="2 YAML documents"):
        yaml_input.load("a: 1\n---\nb: 2\n", "two")


def test_oversized_text_is_refused_before_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(yaml_input, "MAX_BYTES", 100)
    with pytest.raises(ManifestError, match="larger than"):
        yaml_input.load("a: " + "x" * 200, "big.yaml")
