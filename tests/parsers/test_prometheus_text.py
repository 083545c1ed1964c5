"""The Prometheus text parser, cross-checked against prometheus_client's own parser on real and written scrapes."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpufleet.parsers.prometheus_text import BadLine, Metadata, Sample, exact_int, parse_line, parse_lines
from tests.conftest import CAPTURES

DATA = CAPTURES


def _samples(text: str) -> list[Sample]:
    return [item for item in parse_lines(text.splitlines()) if isinstance(item, Sample)]


def _value(value: float | int) -> str:
    """Values compared exactly: prometheus_client keeps an integer literal as int, NaN never equals itself."""
    return str(value) if isinstance(value, int) or math.isnan(value) else repr(float(value))


def _reference(text: str) -> list[tuple[str, dict[str, str], str]]:
    out = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:  # it names a counter's samples with `_total` added: compare without it
            out.append((sample.name.removesuffix("_total"), dict(sample.labels), _value(sample.value)))
    return out


def _ours(text: str) -> list[tuple[str, dict[str, str], str]]:
    out = []
    for s in _samples(text):
        whole = exact_int(s)
        value = whole if whole is not None and "." not in s.value_text and "e" not in s.value_text.lower() else s.value
        out.append((s.name.removesuffix("_total"), s.label_map, _value(value)))
    return out


@pytest.mark.parametrize("path", sorted(DATA.glob("dcgm_exporter_*.txt")), ids=lambda p: p.name)
def test_agrees_with_prometheus_client(path: Path) -> None:
    text = path.read_text()
    assert _ours(text) == _reference(text)


def test_agrees_on_the_corpus(corpus: Path) -> None:
    for path in sorted(corpus.glob("dcgm_exporter_metrics_*.txt")):
        if ".source" in path.name:
            continue
        lines = [line for line in path.read_text().splitlines() if line.strip() not in ("...",)]
        text = "\n".join(line for line in lines if not line.startswith("curl ")) + "\n"
        assert _ours(text) == _reference(text), path.name


def test_the_grammar() -> None:
    text = (
        "# HELP x_total A counter with \\\\ and \\n in its help.\n"
        "# TYPE x_total counter\n"
        'x_total{a="1", b="say \\"hi\\"\\n",} 1e3 1700000000000\n'
        "x_total 2\n"
        'up{job="a"}\t+Inf\n'
        "nan_metric NaN\n"
        "# a comment\n"
        "\n"
    )
    items = list(parse_lines(text.splitlines()))
    help_line, type_line = items[0], items[1]
    assert isinstance(help_line, Metadata) and help_line.text == "A counter with \\ and \n in its help."
    assert isinstance(type_line, Metadata) and type_line.text == "counter"
    first = items[2]
    assert isinstance(first, Sample) and first.label_map == {"a": "1", "b": 'say "hi"\n'}
    assert first.value == 1000.0 and first.timestamp_ms == 1700000000000
    assert [type(i).__name__ for i in items] == ["Metadata", "Metadata", "Sample", "Sample", "Sample", "Sample"]
    assert math.isinf(items[4].value) and math.isnan(items[5].value)  # type: ignore[union-attr]
    assert _ours(text) == _reference(text)


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("curl -sL http://127.0.0.1:8080/metrics", "not a number"),
        ('m{a="1" 3', "separated"),
        ("m{a=1} 3", "quoted value"),
        ('m{a="1} 3', "unterminated"),
        ('m{1a="x"} 3', "bad label name"),
        ("m 1 2 3", "more than"),
        ("m 1_000", "not a number"),
        ("m 1 notatime", "timestamp"),
        ("{} 1", "metric name"),
        ("# TYPE m gauge-ish", "unknown metric type"),
    ],
)
def test_bad_lines_are_reported_not_raised(line: str, reason: str) -> None:
    item = parse_line(line, 7)
    assert isinstance(item, BadLine) and reason in item.reason and item.line == 7


def test_huge_numbers_and_exact_integers() -> None:
    blank = parse_line('DCGM_FI_DEV_MEMORY_TEMP{gpu="0"} 9223372036854775794', 1)
    assert isinstance(blank, Sample) and exact_int(blank) == 9223372036854775794
    huge = parse_line("m 1e400", 1)
    assert isinstance(huge, Sample) and math.isinf(huge.value) and exact_int(huge) is None
    digits = parse_line("m " + "9" * 5000, 1)
    assert isinstance(digits, Sample) and exact_int(digits) is None


def test_random_text_never_raises() -> None:
    rng = random.Random(7)
    alphabet = 'm{}="\\, \t#ab0.1eE+-_:xNaInf\n'
    for _ in range(3000):
        line = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        parse_line(line, 1)
