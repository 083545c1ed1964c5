"""GF040 (an operand pinned off its release) and GF041 (a toolkit older than a security fix), on ClusterPolicies and
operator Deployments as the GPU Operator's chart renders them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpufleet.doctor.catalog import rule_catalog
from gpufleet.doctor.facts import parse_version
from gpufleet.doctor.rules.operands import build, fixes, release_rows, shipped
from gpufleet.model import Severity
from tests.doctor.helpers import doctor, hits
from tests.doctor.rules.test_stack import cluster_policy, no_rule_failed, only, operator


def run(tmp_path: Path, version: str | None, **spec: Any) -> Any:
    files: list[tuple[str, Any]] = [("policy.yaml", cluster_policy(**spec))]
    if version:
        files.append(("operator.yaml", operator(version)))
    report = doctor(tmp_path, *files)
    no_rule_failed(report)
    return report


# --- the data ---------------------------------------------------------------------------------------------------------


def test_the_component_table_holds_what_the_charts_ship() -> None:
    catalog = rule_catalog()
    assert catalog["GF040"].sources and catalog["GF041"].sources
    releases = {s.release for s in shipped()}
    assert (23, 9, 0) in releases and (26, 7, 0) in releases
    for release in releases:
        sections = {s.section for s in shipped() if s.release == release}
        assert {"toolkit", "devicePlugin", "dcgmExporter", "driver"} <= sections, release
    # read by hand from deployments/gpu-operator/values.yaml at v25.3.4 and v24.9.2
    rows = {s.section: s.version for s in shipped() if s.release == (25, 3, 4)}
    assert rows["toolkit"] == "v1.17.8-ubuntu20.04" and rows["devicePlugin"] == "v0.17.4"
    assert rows["dcgmExporter"] == "4.3.1-4.4.0-ubuntu22.04" and rows["driver"] == "580.82.07"
    assert {s.section: s.version for s in shipped() if s.release == (24, 9, 2)}["toolkit"] == "v1.17.4-ubuntu20.04"


def test_fixes_are_in_order_and_each_release_named_ships_its_fix() -> None:
    fixed = [parse_version(f.fixed) for f in fixes()]
    assert fixed == sorted(fixed)  # type: ignore[type-var]
    for fix in fixes():
        default = next(
            s.version for s in shipped() if s.release == parse_version(fix.operator) and s.section == "toolkit"
        )
        assert parse_version(build(default)) >= parse_version(fix.fixed), fix  # type: ignore[operator]


def test_builds_compare_without_their_distribution() -> None:
    assert build("v1.17.8-ubuntu20.04") == build("v1.17.8-ubi8") == build("1.17.8") == "1.17.8"
    assert build("4.3.1-4.4.0-ubuntu22.04") == build("4.3.1-4.4.0-distroless") == "4.3.1-4.4.0"
    rows, named = release_rows((25, 3))
    assert named == "25.3.x" and {build(s.version) for s in rows if s.section == "toolkit"} >= {"1.17.5", "1.17.8"}


# --- GF040 ------------------------------------------------------------------------------------------------------------


def test_a_toolkit_pinned_from_an_older_release_is_named_with_the_releases_own(tmp_path: Path) -> None:
    report = run(tmp_path, "25.3.4", toolkit={"enabled": True, "version": "v1.14.3-ubuntu20.04"})
    finding = only(report, "GF040")
    assert finding.severity is Severity.warning and finding.object == "ClusterPolicy/cluster-policy"
    assert "spec.toolkit.version: v1.14.3-ubuntu20.04" in finding.message
    assert "GPU Operator 25.3.4 ships" in finding.message and "container-toolkit 1.17.8" in finding.message


def test_the_same_build_for_another_distribution_is_fine(tmp_path: Path) -> None:
    assert not hits(run(tmp_path, "25.3.4", toolkit={"version": "v1.17.8-ubi8"}), "GF040")


def test_a_tagged_image_counts_as_a_pin(tmp_path: Path) -> None:
    report = run(tmp_path, "26.3.3", devicePlugin={"image": "nvcr.io/nvidia/k8s-device-plugin:v0.14.0"})
    finding = only(report, "GF040")
    assert "spec.devicePlugin.image: v0.14.0" in finding.message and "0.19.3" in finding.message
    assert not hits(run(tmp_path / "b", "26.3.3", devicePlugin={"image": "k8s-device-plugin@sha256:ab"}), "GF040")


def test_a_release_known_only_by_its_series_takes_every_patch(tmp_path: Path) -> None:
    policy = cluster_policy(toolkit={"version": "v1.17.5-ubuntu20.04"})
    assert not hits(doctor(tmp_path, ("p.yaml", policy), facts={"gpuOperatorVersion": "25.3"}), "GF040")
    policy = cluster_policy(toolkit={"version": "v1.16.2-ubuntu20.04"})
    finding = only(doctor(tmp_path / "b", ("p.yaml", policy), facts={"gpuOperatorVersion": "25.3"}), "GF040")
    assert "GPU Operator 25.3.x ships" in finding.message


def test_no_judgement_without_an_operator_version_or_for_the_driver(tmp_path: Path) -> None:
    assert not hits(run(tmp_path, None, toolkit={"version": "v1.14.3"}), "GF040")
    assert not hits(run(tmp_path / "b", "25.3.4", driver={"version": "570.172.08"}), "GF040")
    assert not hits(run(tmp_path / "c", "99.1.0", toolkit={"version": "v1.14.3"}), "GF040")


# --- GF041 ------------------------------------------------------------------------------------------------------------


def test_an_operator_whose_default_toolkit_predates_the_fixes_is_critical(tmp_path: Path) -> None:
    finding = only(run(tmp_path, "24.6.1"), "GF041")
    assert finding.severity is Severity.critical
    assert "Container Toolkit 1.16.1 (GPU Operator 24.6.1's default)" in finding.message
    assert "CVE-2024-0132" in finding.message and "CVE-2025-23266" in finding.message
    assert "1.17.8 or later (GPU Operator 25.3.1 or later" in finding.fix and "a_id/5582" in finding.fix


def test_a_pinned_toolkit_before_the_last_fix_names_only_what_it_misses(tmp_path: Path) -> None:
    report = run(tmp_path, "25.3.4", toolkit={"version": "v1.17.7-ubuntu20.04"})
    finding = only(report, "GF041")
    assert "CVE-2025-23266" in finding.message and "CVE-2024" not in finding.message
    assert hits(report, "GF040")  # and 25.3.4 ships 1.17.8


def test_a_fixed_toolkit_or_one_the_operator_does_not_install_is_fine(tmp_path: Path) -> None:
    assert not hits(run(tmp_path, "25.3.4"), "GF041")
    assert not hits(run(tmp_path / "b", "24.6.1", toolkit={"enabled": False}), "GF041")
