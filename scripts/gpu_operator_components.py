"""Regenerate src/gpufleet/doctor/data/gpu_operator_components.csv: the operand image versions each GPU Operator
release ships, read from the Helm chart's defaults (deployments/gpu-operator/values.yaml) at every release tag of a
clone of https://github.com/NVIDIA/gpu-operator. The ClusterPolicy the chart renders carries the same sections, so
`spec.<section>.version` in a cluster is what this table's rows are compared with.

    git clone https://github.com/NVIDIA/gpu-operator /tmp/gpu-operator
    python scripts/gpu_operator_components.py /tmp/gpu-operator > src/gpufleet/doctor/data/gpu_operator_components.csv
"""

from __future__ import annotations

import csv
import re
import subprocess
import sys
from typing import Any

import yaml

from gpufleet.doctor.rules.operands import JUDGED

FIRST = (23, 9)  # older releases are out of support everywhere the doctor looks
RELEASE_TAG = re.compile(r"^v(\d+)\.(\d+)\.(\d+)$")
# ClusterPolicy sections (and sub-sections) whose image the operator deploys with a version of its own: the driver
# and the operands the doctor judges
SECTIONS = ("driver", *JUDGED)


def git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True, check=True).stdout


def section(values: dict[str, Any], path: str) -> dict[str, Any] | None:
    node: Any = values
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else None


def main(repo: str) -> None:
    tags = []
    for tag in git(repo, "tag").split():
        m = RELEASE_TAG.match(tag)
        if m and (int(m[1]), int(m[2])) >= FIRST:
            tags.append(((int(m[1]), int(m[2]), int(m[3])), tag))
    head = git(repo, "rev-parse", "HEAD").strip()
    out = csv.writer(sys.stdout, lineterminator="\n")
    print(
        "# Operand images each GPU Operator release ships: deployments/gpu-operator/values.yaml at each release tag of"
        f" https://github.com/NVIDIA/gpu-operator (clone at {head[:12]}), by scripts/gpu_operator_components.py."
    )
    out.writerow(["release", "section", "image", "version", "commit"])
    for _, tag in sorted(tags):
        values = yaml.safe_load(git(repo, "show", f"{tag}:deployments/gpu-operator/values.yaml"))
        commit = git(repo, "rev-list", "-n", "1", tag).strip()
        for path in SECTIONS:
            found = section(values, path)
            if found and found.get("image") and found.get("version"):
                out.writerow([tag[1:], path, found["image"], str(found["version"]), commit[:12]])


if __name__ == "__main__":
    main(sys.argv[1])
