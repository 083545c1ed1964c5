"""SARIF 2.1.0, the format code-scanning services (GitHub, GitLab, Azure DevOps) read: one run, the catalog as
the tool's rules, one result per finding with its file, line and object."""

from __future__ import annotations

from typing import Any

from gpufleet import __version__
from gpufleet.doctor.catalog import rule_catalog
from gpufleet.doctor.findings import Finding
from gpufleet.model import Severity

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_LEVEL = {Severity.critical: "error", Severity.warning: "warning", Severity.info: "note"}  # SARIF's result levels


def to_sarif(findings: list[Finding]) -> dict[str, Any]:
    catalog = rule_catalog()
    rules = [
        {
            "id": info.id,
            "name": info.title,
            "shortDescription": {"text": info.title},
            "fullDescription": {"text": info.description},
            "help": {"text": "Sources: " + "; ".join(info.sources)},
            "defaultConfiguration": {"level": _LEVEL[info.severity]},
        }
        for info in catalog.values()
    ]
    index = {info.id: i for i, info in enumerate(catalog.values())}
    results = []
    for f in findings:
        result: dict[str, Any] = {
            "ruleId": f.rule,
            "level": _LEVEL[f.severity],
            "message": {"text": f"{f.message}. Fix: {f.fix}" if f.fix else f.message},
        }
        if f.rule in index:
            result["ruleIndex"] = index[f.rule]
        location: dict[str, Any] = {}
        if f.file:
            physical: dict[str, Any] = {"artifactLocation": {"uri": f.file}}
            if f.line > 0:
                physical["region"] = {"startLine": f.line}
            location["physicalLocation"] = physical
        if f.object:
            location["logicalLocations"] = [{"fullyQualifiedName": f.object, "kind": "resource"}]
        if location:
            result["locations"] = [location]
        results.append(result)
    return {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "gpufleet doctor",
                        "version": __version__,
                        "rules": rules,
                    }
                },
                "results": results,
            }
        ],
    }
