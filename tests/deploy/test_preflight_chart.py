"""The chart's GPU preflight webhook as real Helm renders it (helm-python-sdk), every object checked against
Kubernetes' schemas (kubernetes-validate, strict) by render(): the MutatingWebhookConfiguration with each way of
making its certificate (cert-manager, Helm's genCA/genSignedCert, one's own), the control plane serving it over
HTTPS with the settings the webhook hands the init container, the values refused with the fix, and the rendered
webhook passing the doctor's GF032."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

from gpufleet.deploy.render import render
from gpufleet.doctor.engine import run
from gpufleet.errors import ManifestError
from tests.conftest import require_tool
from tests.deploy.test_render import CHART, KUBE_VERSIONS, find, objects

TLS = {"server": {"tls": {"secretName": "gpufleet-server-tls"}}}
MODES: dict[str, dict[str, Any]] = {
    "cert-manager": {**TLS, "preflight": {"enabled": True}},
    "self-signed": {**TLS, "preflight": {"enabled": True, "certificate": "self-signed"}},
    "existing-ca": {**TLS, "preflight": {"enabled": True, "certificate": "existing", "caBundle": "TFMwdExTMUNSVWRK"}},
    "existing-cert-manager": {
        **TLS,
        "preflight": {"enabled": True, "certificate": "existing", "certManagerCertificate": "certs/gpufleet-server"},
    },
}


def webhook(values: dict[str, Any], version: str = "1.33") -> dict[str, Any]:
    return find(objects(values, version), "MutatingWebhookConfiguration", "gpufleet-preflight")


@pytest.mark.parametrize("mode", sorted(MODES))
def test_helm_lint_strict_passes(mode: str) -> None:
    report = helm.lint(str(CHART), values=MODES[mode], strict=True, kube_version="v1.33.0")
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


@pytest.mark.parametrize("version", KUBE_VERSIONS)
@pytest.mark.parametrize("mode", sorted(MODES))
def test_the_webhook_is_valid_and_never_blocks_a_pod(mode: str, version: str) -> None:
    rendered = render(MODES[mode], version=version)  # every object checked, strictly, for this Kubernetes
    assert {m.kind for m in rendered.unchecked} <= {"ServiceMonitor", "PrometheusRule", "Issuer", "Certificate"}
    config = find(rendered.manifests, "MutatingWebhookConfiguration")
    (hook,) = config["webhooks"]
    assert hook["admissionReviewVersions"] == ["v1"] and hook["sideEffects"] == "None"
    assert hook["failurePolicy"] == "Ignore" and hook["timeoutSeconds"] <= 10 and hook["matchPolicy"] == "Equivalent"
    assert hook["rules"] == [
        {
            "operations": ["CREATE"],
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["pods"],
            "scope": "Namespaced",
        }
    ]
    assert hook["clientConfig"]["service"] == {
        "name": "gpufleet-server",
        "namespace": "gpufleet",
        "path": "/admission/v1/preflight",
        "port": 8470,
    }
    service = find(rendered.manifests, "Service", "gpufleet-server")
    assert service["spec"]["ports"][0]["port"] == 8470 and service["spec"]["ports"][0]["name"] == "https"
    selector = hook["namespaceSelector"]
    assert selector["matchLabels"] == {"gpufleet.io/preflight": "enabled"}
    assert {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "gpufleet"]} in (
        selector["matchExpressions"]
    )
    assert hook["objectSelector"]["matchExpressions"][0]["key"] == "gpufleet.io/preflight"


def test_cert_manager_writes_the_servers_secret_and_injects_its_ca() -> None:
    manifests = objects(MODES["cert-manager"])
    issuer = find(manifests, "Issuer")
    certificate = find(manifests, "Certificate")
    assert issuer["spec"] == {"selfSigned": {}}
    assert certificate["spec"]["secretName"] == "gpufleet-server-tls"
    assert certificate["spec"]["issuerRef"] == {"kind": "Issuer", "name": issuer["metadata"]["name"]}
    assert "gpufleet-server.gpufleet.svc" in certificate["spec"]["dnsNames"]  # the name the API server dials
    config = find(manifests, "MutatingWebhookConfiguration")
    ref = f"{certificate['metadata']['namespace']}/{certificate['metadata']['name']}"
    assert config["metadata"]["annotations"] == {"cert-manager.io/inject-ca-from": ref}
    assert "caBundle" not in config["webhooks"][0]["clientConfig"]


def test_an_existing_cert_manager_certificate_is_injected_from() -> None:
    config = webhook(MODES["existing-cert-manager"])
    assert config["metadata"]["annotations"] == {"cert-manager.io/inject-ca-from": "certs/gpufleet-server"}
    assert webhook(MODES["existing-ca"])["webhooks"][0]["clientConfig"]["caBundle"] == "TFMwdExTMUNSVWRK"


def test_helm_generates_a_ca_and_a_certificate_it_signs_for_the_service(tmp_path: Path) -> None:
    require_tool("openssl")
    manifests = objects(MODES["self-signed"])
    secret = find(manifests, "Secret", "gpufleet-server-tls")
    assert secret["type"] == "kubernetes.io/tls"
    bundle = find(manifests, "MutatingWebhookConfiguration")["webhooks"][0]["clientConfig"]["caBundle"]
    assert bundle == secret["data"]["ca.crt"]  # the CA the API server trusts is the one the server's cert is signed by
    for key in ("tls.crt", "tls.key", "ca.crt"):
        (tmp_path / key).write_bytes(base64.b64decode(secret["data"][key]))
    checked = subprocess.run(
        ["openssl", "verify", "-CAfile", "ca.crt", "-verify_hostname", "gpufleet-server.gpufleet.svc", "tls.crt"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0 and "tls.crt: OK" in checked.stdout, checked.stderr


def test_the_control_plane_serves_https_and_hands_the_init_container_its_settings() -> None:
    deployment = find(objects(MODES["cert-manager"]), "Deployment")
    (server,) = deployment["spec"]["template"]["spec"]["containers"]
    assert "--tls-cert=/etc/gpufleet/tls/tls.crt" in server["args"]
    env = {e["name"]: e.get("value") for e in server["env"]}
    assert env["GPUFLEET_PREFLIGHT_SERVER"] == "https://gpufleet-server.gpufleet.svc:8470"
    assert env["GPUFLEET_PREFLIGHT_CA_FILE"] == "/etc/gpufleet/tls/ca.crt"  # in the mounted TLS Secret
    assert env["GPUFLEET_PREFLIGHT_TOKEN_SECRET"] == "gpufleet-preflight-token"
    assert env["GPUFLEET_PREFLIGHT_IMAGE"] == server["image"]
    custom = {**MODES["cert-manager"], "preflight": {"enabled": True, "image": "registry.example.com/gpufleet-dcgm:1"}}
    (server,) = find(objects(custom), "Deployment")["spec"]["template"]["spec"]["containers"]
    assert {e["name"]: e.get("value") for e in server["env"]}["GPUFLEET_PREFLIGHT_IMAGE"] == custom["preflight"][
        "image"
    ]


def test_the_notes_say_how_to_choose_a_namespace_and_give_it_the_token() -> None:
    notes = render(MODES["cert-manager"]).notes
    assert "kubectl label namespace ML-NAMESPACE gpufleet.io/preflight=enabled\n" in notes
    assert "create secret generic gpufleet-preflight-token --from-literal=token=" in notes
    assert "GPU preflight" not in render({}).notes


def test_off_by_default() -> None:
    manifests = objects({})
    kinds = {m.kind for m in manifests}
    assert not kinds & {"MutatingWebhookConfiguration", "Issuer", "Certificate"}
    (server,) = find(manifests, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert not [e for e in server["env"] if e["name"].startswith("GPUFLEET_PREFLIGHT")]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"preflight": {"enabled": True}}, "preflight.enabled needs server.tls.secretName"),
        ({**TLS, "preflight": {"enabled": True, "certificate": "existing"}}, "neither preflight.caBundle"),
        (
            {**TLS, "server": {**TLS["server"], "enabled": False}, "preflight": {"enabled": True}},
            "needs server.enabled",
        ),
        ({**TLS, "preflight": {"enabled": True, "timeoutSeconds": 15}}, "preflight.timeoutSeconds"),
        ({**TLS, "preflight": {"enabled": True, "failurePolicy": "Fail"}}, "failurePolicy"),
    ],
)
def test_values_that_would_not_work_are_refused_with_the_fix(values: dict[str, Any], message: str) -> None:
    with pytest.raises(ManifestError, match=message):
        render(values, source="test values")


@pytest.mark.parametrize("mode", sorted(MODES))
def test_the_rendered_webhook_passes_the_doctor(mode: str, tmp_path: Path) -> None:
    path = tmp_path / "rendered.yaml"
    path.write_text(yaml.safe_dump_all([m.obj for m in objects(MODES[mode])], sort_keys=False))
    report = run([str(path)], kube_version=(1, 33))
    assert [f for f in report.findings if f.severity != "info"] == []
