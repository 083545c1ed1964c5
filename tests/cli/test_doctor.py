from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.clirun import gpufleet
from tests.doctor.helpers import gpu_pod, write

BAD = gpu_pod(requests={"nvidia.com/gpu": 1})
GOOD = gpu_pod()


def test_json_findings_have_the_documented_fields_and_errors_exit_1(tmp_path: Path) -> None:
    f = write(tmp_path, "bad.yaml", BAD)
    ran = gpufleet("doctor", str(f), "-o", "json")
    assert ran.returncode == 1, ran.stderr
    findings = json.loads(ran.stdout)
    assert findings and all(set(x) == {"rule", "severity", "file", "object", "message", "fix"} for x in findings)
    expected = {"rule": "GF001", "severity": "error", "file": str(f), "object": "Pod/ml/train"}
    assert expected.items() <= findings[0].items()


def test_no_error_exits_0_and_the_table_says_what_was_checked(tmp_path: Path) -> None:
    f = write(tmp_path, "good.yaml", GOOD)
    ran = gpufleet("doctor", str(f))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "0 error(s)" in ran.stdout and "1 file(s), 1 object(s)" in ran.stdout


def test_the_table_names_rule_object_place_and_fix(tmp_path: Path) -> None:
    f = write(tmp_path, "bad.yaml", BAD)
    ran = gpufleet("doctor", str(f))
    assert ran.returncode == 1
    assert "GF001" in ran.stdout and "Pod/ml/train" in ran.stdout and f"{f}:1" in ran.stdout
    assert "resources.limits" in ran.stdout


def test_sarif_output(tmp_path: Path) -> None:
    f = write(tmp_path, "bad.yaml", BAD)
    sarif = json.loads(gpufleet("doctor", str(f), "-o", "sarif").stdout)
    assert sarif["version"] == "2.1.0"
    [run] = sarif["runs"]
    rules = run["tool"]["driver"]["rules"]
    result = next(r for r in run["results"] if r["ruleId"] == "GF001")
    assert rules[result["ruleIndex"]]["id"] == "GF001"
    assert result["level"] == "error"
    location = result["locations"][0]
    assert location["physicalLocation"] == {"artifactLocation": {"uri": str(f)}, "region": {"startLine": 1}}
    assert location["logicalLocations"][0]["fullyQualifiedName"] == "Pod/ml/train"


def test_stdin_and_nodes_option(tmp_path: Path) -> None:
    nodes = write(tmp_path, "nodes.json", {"apiVersion": "v1", "kind": "List", "items": []})
    ran = gpufleet("doctor", "-", "--nodes", str(nodes), "-o", "yaml", input=yaml.safe_dump(BAD))
    assert ran.returncode == 1
    assert yaml.safe_load(ran.stdout)[0]["file"] == "<stdin>"


def test_bad_usage_is_one_clear_line(tmp_path: Path) -> None:
    ran = gpufleet("doctor")
    assert ran.returncode != 0 and "nothing to check" in ran.stderr and "Traceback" not in ran.stderr
    ran = gpufleet("doctor", str(tmp_path / "missing.yaml"))
    assert ran.returncode != 0 and "no such file" in ran.stderr
    ran = gpufleet("doctor", str(write(tmp_path, "g.yaml", GOOD)), "--kube-version", "latest")
    assert ran.returncode != 0 and "X.Y" in ran.stderr
    facts = write(tmp_path, "facts.yaml", "nodes: [1, 2]\n")
    ran = gpufleet("doctor", str(write(tmp_path, "g.yaml", GOOD)), "--cluster-facts", str(facts))
    assert ran.returncode != 0 and "facts.yaml" in ran.stderr and "Traceback" not in ran.stderr


def test_list_rules(tmp_path: Path) -> None:
    listed = json.loads(gpufleet("doctor", "--list-rules", "-o", "json").stdout)
    ids = [r["id"] for r in listed]
    assert ids == sorted(ids) and "GF001" in ids and all(r["sources"] for r in listed)


def test_a_crafted_kind_loads_no_schema_and_is_reported_as_unknown(tmp_path: Path) -> None:
    f = tmp_path / "crafted.yaml"
    f.write_text("apiVersion: v1\nkind: ../../../kubernetes_validate/kubernetes-json-schema/x\nmetadata: {name: a}\n")
    ran = gpufleet("doctor", str(f), "-o", "json")
    assert "Traceback" not in ran.stderr and "internal error" not in ran.stderr, ran.stderr
    findings = json.loads(ran.stdout)
    assert [x["rule"] for x in findings] == ["GF090"] and "has no schema here" in findings[0]["message"], findings


def test_without_the_kubernetes_schemas_the_rules_still_run_and_a_note_says_what_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpufleet.doctor import schema

    monkeypatch.setattr(schema, "available", lambda: False)  # `scripts/up` alone: no deploy extra
    f = write(tmp_path, "bad.yaml", BAD)
    ran = gpufleet("doctor", str(f))
    assert ran.returncode == 1 and "GF001" in ran.stdout
    assert "schemas are not installed" in ran.stderr and "gpufleet[deploy]" in ran.stderr
    quiet = gpufleet("doctor", str(f), "--no-schema")
    assert "schemas are not installed" not in quiet.stderr
