"""How `gpufleet get incidents` and `describe incident` show an incident's recommended action: in words, with the
catalog reference, from the control plane's row or, for a row without them, from the catalog."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.cli import output, render


def _row(**over: Any) -> dict[str, Any]:
    row = {
        "id": "inc-1",
        "cause": "ecc-dbe",
        "entity": {"kind": "gpu", "node": "n-001", "index": 2, "name": None},
        "severity": "critical",
        "state": "open",
        "age_s": 60.0,
        "count": 1,
        "action": "WORKFLOW_XID_48",
        "xid": 48,
        "summary": "uncorrectable ECC error",
        "effects": [],
        "evidence": [],
        "first_seen": 0.0,
        "last_seen": 0.0,
    }
    return {**row, **over}


def _printed(capsys: pytest.CaptureFixture[str], show: Any) -> str:
    show()
    return capsys.readouterr().out


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(output.console, "width", 200)


def test_the_table_shows_the_title_and_wide_adds_the_reference() -> None:
    cols, rows = render.incidents_cells([_row()], wide=False)
    action = rows[0][cols.index("ACTION")]
    assert action == "Reset the GPU; drain first if remap pending"
    cols, rows = render.incidents_cells([_row()], wide=True)
    assert rows[0][cols.index("REFERENCE")] == "NVIDIA WORKFLOW_XID_48, Xid 48"


def test_the_control_plane_s_words_are_used_when_the_row_has_them() -> None:
    served = _row(action_title="Served title", action_steps=["one"], action_reference="NVIDIA X")
    assert render.action_words(served) == {
        "action_title": "Served title",
        "action_steps": ["one"],
        "action_reference": "NVIDIA X",
    }


def test_describe_lists_every_step_numbered(capsys: pytest.CaptureFixture[str]) -> None:
    out = _printed(capsys, lambda: render.incident_detail(_row()))
    assert "Recommended: Reset the GPU; drain first if remap pending (NVIDIA WORKFLOW_XID_48, Xid 48)" in out
    steps = [line.strip() for line in out.splitlines() if line.startswith("  ") and line.strip()[:1].isdigit()]
    assert len(steps) == 5 and steps[0].startswith("1. ") and steps[-1].startswith("5. ")
    assert any("Xid 63 or 64" in step for step in steps)


def test_gpufleet_s_own_terms_and_unknown_terms(capsys: pytest.CaptureFixture[str]) -> None:
    out = _printed(capsys, lambda: render.incident_detail(_row(action="ISOLATE_PORT", xid=None, cause="ib-link-down")))
    assert "Recommended: Take the IB port out, check its link (gpufleet ISOLATE_PORT)" in out
    out = _printed(capsys, lambda: render.incident_detail(_row(action="SOMETHING_NEW", xid=None)))
    assert "Recommended: SOMETHING_NEW (SOMETHING_NEW)" in out and "  1." not in out


def test_no_action_is_a_dash(capsys: pytest.CaptureFixture[str]) -> None:
    cols, rows = render.incidents_cells([_row(action="", xid=None)], wide=True)
    assert rows[0][cols.index("ACTION")] == "-" and rows[0][cols.index("REFERENCE")] == "-"
    assert "Recommended: -" in _printed(capsys, lambda: render.incident_detail(_row(action="", xid=None)))
