"""What gpufleet ships for installing itself passes its own doctor: the committed manifests, and the chart rendered
with each set of values the render tests use (no error, no warning)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.doctor.engine import run
from tests.conftest import REPO_ROOT
from tests.deploy.test_render import VARIANTS, objects


def test_the_committed_manifests_pass_the_doctor() -> None:
    report = run([str(REPO_ROOT / "deploy" / "kubernetes" / "manifests")])
    assert report.objects >= 10
    assert [f for f in report.findings if f.severity != "info"] == []


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_rendered_variant_passes_the_doctor(variant: str, tmp_path: Path) -> None:
    docs: list[dict[str, Any]] = [m.obj for m in objects(VARIANTS[variant])]
    path = tmp_path / "rendered.yaml"
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    for version in ((1, 30), (1, 33)):
        report = run([str(path)], kube_version=version)
        assert [f for f in report.findings if f.severity != "info"] == [], variant
