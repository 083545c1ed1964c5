"""Severity and action per event: the corpus expectations, the policy's documented choices, and overrides."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from gpufleet.catalog import load_xid_catalog
from gpufleet.catalog.xid import load_nvl5_decode
from gpufleet.errors import ManifestError, UserError
from gpufleet.health.xid_policy import (
    Action,
    XidSeverity,
    classify,
    decode_nvl5,
    default_policy,
    load_policy,
    policy_from_text,
    recovery_states_possible,
)
from gpufleet.parsers.kernel.kmsg import KernelEvent, parse_kmsg


def _verdict(line: str, policy_text: str | None = None):  # type: ignore[no-untyped-def]
    events = parse_kmsg(line)
    assert len(events) == 1
    policy = policy_from_text(policy_text) if policy_text else None
    return classify(events[0], policy)


def test_matches_expected_csv_for_every_file(corpus: Path) -> None:
    with (corpus / "expected.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 14
    for row in rows:
        events = parse_kmsg((corpus / row["file"]).read_text())
        if row["severity"] == "N/A":
            assert events == []
            continue
        want_severity = row["severity"].split()[0]
        action_text = row["action"]
        if action_text.startswith("XID_154 -> ") or action_text.startswith("NVL5 decode:"):
            want_action = action_text.split("-> ")[1].split()[0]
        elif action_text.startswith("NVSwitch"):
            want_action = "RESTART_BM"  # "reset fabric/node": the policy's NVSwitch fatal action
        else:
            want_action = action_text.split()[0]
        for event in events:
            verdict = classify(event)
            assert verdict.severity == want_severity, (row["file"], verdict)
            assert verdict.action == want_action, (row["file"], verdict)
            if "investigatory" in action_text:
                want_inv = action_text.split("investigatory ")[1].split(":")[0].rstrip(")")
                assert verdict.investigatory == want_inv, (row["file"], verdict)
        if action_text.startswith("XID_154"):
            assert classify(events[0]).bucket == "XID_154"


def test_every_catalog_code_has_a_verdict() -> None:
    for code in load_xid_catalog():
        verdict = classify(KernelEvent(kind="xid", line=1, raw="", message="", xid=code))
        assert verdict.severity in (XidSeverity.FATAL, XidSeverity.NONFATAL)


def test_disagreements_are_documented_choices() -> None:
    policy = default_policy()
    for code in (61, 62, 108, 109, 160, 162):
        assert policy.overrides[code].reason, code
    assert policy.overrides[109].action == Action.RESET_GPU
    assert policy.overrides[162].severity == XidSeverity.NONFATAL


def test_unknown_code_is_reported_as_unknown() -> None:
    verdict = _verdict("NVRM: Xid (PCI:0000:3b:00): 999, pid=1, name=x, new thing")
    assert verdict.rule == "unknown-xid" and verdict.severity == XidSeverity.FATAL
    assert verdict.action == Action.CONTACT_SUPPORT


def test_xid45_follows_its_root() -> None:
    solo = _verdict("NVRM: Xid (PCI:0000:3b:00): 45, pid=1, name=x, Ch 00000010")
    assert solo.action == Action.WORKFLOW_XID_45
    rooted = _verdict("NVRM: Xid (PCI:0000:3b:00): 45, pid=1, name=x, Ch 00000010 caused by previous Xid 48")
    assert rooted.action == Action.IGNORE and "48" in rooted.rule


@pytest.mark.parametrize(
    ("line", "severity", "action"),
    [
        # SAW_MVB intrinfo low bits 0000100001, status 0x8: IGNORE (NVIDIA's example)
        ("144, SAW_MVB Nonfatal XC0 i0 Link 3 (0x00000021 0x00000008 0x0 0x0 0x0 0x0)", "NONFATAL", "IGNORE"),
        ("144, SAW_MVB Fatal XC0 i0 Link 3 (0x00000021 0x00000002 0x0 0x0 0x0 0x0)", "FATAL", "RESET_GPU"),
        # two status bits: 0x1 (non-fatal IGNORE) and 0x2 (fatal RESET_GPU): the worse one wins
        ("144, SAW_MVB Fatal XC0 i0 Link 3 (0x00000021 0x00000003 0x0 0x0 0x0 0x0)", "FATAL", "RESET_GPU"),
        (
            "150, MSE_WATCHDOG Fatal XC0 i0 Link -1 (0x00000000 0x00000000 0x0 0x0 0x0 0x0)",
            "FATAL",
            "RESET_GPU",
        ),
        # RLW_REMAP status 0x1 -> XID_154_EVAL: wait for the Xid 154 that names the action
        (
            "145, RLW_REMAP Nonfatal XC0 i0 Link 2 (0x00000082 0x00000001 0x0 0x0 0x0 0x0)",
            "NONFATAL",
            "XID_154",
        ),
        # units the table does not know fall back to the driver's own word
        (
            "146, TLW_NEWUNIT Fatal XC0 i0 Link 2 (0x00000000 0x00000040 0x0 0x0 0x0 0x0)",
            "FATAL",
            "RESET_GPU",
        ),
        (
            "146, TLW_NEWUNIT Nonfatal XC0 i0 Link 2 (0x00000000 0x00000040 0x0 0x0 0x0 0x0)",
            "NONFATAL",
            "IGNORE",
        ),
    ],
)
def test_nvlink5_decode(line: str, severity: str, action: str) -> None:
    verdict = _verdict("NVRM: Xid (PCI:0018:01:00): " + line)
    assert (verdict.severity, verdict.action) == (severity, action), verdict
    assert verdict.bucket == "WORKFLOW_NVLINK5_ERR"


def test_nvlink5_link_down_reason_bits_pick_the_row(corpus: Path) -> None:
    event = parse_kmsg((corpus / "xid149_nvsentinel_netir_link_evt.log").read_text())[0]
    assert event.nvl5 is not None
    rows = decode_nvl5(149, event.nvl5)
    assert len(rows) == 1 and rows[0].investigatory == "INVESTIGATE_PEER_DEVICE"


def test_nvlink5_decode_can_be_switched_off(corpus: Path) -> None:
    event = parse_kmsg((corpus / "xid145_gpud_rlw_rxpipe.log").read_text())[0]
    verdict = classify(event, policy_from_text("nvlink5: {decode: false}"))
    assert verdict.rule == "catalog" and verdict.action == Action.WORKFLOW_NVLINK5_ERR


def test_override_wins_over_nvlink5_decode(corpus: Path) -> None:
    event = parse_kmsg((corpus / "xid145_gpud_rlw_rxpipe.log").read_text())[0]
    policy = policy_from_text("overrides:\n  145: {severity: FATAL, action: RESET_GPU, reason: site rule}\n")
    verdict = classify(event, policy)
    assert (verdict.severity, verdict.action, verdict.rule) == ("FATAL", "RESET_GPU", "override 145")


def test_decode_table_is_complete() -> None:
    rows = load_nvl5_decode()
    assert {r.xid for r in rows} == set(range(144, 151))
    assert all(r.resolution in ("IGNORE", "RESET_GPU", "XID_154_EVAL") for r in rows)
    assert all(len(r.intrinfo_pattern_v1) == 32 for r in rows)


@pytest.mark.parametrize(
    ("state", "action", "severity"),
    [
        ("0x2 (Node Reboot Required)", "RESTART_BM", XidSeverity.FATAL),
        ("0x0 (None)", "IGNORE", XidSeverity.NONFATAL),
        ("0x3 (Drain P2P)", "DRAIN_P2P", XidSeverity.FATAL),  # the GPU's peer-to-peer work must stop first
        ("0x9 (Future)", "RESET_GPU", XidSeverity.FATAL),
    ],
)
def test_xid154_follows_announced_action(state: str, action: str, severity: XidSeverity) -> None:
    """The action and the severity are the announced state's: a GPU that needs a reset, its node a reboot or its
    peer-to-peer work drained is unusable until then (fatal), though the catalog rates the notice itself
    informational."""
    verdict = _verdict(
        f"NVRM: Xid (PCI:0019:01:00): 154, GPU recovery action changed from 0x1 (GPU Reset Required) to {state}"
    )
    assert verdict.action == action and verdict.severity == severity


_ACTION_ORDER = ["IGNORE", "XID_154", "RESTART_APP", "CONTACT_SUPPORT", "DRAIN_P2P", "RESET_GPU", "RESTART_BM"]
XID154 = "NVRM: Xid (PCI:0019:01:00): 154, GPU recovery action changed from 0x4 (Drain and Reset) to {state}"


@pytest.mark.parametrize(
    "state",
    [
        "0x0 (None)",
        "0x1 (GPU Reset Required)",
        "0x2 (Node Reboot Required)",
        "0x3 (Drain P2P)",
        "0x4 (Drain and Reset)",
    ],
)
def test_xid154_cut_at_any_point_asks_no_less_than_the_whole_line(state: str) -> None:
    """From the point the message begins (`154, G`), every cut of the line asks for at least what the whole line does:
    a cut before the new state takes the most disruptive state the visible part allows, never the catalog's
    informational XID_154."""
    line = XID154.format(state=state)
    whole = _verdict(line)
    for cut in range(line.index("154, ") + 6, len(line) + 1):  # shorter, it is an unreadable line
        events = parse_kmsg(line[:cut])
        assert [e.xid for e in events] == [154], (cut, line[:cut])
        verdict = classify(events[0])
        assert verdict.action != "XID_154", (cut, line[:cut])
        assert _ACTION_ORDER.index(verdict.action) >= _ACTION_ORDER.index(whole.action), (cut, line[:cut], verdict)


@pytest.mark.parametrize(
    ("shown", "action", "states"),
    [
        ("", "RESTART_BM", [0, 1, 2, 3, 4, None]),  # the state not reached: any
        ("GPU recovery action changed from 0x4 (Drain and Re", "RESTART_BM", [0, 1, 2, 3, 4, None]),
        ("GPU recovery action changed from 0x4 (Drain and Reset) to 0", "RESTART_BM", [0, 1, 2, 3, 4, None]),
        ("GPU recovery action changed from 0x4 (Drain and Reset) to 0x", "RESTART_BM", [0, 1, 2, 3, 4, None]),
        ("GPU recovery action changed from 0x4 (Drain and Reset) to 0x1", "RESET_GPU", [1, None]),  # 0x1 or 0x1f...
        ("GPU recovery action changed from 0x4 (Drain and Reset) to 0x2", "RESTART_BM", [2, None]),
        ("GPU recovery action changed from 0x4 (Drain and Reset) to 0x0", "RESET_GPU", [0, None]),
    ],
)
def test_xid154_cut_before_its_state_takes_the_worst_it_could_be(
    shown: str, action: str, states: list[int | None]
) -> None:
    assert recovery_states_possible(shown, default_policy().recovery_actions) == states
    verdict = classify(KernelEvent(kind="xid", line=1, raw=shown, message=shown, xid=154))
    assert verdict.action == action and verdict.rule.startswith("xid154: the line is cut before the new recovery")
    assert verdict.reason.startswith("Cut before the recovery state it announces")


def test_xid154_in_other_words_keeps_the_catalog_reading() -> None:
    assert recovery_states_possible("Recovery state is Drain and Reset", [0, 1]) is None
    verdict = classify(KernelEvent(kind="xid", line=1, raw="", message="Recovery state is Drain and Reset", xid=154))
    assert verdict.action == "XID_154"


def test_sxid_and_non_xid_signals() -> None:
    fatal = _verdict("nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 63 LTSSM Fault Up")
    assert (fatal.severity, fatal.action) == (XidSeverity.FATAL, Action.RESTART_BM)
    nonfatal = _verdict("nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 30 egress error")
    assert (nonfatal.severity, nonfatal.action) == (XidSeverity.NONFATAL, Action.IGNORE)
    fallen = _verdict("NVRM: GPU 0000:3c:00.0: GPU has fallen off the bus.")
    assert (fallen.severity, fallen.action) == (XidSeverity.FATAL, Action.RESTART_BM)
    reset = _verdict("NVRM: GPU 0000:3b:00.0: RmInitAdapter failed! NV_ERR_RESET_REQUIRED")
    assert (reset.severity, reset.action) == (XidSeverity.FATAL, Action.RESET_GPU)


def test_override_from_file(tmp_path: Path) -> None:
    path = tmp_path / "site.yaml"
    path.write_text("overrides:\n  109: {severity: NONFATAL, action: IGNORE, reason: we follow the device plugin}\n")
    policy = load_policy(path)
    verdict = classify(KernelEvent(kind="xid", line=1, raw="", message="", xid=109), policy)
    assert (verdict.severity, verdict.action, verdict.rule) == (
        XidSeverity.NONFATAL,
        Action.IGNORE,
        "override 109",
    )
    # the rest of the default policy is still there
    assert policy.overrides[62].action == Action.RESET_GPU
    assert policy.row_remap.recorded.action == Action.IGNORE
    # and a new override for a code the default leaves to the catalog
    policy13 = policy_from_text("overrides:\n  13: {severity: FATAL, action: RESET_GPU}\n")
    assert classify(KernelEvent(kind="xid", line=1, raw="", message="", xid=13), policy13).action == Action.RESET_GPU


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("overides: {}\n", "overides"),
        ("overrides:\n  109: {severity: FATAL, action: REBOOT}\n", "overrides.109.action"),
        ("overrides:\n  109: {severity: BAD, action: IGNORE}\n", "overrides.109.severity"),
        ("sxid: {fatal: {severity: FATAL, action: IGNORE, colour: red}}\n", "sxid.fatal.colour"),
        ("version: 2\n", "version"),
        ("[not, a, mapping]\n", "mapping"),
        ("overrides: {109: [\n", "YAML"),
    ],
)
def test_bad_policy_files_name_the_problem(text: str, fragment: str) -> None:
    with pytest.raises(ManifestError) as info:
        policy_from_text(text, source="site.yaml")
    assert fragment in info.value.message and info.value.message.startswith("site.yaml")


def test_missing_policy_file_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"nope\.yaml: file not found"):
        load_policy(tmp_path / "nope.yaml")


def test_row_remap_recorded_asks_for_a_reset_when_idle_not_a_drain() -> None:
    verdict = _verdict(
        "NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate."
    )
    assert (verdict.severity, verdict.action, verdict.investigatory) == (
        XidSeverity.NONFATAL,
        Action.IGNORE,
        "RESET_GPU",
    )
    assert verdict.cause is not None and verdict.cause.value == "retired-pages"
    assert "convenient time" in verdict.reason


def test_row_remap_failure_text_escalates() -> None:
    verdict = _verdict(
        "NVRM: Xid (PCI:0000:3b:00): 64, Row Remapper Error: (0x00000000abcdef00) - Row Remapping table is full"
    )
    assert (verdict.severity, verdict.action) == (XidSeverity.FATAL, Action.CONTACT_SUPPORT)
    assert verdict.cause is not None and verdict.cause.value == "row-remap-failure"


def test_a_site_override_for_63_still_wins() -> None:
    policy = policy_from_text("overrides:\n  63: {severity: FATAL, action: RESET_GPU}\n")
    verdict = classify(KernelEvent(kind="xid", line=1, raw="", message="", xid=63), policy)
    assert (verdict.action, verdict.rule) == (Action.RESET_GPU, "override 63")


def test_the_escalation_windows_are_the_documented_ones() -> None:
    escalation = default_policy().escalation
    assert escalation.repeated_gpu_lost.max_in_window == 3
    assert escalation.repeated_gpu_lost.window_s == escalation.memory_progression.window_s == 30 * 86_400
    assert escalation.repeated_gpu_lost.rule.action == Action.RMA
