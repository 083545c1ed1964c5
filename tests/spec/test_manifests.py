from pathlib import Path

import pytest

from gpufleet.errors import ManifestError
from gpufleet.spec.base import format_duration, parse_duration
from gpufleet.spec.loader import load_cluster, load_manifests, load_scenario

EXAMPLES = Path(__file__).resolve().parents[2] / "src" / "gpufleet" / "examples"

CLUSTER = """apiVersion: gpufleet.io/v1
kind: Cluster
metadata: {{name: c}}
spec:
  nodePools:
  - name: a
    count: 2
    gpu: {gpu}
"""


def _write(tmp_path: Path, text: str, name: str = "m.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*/*.yaml")), ids=lambda p: p.name)
def test_shipped_examples_validate(path: Path) -> None:
    assert load_manifests(path)


def test_misspelled_field_names_file_field_and_allowed(tmp_path: Path) -> None:
    path = _write(tmp_path, CLUSTER.format(gpu="{modle: h100, count: 8}"))
    with pytest.raises(ManifestError) as err:
        load_cluster(path)
    text = str(err.value)
    assert str(path) in text
    assert "spec.nodePools[0].gpu.modle" in text
    assert "did you mean 'model'" in text
    assert "model, count" in (err.value.fix or "")


def test_unknown_gpu_model(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="unknown GPU model 'h1000'"):
        load_cluster(_write(tmp_path, CLUSTER.format(gpu="{model: h1000, count: 8}")))


def test_wrong_api_version_and_kind(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="apiVersion"):
        load_manifests(_write(tmp_path, "apiVersion: v1\nkind: Cluster\n"))
    with pytest.raises(ManifestError, match="unknown kind 'Pod'"):
        load_manifests(_write(tmp_path, "apiVersion: gpufleet.io/v1\nkind: Pod\n"))


def test_broken_yaml_names_the_line(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="line 2"):
        load_manifests(_write(tmp_path, "a: 1\nb: @x\n"))


def test_duplicate_pool_names(tmp_path: Path) -> None:
    text = CLUSTER.format(gpu="{model: t4, count: 1}") + "  - name: a\n    count: 1\n"
    with pytest.raises(ManifestError, match="repeated: a"):
        load_cluster(_write(tmp_path, text))


def test_scenario_faults_need_their_targets(tmp_path: Path) -> None:
    _write(tmp_path, CLUSTER.format(gpu="{model: h100-sxm, count: 8}"), "c.yaml")
    text = """apiVersion: gpufleet.io/v1
kind: Scenario
metadata: {name: s}
spec:
  cluster: c.yaml
  duration: 1h
  faults:
  - {at: 5m, type: gpu-off-bus, node: a-000}
"""
    with pytest.raises(ManifestError, match="needs `node` and `gpu`"):
        load_scenario(_write(tmp_path, text, "s.yaml"))


def test_scenario_fault_after_the_end(tmp_path: Path) -> None:
    _write(tmp_path, CLUSTER.format(gpu="{model: h100-sxm, count: 8}"), "c.yaml")
    text = """apiVersion: gpufleet.io/v1
kind: Scenario
metadata: {name: s}
spec:
  cluster: c.yaml
  duration: 1h
  faults:
  - {at: 2h, type: xid, node: a-000, gpu: 0, code: 79}
"""
    with pytest.raises(ManifestError, match="after the end"):
        load_scenario(_write(tmp_path, text, "s.yaml"))


def test_scenario_with_missing_cluster_file(tmp_path: Path) -> None:
    text = "apiVersion: gpufleet.io/v1\nkind: Scenario\nmetadata: {name: s}\nspec: {cluster: nope.yaml}\n"
    with pytest.raises(ManifestError, match="does not exist"):
        load_scenario(_write(tmp_path, text))


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("24h", 86400), ("2h30m", 9000), ("1.5s", 1.5), ("250ms", 0.25), (90, 90), ("1d", 86400)],
)
def test_parse_duration(text: str | int, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["", "5 minutes", "h", "-3s", -1, "3x"])
def test_parse_duration_rejects(bad: str | int) -> None:
    with pytest.raises(ValueError):
        parse_duration(bad)


def test_format_duration_round_trips() -> None:
    for seconds in (0.25, 1, 59, 61, 3600, 9000, 86400, 90061):
        assert parse_duration(format_duration(seconds)) == pytest.approx(seconds)
