"""`gpufleet deploy render`: files and printed manifests, and bad input as one clean error."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.clirun import Ran, gpufleet
from tests.conftest import REPO_ROOT

EXAMPLE = REPO_ROOT / "deploy" / "kubernetes" / "values.yaml"


def assert_clean_error(result: Ran, *parts: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    stderr = result.stderr
    assert stderr.startswith("error: ") and "\n  fix: " in stderr and "Traceback" not in stderr, stderr
    for part in parts:
        assert part in stderr, stderr


def test_writes_one_file_per_object(tmp_path: Path) -> None:
    out = tmp_path / "manifests"
    result = gpufleet("deploy", "render", "-f", str(EXAMPLE), "--out", str(out))
    assert result.returncode == 0, result.stderr
    names = sorted(p.name for p in out.iterdir())
    assert "daemonset-gpufleet-agent.yaml" in names and "deployment-gpufleet-server.yaml" in names
    assert f"wrote {out / 'daemonset-gpufleet-agent.yaml'}" in result.stdout
    assert "objects valid for Kubernetes 1.33" in result.stdout
    assert "not checked (custom resources): PrometheusRule gpufleet/gpufleet-rules" in result.stdout
    for path in out.iterdir():
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        assert len(docs) == 1 and docs[0]["kind"].lower() == path.name.split("-")[0]


def test_prints_yaml_and_json() -> None:
    result = gpufleet("deploy", "render", "-f", str(EXAMPLE), "--name", "gf", "--namespace", "gpu-ops")
    assert result.returncode == 0, result.stderr
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    assert {d["kind"] for d in docs} >= {"DaemonSet", "Deployment", "ClusterRole", "ServiceMonitor"}
    assert {d["metadata"].get("namespace", "gpu-ops") for d in docs} == {"gpu-ops"}
    assert any(d["metadata"]["name"] == "gf-gpufleet-agent" for d in docs)
    assert "not checked (custom resources)" in result.stderr  # the note stays out of the manifests
    result = gpufleet("deploy", "render", "-f", str(EXAMPLE), "-o", "json", "--kube-version", "v1.30")
    assert result.returncode == 0, result.stderr
    listed = json.loads(result.stdout)
    assert listed["apiVersion"] == "v1" and listed["kind"] == "List" and len(listed["items"]) == len(docs)


def test_values_from_stdin_and_chart_defaults() -> None:
    piped = gpufleet("deploy", "render", "-f", "-", input="server:\n  replicas: 3\n")
    assert piped.returncode == 0, piped.stderr
    deployment = next(d for d in yaml.safe_load_all(piped.stdout) if d and d["kind"] == "Deployment")
    assert deployment["spec"]["replicas"] == 3
    defaults = gpufleet("deploy", "render")
    assert defaults.returncode == 0 and "kind: DaemonSet" in defaults.stdout


def test_bad_values_files(tmp_path: Path) -> None:
    not_yaml = tmp_path / "broken.yaml"
    not_yaml.write_text("server:\n  replicas: [2\n")
    assert_clean_error(gpufleet("deploy", "render", "-f", str(not_yaml)), "broken.yaml: not valid YAML")
    wrong_type = tmp_path / "wrong.yaml"
    wrong_type.write_text("server:\n  replicas: two\n")
    assert_clean_error(gpufleet("deploy", "render", "-f", str(wrong_type)), "server.replicas: got string, want integer")
    unknown = tmp_path / "typo.yaml"
    unknown.write_text("agent:\n  tolerationz: []\n")
    assert_clean_error(gpufleet("deploy", "render", "-f", str(unknown)), "'tolerationz' not allowed")
    no_postgres = tmp_path / "sqlite.yaml"
    no_postgres.write_text("server:\n  replicas: 2\n  postgresql:\n    enabled: false\n")
    assert_clean_error(
        gpufleet("deploy", "render", "-f", str(no_postgres)), "server.postgresql.enabled is false", "server.replicas=1"
    )
    assert_clean_error(gpufleet("deploy", "render", "-f", str(tmp_path / "missing.yaml")), "no such file")


def test_bad_options(tmp_path: Path) -> None:
    assert_clean_error(gpufleet("deploy", "render", "-o", "table"), "-o table")
    assert_clean_error(gpufleet("deploy", "render", "--kube-version", "1.29"), "1.30 or newer")
    assert_clean_error(gpufleet("deploy", "render", "--chart", str(tmp_path)), "not a Helm chart")
    (tmp_path / "Chart.yaml").write_text("apiVersion: v2\n")
    assert_clean_error(gpufleet("deploy", "render", "--chart", str(tmp_path)), "cannot load the chart", "name")
    assert_clean_error(gpufleet("deploy", "render", "--name", "Bad_Name"), "--name")


def test_size_prints_the_plan_and_json() -> None:
    ran = gpufleet("deploy", "size", "--nodes", "1024")
    assert ran.returncode == 0, ran.stderr
    assert "active series" in ran.stdout and "control-plane replicas" in ran.stdout
    body = json.loads(gpufleet("deploy", "size", "--nodes", "64", "--interval", "30s", "-o", "json").stdout)
    assert body["nodes"] == 64 and body["scrapeIntervalSeconds"] == 30
    assert body["samplesPerSecond"] == round(body["activeSeries"] / 30, 1)
    bad = gpufleet("deploy", "size", "--nodes", "64", "--interval", "0s")
    assert bad.returncode != 0 and "--interval" in bad.stderr
