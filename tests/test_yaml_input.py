"""YAML and JSON a person hands gpufleet are read with bounds: alias bombs, self-references and deep nesting are
refused with a message naming the limit, quickly, instead of exhausting memory or the stack; so are values Python
cannot build (integers past 4,300 digits, dates that do not exist), control characters and bytes that are not UTF-8,
each as a one-line `ManifestError` naming the file and the fix."""

from __future__ import annotations

import os
from pathlib import Path

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


HUGE = "9" * 5000


@pytest.mark.parametrize("capture", [False, True], ids=["config", "capture"])
@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("a: 1\nb: x\x00y\n", r"control character \(U\+0000\) at line 2, column 5"),
        ("a: \x1b[31mred\n", r"control character \(U\+001B\) at line 1, column 4"),
        ("a: " + HUGE, "an integer of more than 4,300 digits"),
        ("a: -" + HUGE, "an integer of more than 4,300 digits"),
        (f"? {HUGE}\n: 1\n", "an integer of more than 4,300 digits"),
        ("a: 0x" + "f" * 5000, "an integer of more than 4,300 digits"),
        ("a: 1" + ":59" * 3000, "an integer of more than 4,300 digits"),
        ("a: 0x" + "f" * 4000, "an integer of more than 4,300 digits"),  # short text, a value past the limit
        ("a: 2024-13-45", "a value that cannot be read"),
        ("a: " + "[" * 100_000, "nest"),  # ours at 64 levels, libyaml's past 1,000 for a capture
    ],
)
def test_values_python_cannot_build_are_refused(text: str, why: str, capture: bool) -> None:
    with pytest.raises(ManifestError, match=why) as err:
        yaml_input.load_documents(text, "cfg.yaml", capture=capture)
    assert err.value.message.startswith("cfg.yaml: ") and err.value.fix and "\n" not in err.value.message


def test_ordinary_numbers_and_dates_still_read() -> None:
    text = "a: 0x10\nb: 1:20\nc: -1_000\nd: 2024-02-29\ne: 1.0e+400\nf: " + "9" * 4000 + "\n"
    for capture in (False, True):
        doc = yaml_input.load_documents(text, "ok.yaml", capture=capture)[0]
        assert (doc["a"], doc["b"], doc["c"], str(doc["d"]), doc["e"]) == (16, 80, -1000, "2024-02-29", float("inf"))
        assert doc["f"] == int("9" * 4000)


def test_a_capture_may_nest_deeper_than_a_config_but_not_without_end() -> None:
    deep = "a: " + "[" * 100 + "]" * 100
    with pytest.raises(ManifestError, match="nested deeper than 64 levels"):
        yaml_input.load(deep, "cfg.yaml")
    assert yaml_input.load_documents(deep, "pods.yaml", capture=True)
    for text in ("a: " + "[" * 300 + "]" * 300, "a: &x 1\nb: " + "[" * 300 + "]" * 300):  # libyaml, and bounded
        with pytest.raises(ManifestError, match="nested deeper than 200 levels"):
            yaml_input.load_documents(text, "pods.yaml", capture=True)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{"a": ' + HUGE + "}", "an integer of more than 4,300 digits"),
        ("[" * 100_000, "nested deeper than 64 levels"),
        ("[" * 100 + "]" * 100, "nested deeper than 64 levels"),
        ('{"a": "x\x01"}', "not valid JSON at line 1, column 9: Invalid control character"),
        ('{"a": [1,\n}', "not valid JSON at line 2, column 1"),
    ],
)
def test_json_is_read_with_the_same_bounds(text: str, why: str) -> None:
    with pytest.raises(ManifestError, match=why):
        yaml_input.load_json(text, "nodes.json")


def test_json_captures_nest_deeper_within_their_bound() -> None:
    assert yaml_input.load_json("[" * 100 + "]" * 100, "pods.json", capture=True)
    with pytest.raises(ManifestError, match="nested deeper than 200 levels"):
        yaml_input.load_json("[" * 300 + "]" * 300, "pods.json", capture=True)


def test_read_file_names_the_file_and_what_is_wrong(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(path: Path) -> str:
        with pytest.raises(ManifestError) as err:
            yaml_input.read_file(path)
        assert err.value.message.startswith(f"{path}: ") and err.value.fix
        return err.value.message

    assert "file not found" in refused(tmp_path / "nope.yaml")
    assert "is a directory" in refused(tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert "not a regular file" in refused(fifo)
    latin1 = tmp_path / "latin1.yaml"
    latin1.write_bytes(b"a: 1\nname: caf\xe9\n")
    assert "not UTF-8 text: byte 0xe9 at line 2" in refused(latin1)
    utf16 = tmp_path / "utf16.yaml"
    utf16.write_bytes("a: 1\n".encode("utf-16"))
    assert "UTF-16" in refused(utf16)
    bom = tmp_path / "bom.yaml"
    bom.write_bytes(b"\xef\xbb\xbfa: 1\n")
    assert yaml_input.load_file(bom) == {"a": 1}
    monkeypatch.setattr(yaml_input, "MAX_BYTES", 100)
    big = tmp_path / "big.yaml"
    big.write_text("a: " + "x" * 200)
    assert "larger than 100 bytes" in refused(big)


def test_load_file_reads_json_by_its_suffix(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text('{"a": [1, 2]}')
    (tmp_path / "a.yaml").write_text("a: [1, 2]\n---\nb: 1\n")
    assert yaml_input.load_file(tmp_path / "a.json") == {"a": [1, 2]}
    assert yaml_input.load_file_documents(tmp_path / "a.yaml") == [{"a": [1, 2]}, {"b": 1}]
    with pytest.raises(ManifestError, match="not valid JSON"):
        yaml_input.load_file((tmp_path / "a.yaml").rename(tmp_path / "b.json"))
