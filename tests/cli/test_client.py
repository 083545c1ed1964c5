"""How the CLI reaches a control plane: the certificate of an https server is always checked."""

from __future__ import annotations

from gpufleet.cli.client import Api


def test_an_https_server_has_its_certificate_checked_and_plain_http_loads_no_ca_bundle() -> None:
    assert Api(server="https://gpufleet.example.com:8470")._verify() is True
    assert Api(server="HTTPS://gpufleet.example.com")._verify() is True
    assert Api(server="http://127.0.0.1:8470")._verify() is False
