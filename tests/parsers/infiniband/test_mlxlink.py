"""mlxlink on real captures: the sectioned text (with and without the rule lines, as a grep keeps them), the BER
notation, and `--json`."""

from __future__ import annotations

import json

from gpufleet.parsers.infiniband.mlxlink import ber, parse_mlxlink
from tests.conftest import CAPTURES

IB = CAPTURES / "infiniband"


def test_sections_of_a_whole_output() -> None:
    parsed = parse_mlxlink((IB / "mlxlink_cx6_ib_hdr_2x.txt").read_text())
    assert parsed.get("Operational Info", "State") == "Active"
    assert parsed.get("Operational Info", "Speed") == "IB-HDR"
    assert parsed.get("Supported Info", "Enabled Link Speed") == "0x00000075 (HDR,EDR,FDR,QDR,SDR)"
    assert parsed.get("Troubleshooting Info", "Recommendation") == "No issue was observed"
    assert parsed.diagnostics == ['-E- "--show_ber_monitor" option is not supported for HCA']
    assert parsed.line("Operational Info", "Width").startswith("Width")


def test_a_grep_excerpt_keeps_its_counters() -> None:
    parsed = parse_mlxlink((IB / "mlxlink_cx6_counters_grep.txt").read_text())
    assert parsed.get("Physical Counters and BER Info", "Effective Physical Errors") == "0"
    assert parsed.get("Physical Counters and BER Info", "FEC") == "RS-FEC - (544,514) + PLR"  # before the title
    assert parsed.get("Operational Info", "State") is None


def test_ber_notation() -> None:
    assert ber("1E-8") == 1e-8 and ber("3E-12") == 3e-12
    assert ber("15E-255") is not None and ber("15E-255") < 1e-250  # type: ignore[operator]
    assert ber("N/A") is None


def test_json_output() -> None:
    doc = {"result": {"output": {
        "Operational Info": {"State": "Polling", "Physical state": "N/A", "Speed": "N/A", "Width": "N/A"},
        "Troubleshooting Info": {"Status Opcode": "1024", "Recommendation": "Cable is unplugged"},
        "Supported Info": {"Enabled Link Speed": {"mask": "0x0000003f", "values": ["EDR", "FDR"]}},
    }, "status": {"code": 0, "message": "OK"}}}  # fmt: skip
    parsed = parse_mlxlink(json.dumps(doc))
    assert parsed.json and parsed.get("Operational Info", "State") == "Polling"
    assert parsed.get("Supported Info", "Enabled Link Speed") == "0x0000003f (EDR,FDR)"
