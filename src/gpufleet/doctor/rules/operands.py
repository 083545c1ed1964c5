"""Rules on the GPU Operator's operand images: a ClusterPolicy that overrides an operand's version away from what its
operator release ships (GF040), and a container toolkit older than a security fix (GF041).

What each release ships is data (data/gpu_operator_components.csv, regenerated from the chart's values.yaml at every
release tag by scripts/gpu_operator_components.py); the fixes are data (data/operand_fixes.yaml, from NVIDIA's
GPU Operator CVE table). The driver is left out of GF040: a release supports several driver branches besides its
default (the driver rules judge drivers).
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

from gpufleet.doctor.facts import Version, parse_version, show
from gpufleet.doctor.objects import K8sObject, as_dict
from gpufleet.doctor.rules.base import Context, Hit, rule
from gpufleet.doctor.versions import operator_version
from gpufleet.model import Severity

# Distribution suffixes NVIDIA tags the same build with; the build is what the release was tested with.
_DISTRO = re.compile(r"-(?:ubuntu\d+\.\d+|ubi\d+|rhel[\d.]+|distroless|centos\d+)$")
JUDGED = (
    "driver.manager",
    "toolkit",
    "devicePlugin",
    "dcgm",
    "dcgmExporter",
    "gfd",
    "migManager",
    "gds",
    "gdrcopy",
    "vgpuDeviceManager",
    "sandboxDevicePlugin",
    "kataManager",
    "ccManager",
)


@dataclass(frozen=True, slots=True)
class Shipped:
    release: Version
    section: str
    image: str
    version: str


@dataclass(frozen=True, slots=True)
class Fix:
    section: str
    fixed: str
    operator: str
    cves: tuple[str, ...]
    bulletin: str
    impact: str


def _data(name: str) -> str:
    return resources.files("gpufleet.doctor").joinpath("data", name).read_text("utf-8")


@cache
def shipped() -> tuple[Shipped, ...]:
    text = _data("gpu_operator_components.csv")
    rows = csv.DictReader(line for line in text.splitlines() if not line.startswith("#"))
    return tuple(Shipped(parse_version(r["release"]) or (), r["section"], r["image"], r["version"]) for r in rows)


@cache
def fixes() -> tuple[Fix, ...]:
    raw = yaml.safe_load(_data("operand_fixes.yaml"))
    return tuple(Fix(**{**f, "cves": tuple(f["cves"])}) for f in raw["fixes"])


def build(version: str) -> str:
    """The build a tag names, without its leading v and distribution suffix: v1.17.8-ubuntu20.04 -> 1.17.8."""
    return _DISTRO.sub("", version.strip().removeprefix("v"))


def release_rows(operator: Version) -> tuple[list[Shipped], str]:
    """The rows of this operator release (its exact tag where the patch is known and listed, else every patch of its
    YY.MM), and how to name it."""
    exact = [s for s in shipped() if s.release == operator]
    if exact:
        return exact, show(operator)
    series = [s for s in shipped() if s.release[:2] == operator[:2]]
    return series, f"{show(operator[:2])}.x"


def _override(spec: dict[str, Any], section: str) -> tuple[str, str] | None:
    """The version a ClusterPolicy sets for a section (spec.<section>.version, or the tag of spec.<section>.image),
    and the field it is in; None where the section takes the release's default."""
    node: Any = spec
    for part in section.split("."):
        node = as_dict(node).get(part)
    node = as_dict(node)
    version = node.get("version")
    if isinstance(version, str) and version and not version.startswith("sha256:"):
        return version, f"spec.{section}.version"
    image = node.get("image")
    if isinstance(image, str) and ":" in image.rpartition("/")[2] and "@" not in image:
        return image.rpartition(":")[2], f"spec.{section}.image"
    return None


def _listed(builds: list[str]) -> str:
    unique = sorted(set(builds), key=lambda b: parse_version(b) or ())
    return ", ".join(unique)


# --- GF040: an operand pinned off its release ---------------------------------------------------------------------


@rule("GF040", reads=("ClusterPolicy",))
def operand_off_release(ctx: Context) -> Iterator[Hit]:
    operator = operator_version(ctx.facts)
    if not operator:
        return
    rows, named = release_rows(operator)
    if not rows:
        return  # a release newer or older than the data: not judged
    for policy in ctx.gpu_operator_policies:
        for section in JUDGED:
            found = _override(policy.spec, section)
            if found is None:
                continue
            version, where = found
            builds = [build(s.version) for s in rows if s.section == section]
            if not builds or build(version) in builds:
                continue
            image = next(s.image for s in rows if s.section == section)
            yield Hit(
                f"{policy.ref} pins {where}: {version}, but GPU Operator {named} ships and was tested with"
                f" {image} {_listed(builds)}: an operand outside its release's set is a combination NVIDIA did not"
                " validate (the operator's own code may expect another version's behaviour)",
                f"remove {where} to take the release's {image}, or set one it ships ({_listed(builds)}); to move"
                " to a newer operand, upgrade the GPU Operator to a release that ships it",
                policy,
            )


# --- GF041: a container toolkit older than a security fix -------------------------------------------------------


def _toolkit(policy: K8sObject, operator: Version | None) -> tuple[str, str] | None:
    """The toolkit version in force and where it comes from: the ClusterPolicy's pin, else the release's default."""
    pinned = _override(policy.spec, "toolkit")
    if pinned is not None:
        return pinned
    if operator and len(operator) >= 3:
        default = next((s.version for s in shipped() if s.release == operator and s.section == "toolkit"), None)
        if default is not None:
            return default, f"GPU Operator {show(operator)}'s default"
    return None


@rule("GF041", reads=("ClusterPolicy",))
def toolkit_security_fix(ctx: Context) -> Iterator[Hit]:
    operator = operator_version(ctx.facts)
    for policy in ctx.gpu_operator_policies:
        if as_dict(policy.spec.get("toolkit")).get("enabled") is False:
            continue  # the toolkit is installed on the hosts, not by the operator
        found = _toolkit(policy, operator)
        if found is None:
            continue
        version, where = found
        running = parse_version(build(version))
        if running is None:
            continue
        missing = [f for f in fixes() if f.section == "toolkit" and running < (parse_version(f.fixed) or ())]
        if not missing:
            continue
        newest = missing[-1]
        cves = [c for f in missing for c in f.cves]
        bulletins = ", ".join(dict.fromkeys(f.bulletin for f in missing))
        yield Hit(
            f"{policy.ref} runs NVIDIA Container Toolkit {build(version)} ({where}), older than the fixes for"
            f" {', '.join(cves)}: {missing[0].impact}"
            + (f"; and {len(missing) - 1} later fix(es)" if len(missing) > 1 else ""),
            f"upgrade the toolkit to {newest.fixed} or later (GPU Operator {newest.operator} or later ships it; or"
            f" set spec.toolkit.version to a fixed build); bulletins: {bulletins}",
            policy,
            severity=Severity.critical,
        )
