"""GF032 on pod admission webhooks: the chart's preflight webhook as it renders passes; each way a webhook on pod
creation can block GPU pods or deadlock its own server is named with its fix."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from gpufleet.doctor.catalog import rule_catalog
from gpufleet.model import Severity
from tests.doctor.helpers import doctor, hits


def webhook_config(kind: str = "MutatingWebhookConfiguration", **webhook: Any) -> dict[str, Any]:
    """A GPU preflight webhook as the chart renders it (deploy/helm/gpufleet/templates/preflight-webhook.yaml)."""
    good: dict[str, Any] = {
        "name": "preflight.gpufleet.io",
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "failurePolicy": "Ignore",
        "timeoutSeconds": 5,
        "matchPolicy": "Equivalent",
        "clientConfig": {
            "service": {
                "name": "gpufleet-server",
                "namespace": "gpufleet",
                "path": "/admission/v1/preflight",
                "port": 8470,
            },
            "caBundle": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t",
        },
        "rules": [
            {
                "operations": ["CREATE"],
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "resources": ["pods"],
                "scope": "Namespaced",
            }
        ],
        "namespaceSelector": {
            "matchLabels": {"gpufleet.io/preflight": "enabled"},
            "matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "gpufleet"]}
            ],
        },
    }
    for key, value in webhook.items():
        if value is None:
            good.pop(key, None)
        else:
            good[key] = value
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": "gpufleet-preflight"},
        "webhooks": [good],
    }


def gf032(tmp_path: Path, *objects: dict[str, Any]) -> list[Any]:
    return hits(doctor(tmp_path, ("webhooks.yaml", list(objects))), "GF032")


def test_the_rule_is_in_the_catalog_with_the_kubernetes_docs_as_sources() -> None:
    info = rule_catalog()["GF032"]
    assert any("avoiding-deadlocks-in-self-hosted-webhooks" in s for s in info.sources)
    assert any("admission-webhooks-good-practices" in s for s in info.sources)


def test_the_charts_preflight_webhook_passes(tmp_path: Path) -> None:
    assert gf032(tmp_path, webhook_config()) == []


def test_fail_on_a_preflight_blocks_every_gpu_pod(tmp_path: Path) -> None:
    (found,) = gf032(tmp_path, webhook_config(failurePolicy="Fail"))
    assert found.severity is Severity.critical and "failurePolicy Fail" in found.message
    assert "failurePolicy: Ignore" in found.fix


def test_an_unset_failure_policy_is_fail(tmp_path: Path) -> None:
    (found,) = gf032(tmp_path, webhook_config(failurePolicy=None))
    assert "unset: Fail is the v1 default" in found.message


def test_fail_on_another_pod_webhook_is_a_warning(tmp_path: Path) -> None:
    other = webhook_config("ValidatingWebhookConfiguration", name="policy.example.com", failurePolicy="Fail")
    other["webhooks"][0]["clientConfig"]["service"]["path"] = "/validate"
    (found,) = gf032(tmp_path, other)
    assert found.severity is Severity.warning


@pytest.mark.parametrize(("timeout", "message"), [(None, "gives no timeoutSeconds"), (30, "timeoutSeconds 30")])
def test_no_timeout_or_over_ten_seconds(tmp_path: Path, timeout: int | None, message: str) -> None:
    (found,) = gf032(tmp_path, webhook_config(timeoutSeconds=timeout))
    assert message in found.message and ("at most 10" in found.fix or "10 or less" in found.fix)


def test_a_selector_that_takes_in_its_own_namespace_deadlocks_with_fail(tmp_path: Path) -> None:
    (found,) = gf032(tmp_path, webhook_config(namespaceSelector=None, timeoutSeconds=5, failurePolicy="Ignore"))
    assert "kube-system, gpufleet" in found.message and "self-hosted deadlock" in found.message
    assert found.severity is Severity.warning
    both = gf032(tmp_path, webhook_config(namespaceSelector=None, failurePolicy="Fail"))
    assert {f.severity for f in both} == {Severity.critical}
    assert "NotIn" in both[-1].fix


def test_the_servers_namespace_is_judged_by_its_own_labels(tmp_path: Path) -> None:
    selector = {"matchLabels": {"gpufleet.io/preflight": "enabled"}}
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "gpufleet", "labels": {"gpufleet.io/preflight": "enabled"}},
    }
    assert gf032(tmp_path, webhook_config(namespaceSelector=selector)) == []  # unlabelled: not selected
    (found,) = gf032(tmp_path, webhook_config(namespaceSelector=selector), namespace)
    assert "own server (gpufleet)" in found.message and "kube-system" not in found.message


def test_an_empty_ca_bundle_without_cert_manager_cannot_be_verified(tmp_path: Path) -> None:
    bare = webhook_config()
    del bare["webhooks"][0]["clientConfig"]["caBundle"]
    (found,) = gf032(tmp_path, bare)
    assert "empty caBundle" in found.message and "never runs" in found.message
    injected = copy.deepcopy(bare)
    injected["metadata"]["annotations"] = {"cert-manager.io/inject-ca-from": "gpufleet/gpufleet-server"}
    assert gf032(tmp_path, injected) == []


def test_webhooks_not_on_pod_creation_are_not_judged(tmp_path: Path) -> None:
    rules = [{"operations": ["CREATE"], "apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["deployments"]}]
    assert gf032(tmp_path, webhook_config(rules=rules, failurePolicy="Fail", timeoutSeconds=None)) == []
