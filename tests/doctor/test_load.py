from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from gpufleet.doctor.load import input_files, load
from gpufleet.errors import UserError


def test_multi_document_yaml_keeps_each_documents_line(tmp_path: Path) -> None:
    f = tmp_path / "all.yaml"
    f.write_text("# Source: chart/templates/a.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n"
                 "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n--- # comment\n---\n")  # fmt: skip
    loaded = load([str(f)])
    assert [(d.line, d.data["metadata"]["name"]) for d in loaded.documents] == [(1, "a"), (5, "b")]
    assert loaded.findings == []


def test_a_broken_document_loses_nothing_else_and_names_its_line(tmp_path: Path) -> None:
    f = tmp_path / "x.yaml"
    f.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\nkind: [unclosed\n---\n"
                 "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n")  # fmt: skip
    loaded = load([str(f)])
    assert [d.data["metadata"]["name"] for d in loaded.documents] == ["a", "c"]
    [problem] = loaded.findings
    assert problem.rule == "GF092" and problem.severity == "critical"
    assert problem.line >= 5 and "not valid YAML" in problem.message


def test_kubectl_json_lists_become_their_items(tmp_path: Path) -> None:
    f = tmp_path / "nodes.json"
    items = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"n{i}"}} for i in range(3)]
    f.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    assert [d.data["metadata"]["name"] for d in load([str(f)]).documents] == ["n0", "n1", "n2"]


def test_bad_json_is_reported_with_its_position(tmp_path: Path) -> None:
    f = tmp_path / "pods.json"
    f.write_text('{"items": [\n{"kind": }\n]}')
    [problem] = load([str(f)]).findings
    assert problem.rule == "GF092" and "line 2" in problem.message


def test_binary_and_non_utf8_files_are_reported_not_crashed_on(tmp_path: Path) -> None:
    (tmp_path / "image.yaml").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00")
    (tmp_path / "latin1.yaml").write_bytes("name: caf\xe9".encode("latin-1"))
    findings = {f.file.rsplit("/", 1)[1]: f for f in load([str(tmp_path)]).findings}
    assert findings["image.yaml"].severity == "info" and "binary" in findings["image.yaml"].message
    assert findings["latin1.yaml"].severity == "critical" and "UTF-8" in findings["latin1.yaml"].message


def test_unrendered_helm_templates_are_reported_but_prometheus_templates_are_read(tmp_path: Path) -> None:
    f = tmp_path / "t.yaml"
    f.write_text(
        'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ include "x.fullname" . }}\n---\n'
        "apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\nmetadata: {name: r}\nspec:\n  groups:\n"
        "  - name: g\n    rules:\n    - alert: A\n      expr: up == 0\n"
        "      annotations: {summary: '{{ $labels.instance }} is down'}\n"
    )
    loaded = load([str(f)])
    assert [d.data["kind"] for d in loaded.documents] == ["PrometheusRule"]
    [problem] = loaded.findings
    assert problem.rule == "GF091" and problem.line == 1 and "helm template" in problem.fix


def test_alias_bombs_are_refused(tmp_path: Path) -> None:
    lines = ['a: &a ["x","x","x","x","x","x","x","x","x","x"]']
    for i in range(1, 9):
        prev, cur = chr(ord("a") + i - 1), chr(ord("a") + i)
        lines.append(f"{cur}: &{cur} [{','.join(['*' + prev] * 10)}]")
    f = tmp_path / "bomb.yaml"
    f.write_text("\n".join(lines) + "\n")
    [problem] = load([str(f)]).findings
    assert problem.rule == "GF092" and "aliases" in problem.message


def test_directories_are_walked_in_order_skipping_hidden_and_other_files(tmp_path: Path) -> None:
    for name in ("b/x.yaml", "a.yml", "c.json", ".git/config.yaml", "README.md", "sub/.hidden/y.yaml"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("{}")
    names = [Path(p).relative_to(tmp_path).as_posix() for p in input_files([str(tmp_path)])]
    assert names == ["a.yml", "b/x.yaml", "c.json"]


def test_a_missing_path_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such file"):
        input_files([str(tmp_path / "nope.yaml")])


def test_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    data = b"apiVersion: v1\nkind: Namespace\nmetadata: {name: ml}\n"
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data)))
    [doc] = load(["-"]).documents
    assert doc.file == "<stdin>" and doc.data["metadata"]["name"] == "ml"
