"""The Xid policy, the shipped alert rules and the runbooks the engine picks say the same of every fault.

- Every Xid code in the catalog (and a code it does not list): the rule that pages for it is the one the policy's
  rating names (FATAL: GpuXidFatal, critical; NONFATAL: GpuXid, warning; a code its line can rate either way:
  GpuXidLineDependent), and every verdict the policy can give a report of it (the bare code, and what the rest of a
  line can make of it) gets a runbook that takes the GPU out of service when, and only when, the verdict is FATAL.
  The SXid verdicts (fatal, non-fatal, unmarked) and the other kernel reports are held to the same; no shipped rule
  reads an SXid series, so there is no SXid alert to compare.
- One fault, one remedy: an uncorrectable ECC error seen as Xid 48 (or 95) and seen on the ECC counter takes the same
  runbook, and the alerts for the ECC counter and the row-remap failure flag name the runbook the engine picks and
  say what it does; Xid 63, 64, 79 and 94 page as their runbooks act.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.catalog import load_xid_catalog
from gpufleet.catalog.xid import xid_message
from gpufleet.health.detectors.kernel import KernelDetector
from gpufleet.health.incidents import IncidentBook
from gpufleet.health.node_health import NodeHealth
from gpufleet.health.xid_policy import (
    Action,
    Verdict,
    XidSeverity,
    classify,
    code_severities,
    code_verdicts,
    default_policy,
    xid_ratings,
)
from gpufleet.model import Incident, RootCause, Severity
from gpufleet.model.kernel import KernelEvent, SxidDetail
from gpufleet.model.observe import Finding
from gpufleet.parsers.kernel.kmsg import parse_kmsg
from gpufleet.remediate import Remediator, RunbookManifest, RunbookSet
from gpufleet.remediate.runbook import TAKES_NODE_OUT, ActionKind
from gpufleet.telemetry.frame import GpuEntity, MetricFrame
from gpufleet.telemetry.monitoring.rule_tests import render_annotation
from tests.conftest import require_tool
from tests.remediate.helpers import remediator
from tests.telemetry.monitoring.promtool import RULES, XID_RULES, assert_alerts, xid_alerts
from tests.twins import small_twin

NODE, GPU, PCI = "n-000", 2, "0000:3b:00"
OUT_OF_SERVICE = TAKES_NODE_OUT | {ActionKind.reset_gpu}
ALERT_SEVERITY = {XidSeverity.FATAL: "critical", XidSeverity.NONFATAL: "warning"}


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Remediator:
    """The engine on a twin, asked only for plans (which write nothing)."""
    return remediator(small_twin(nodes=2, job_nodes=0), tmp_path_factory.mktemp("plans"))


def incident_of(finding: Finding) -> Incident:
    return IncidentBook().add(finding)


def takes_out_of_service(engine: Remediator, incident: Incident) -> tuple[bool, str]:
    """Whether the runbook the engine picks would take the GPU or its node out of service for this incident (a step
    that cordons, drains, resets or reboots and that its guards let run), and the runbook's name."""
    report = engine.plan(incident)
    out = any(s.decision == "would" and ActionKind(s.action) in OUT_OF_SERVICE for s in report.steps)
    return out, report.runbook


# What each action of the policy asks the runbook to carry out: the step kinds it must run, and those it must not (a
# reboot is not a GPU reset: a fatal SXid needs every GPU and NVSwitch reset, which one GPU's reset does not give).
INTENT: dict[Action, tuple[frozenset[ActionKind], frozenset[ActionKind]]] = {
    Action.RESTART_BM: (frozenset({ActionKind.reboot_node}), frozenset({ActionKind.reset_gpu})),
    Action.RESET_GPU: (frozenset({ActionKind.reset_gpu}), frozenset({ActionKind.reboot_node})),
    Action.IGNORE: (frozenset(), frozenset(OUT_OF_SERVICE)),
    Action.DRAIN_P2P: (frozenset({ActionKind.drain}), frozenset({ActionKind.reset_gpu, ActionKind.reboot_node})),
}
ACTS = frozenset(INTENT) - {Action.IGNORE}  # a FATAL IGNORE (an NVLink5 subcode) is held by its severity alone


def _carries_out(engine: Remediator, finding: Finding, action: Action, what: str) -> None:
    """The runbook the engine picks runs the steps the policy's action asks for, and none it does not."""
    report = engine.plan(incident_of(finding))
    runs = {ActionKind(s.action) for s in report.steps if s.decision == "would"}
    must, must_not = INTENT[action]
    assert must <= runs and not runs & must_not, f"{what}: policy says {action}, runbook {report.runbook} runs {runs}"


def xid_event(code: int) -> KernelEvent:
    return KernelEvent(kind="xid", line=1, raw="", message="", xid=code, pci=PCI)


def _held_to_its_runbook(engine: Remediator, event: KernelEvent, verdict: Verdict, what: str) -> None:
    finding = KernelDetector({(NODE, PCI): GPU}).judged(0.0, NODE, event, verdict)
    fatal = verdict.severity is XidSeverity.FATAL
    assert (finding.severity is Severity.critical) == fatal, (what, verdict)
    out, runbook = takes_out_of_service(engine, incident_of(finding))
    assert out == fatal, f"{what}: {verdict.severity} ({verdict.action}, {verdict.rule}) but runbook {runbook}"


@pytest.mark.parametrize("code", [*sorted(load_xid_catalog()), 999])
def test_every_xid_pages_and_is_remedied_as_the_policy_rates_it(engine: Remediator, code: int) -> None:
    verdicts = code_verdicts(code)
    assert verdicts[0] == classify(xid_event(code))  # the bare code's verdict is classify's
    severities = code_severities(code)
    fired = xid_alerts(code)
    assert len(fired) == 1, (code, fired)  # every code pages exactly one way
    if len(severities) == 1:
        (severity,) = severities
        assert fired == ["GpuXidFatal" if severity is XidSeverity.FATAL else "GpuXid"], code
        assert RULES[fired[0]]["labels"]["severity"] == ALERT_SEVERITY[severity]
    else:
        assert fired == ["GpuXidLineDependent"], code
        assert RULES["GpuXidLineDependent"]["labels"]["severity"] == "warning"
    for verdict in verdicts:
        _held_to_its_runbook(engine, xid_event(code), verdict, f"Xid {code}")
        if verdict.action in ACTS:  # and its runbook does what the action says: reset, reboot, drain
            finding = KernelDetector({(NODE, PCI): GPU}).judged(0.0, NODE, xid_event(code), verdict)
            _carries_out(engine, finding, Action(verdict.action), f"Xid {code} ({verdict.rule})")


def test_the_line_dependent_codes_are_the_ones_a_line_can_rate_either_way() -> None:
    ratings = xid_ratings()
    assert ratings.by_line == [64, 144, 145, 146, 147, 148, 149, 150, 154]
    assert ratings.unknown == default_policy().unknown_xid.severity.value


@pytest.mark.parametrize("pci", [None, "0000:06:00.0"], ids=["no-address", "switch-address"])
@pytest.mark.parametrize("fatal", [True, False, None], ids=["fatal", "non-fatal", "unmarked"])
def test_every_sxid_verdict_is_remedied_as_the_policy_rates_it(
    engine: Remediator, fatal: bool | None, pci: str | None
) -> None:
    """Severity (a fatal verdict takes the node out, only it), and intent: the steps that run are the action's (a fatal
    SXid's RESTART_BM reboots the node, resetting every GPU and NVSwitch, and resets no single GPU instead). The line
    names the switch's PCI address, which is no GPU of the node."""
    detail = SxidDetail(switch="nvswitch0", fatal=fatal, link=None)
    event = KernelEvent(kind="sxid", line=1, raw="", message="", sxid=20034, sxid_detail=detail, pci=pci)
    verdict = classify(event)
    _held_to_its_runbook(engine, event, verdict, f"SXid ({fatal})")
    assert isinstance(verdict.action, Action) and verdict.action in INTENT, verdict
    finding = KernelDetector({(NODE, PCI): GPU}).judged(0.0, NODE, event, verdict)
    _carries_out(engine, finding, verdict.action, f"SXid ({fatal})")
    assert not any("sxid" in r["expr"].lower() for r in RULES.values())  # no SXid series is alerted on


def test_a_fatal_sxid_reboots_the_node_on_the_twin(tmp_path: Path) -> None:
    """Carried out, not only planned: drain, reboot, re-test, back in service."""
    twin = small_twin(nodes=2, job_nodes=0)
    rem = remediator(twin, tmp_path)
    line = "nvidia-nvswitch0: SXid (PCI:0000:06:00.0): 20034, Fatal, Link 28 LTSSM Fault Up"
    (event,) = parse_kmsg(line)
    finding = KernelDetector({(NODE, PCI): GPU}).finding(0.0, NODE, event)
    assert (finding.cause, finding.action, finding.severity) == (RootCause.nvlink, "RESTART_BM", Severity.critical)
    first = rem.apply(incident_of(finding))
    assert first.runbook == "nvlink-reboot"
    assert {s.step: s.decision for s in first.steps} == {"drain": "done", "reboot": "done", "diag": "waiting"}
    assert twin.cluster.node(NODE).unschedulable  # out while it reboots
    twin.run(400)  # the reboot finishes
    [done] = rem.resume()
    assert {s.step: s.decision for s in done.steps} == {
        "drain": "done-earlier", "reboot": "done-earlier", "diag": "passed", "uncordon": "done", "repair": "skipped",
    }  # fmt: skip
    assert not twin.cluster.node(NODE).unschedulable


@pytest.mark.parametrize("kind", ["fallen_off_bus", "reset_required", "api_mismatch"])
def test_the_other_kernel_reports_are_remedied_as_the_policy_rates_them(engine: Remediator, kind: str) -> None:
    event = KernelEvent(kind=kind, line=1, raw="", message="", pci=PCI)  # type: ignore[arg-type]
    verdict = classify(event)
    _held_to_its_runbook(engine, event, verdict, kind)
    if verdict.action in ACTS:
        finding = KernelDetector({(NODE, PCI): GPU}).judged(0.0, NODE, event, verdict)
        _carries_out(engine, finding, Action(verdict.action), kind)


def test_the_escalations_take_the_hardware_out(engine: Remediator) -> None:
    escalation = default_policy().escalation
    for rule in (escalation.memory_progression.rule, escalation.repeated_gpu_lost.rule):
        assert rule.severity is XidSeverity.FATAL and rule.cause is not None
        verdict = Verdict(severity=rule.severity, action=rule.action, cause=rule.cause, rule="escalation")
        _held_to_its_runbook(engine, xid_event(48), verdict, f"escalation {rule.action}")


# -- one fault, one remedy --------------------------------------------------------------------------------------------


def _frame() -> MetricFrame:
    gpus = [GpuEntity(i, f"GPU-{i}", "NVIDIA H100 80GB HBM3", NODE, f"00000000:{0x3B + i - GPU:02X}:00.0") for i in
            range(4)]  # fmt: skip
    return MetricFrame(tuple(gpus), ())


def _counter_finding(field: str) -> Finding:
    """What the node's detectors find when a counter of GPU 2 goes from 0 to 1."""
    frame = _frame()
    health = NodeHealth(frame)
    for t, value in ((1.0, 0.0), (2.0, 1.0)):
        frame.clear_values()
        frame.timestamp = t
        frame.gpu("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")[:] = 0.0
        frame.gpu("DCGM_FI_DEV_ROW_REMAP_FAILURE")[:] = 0.0
        frame.gpu(field)[GPU] = value
        found = [f for f in health.observe(t, frame).findings if f.entity.index == GPU]
    (finding,) = found
    return finding


def _kernel_finding(code: int, message: str | None = None) -> Finding:
    """What the node's kernel detector finds in a driver's Xid line for GPU 2."""
    line = f"NVRM: Xid (PCI:{PCI}): {code}, pid=4242, name=python3, {message or xid_message(code)}"
    (event,) = parse_kmsg(line)
    return KernelDetector({(NODE, PCI): GPU}).finding(0.0, NODE, event)


def _steps_said(description: str, runbook: RunbookManifest) -> None:
    """The alert says what the runbook does: each of its steps, and no reset it does not do."""
    kinds = {s.action for s in runbook.spec.steps}
    words = {ActionKind.drain: "drain", ActionKind.reset_gpu: "reset it", ActionKind.diag: "re-test"}
    for kind, word in words.items():
        assert (word in description.lower()) == (kind in kinds), (runbook.name, word, description)
    if any(s.ticket_kind == "rma" for s in runbook.spec.steps):
        assert "(RMA)" in description


def test_an_uncorrectable_ecc_error_has_one_remedy_whichever_way_it_is_seen(engine: Remediator) -> None:
    runbooks = RunbookSet.builtin()
    seen = {
        "the ECC counter": _counter_finding("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"),
        "Xid 48": _kernel_finding(48),
        "Xid 95": _kernel_finding(95),
        "Xid 171": _kernel_finding(171, "Uncorrectable DRAM Error"),
    }
    picked = {how: runbooks.select(incident_of(f)) for how, f in seen.items()}
    assert {rb.name for rb in picked.values()} == {"ecc-dbe"}, {how: rb.name for how, rb in picked.items()}
    assert all(f.cause is RootCause.ecc_dbe and f.severity is Severity.critical for f in seen.values())
    runbook = picked["Xid 48"]
    assert takes_out_of_service(engine, incident_of(seen["the ECC counter"])) == (True, "ecc-dbe")
    rule = RULES["GpuEccDoubleBitError"]
    assert rule["labels"]["severity"] == "critical"
    assert f"runbook {runbook.name}" in rule["annotations"]["description"]
    _steps_said(rule["annotations"]["description"], runbook)
    assert xid_alerts(48) == xid_alerts(95) == ["GpuXidFatal"]


def test_a_failed_row_remap_has_one_remedy_whichever_way_it_is_seen(engine: Remediator) -> None:
    runbooks = RunbookSet.builtin()
    flag = _counter_finding("DCGM_FI_DEV_ROW_REMAP_FAILURE")
    xid64 = _kernel_finding(64)  # "Failed to remap a row, GPU must be serviced."
    assert runbooks.select(incident_of(flag)).name == runbooks.select(incident_of(xid64)).name == "row-remap-failure"
    runbook = runbooks.select(incident_of(flag))
    rule = RULES["GpuRowRemapFailure"]
    assert rule["labels"]["severity"] == "critical" and flag.severity is xid64.severity is Severity.critical
    assert f"runbook {runbook.name}" in rule["annotations"]["description"]
    _steps_said(rule["annotations"]["description"], runbook)
    assert takes_out_of_service(engine, incident_of(flag)) == (True, "row-remap-failure")


@pytest.mark.parametrize(
    ("state", "acts"),
    [
        ("0x0 (None)", set()),
        ("0x1 (GPU Reset Required)", {ActionKind.drain, ActionKind.reset_gpu, ActionKind.diag}),
        ("0x2 (Node Reboot Required)", {ActionKind.drain, ActionKind.reboot_node, ActionKind.diag}),
        ("0x3 (Drain P2P)", {ActionKind.drain, ActionKind.notify, ActionKind.ticket}),
        ("0x4 (Drain and Reset)", {ActionKind.drain, ActionKind.reset_gpu, ActionKind.diag}),
    ],
)
def test_an_xid_154_runs_the_steps_of_the_recovery_it_announces(
    engine: Remediator, state: str, acts: set[ActionKind]
) -> None:
    """Every announced state has steps that carry it out (NVIDIA GPU Memory Error Management, "Error Recovery and
    Response Flags"); Drain P2P ends the GPU's peer-to-peer work by draining the node, tells the operators and files
    what is left (UVM persistence off, the next Xid 154), and resets nothing. (The steps that wait on the re-test's
    result, uncordon and a repair ticket, are not counted.)"""
    finding = _kernel_finding(154, f"GPU recovery action changed from 0x0 (None) to {state}")
    report = engine.plan(incident_of(finding))
    assert report.runbook == "xid-154-recovery-action"
    later = ("uncordon", "repair")
    runs = {ActionKind(s.action) for s in report.steps if s.decision == "would" and s.step not in later}
    assert runs == acts, report.steps
    if state.startswith("0x3"):
        assert finding.action == "DRAIN_P2P" and finding.severity is Severity.critical
        _carries_out(engine, finding, Action.DRAIN_P2P, "Xid 154 Drain P2P")


def _sbe_rate_finding() -> Finding:
    """What the node's GPU detector finds when GPU 2's single-bit count grows past DCGM's rate for a minute."""
    frame = _frame()
    health = NodeHealth(frame)
    found: list[Finding] = []
    for t in range(0, 61, 10):
        frame.clear_values()
        frame.timestamp = float(t)
        frame.gpu("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL")[:] = 0.0
        frame.gpu("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL")[GPU] = 5.0 * t  # 300 a minute
        found += [f for f in health.observe(float(t), frame).findings if f.entity.index == GPU]
    assert found and {f.cause for f in found} == {RootCause.ecc_sbe_rate}
    return found[-1]


def test_a_high_single_bit_rate_has_one_remedy_whichever_way_it_is_seen(engine: Remediator) -> None:
    """Xid 92 is the driver's report of the condition the single-bit counter shows: NVIDIA's catalog buckets it IGNORE
    (the errors were corrected) with CONTACT_SUPPORT to investigate. The counter's finding asks for the same action,
    and both take the same runbook, which keeps the GPU in service and opens a repair."""
    runbooks = RunbookSet.builtin()
    xid92 = code_verdicts(92)[0]
    assert (xid92.action, xid92.investigatory) == (Action.IGNORE, "CONTACT_SUPPORT")
    assert xid92.severity is XidSeverity.NONFATAL
    seen = {"the single-bit counter": _sbe_rate_finding(), "Xid 92": _kernel_finding(92)}
    assert {f.cause for f in seen.values()} == {RootCause.ecc_sbe_rate}
    assert {f.action for f in seen.values()} == {xid92.action.value}  # the counter's finding asks what Xid 92 does
    picked = {how: runbooks.select(incident_of(f)).name for how, f in seen.items()}
    assert set(picked.values()) == {"ecc-sbe-rate"}, picked
    steps = runbooks.by_name["ecc-sbe-rate"].spec.steps
    assert [(s.action, s.ticket_kind) for s in steps] == [(ActionKind.notify, None), (ActionKind.ticket, "repair")]
    for how, finding in seen.items():
        assert takes_out_of_service(engine, incident_of(finding)) == (False, "ecc-sbe-rate"), how
        _carries_out(engine, finding, Action.IGNORE, how)


@pytest.mark.parametrize(
    ("code", "message", "alert", "runbook", "out"),
    [
        (63, None, "GpuXid", "row-remap-recorded", False),  # recorded: reset when convenient
        (64, "Row Remapper: row remap failed due to pending row remap", "GpuXidLineDependent", "row-remap-recorded",
         False),  # benign: a remap already pending
        (64, None, "GpuXidLineDependent", "row-remap-failure", True),
        (79, None, "GpuXidFatal", "gpu-lost", True),
        (94, None, "GpuXid", "gpu-xid-app", False),  # contained: only its application ends
    ],
)  # fmt: skip
def test_the_memory_and_bus_xids_page_as_their_runbooks_act(
    engine: Remediator, code: int, message: str | None, alert: str, runbook: str, out: bool
) -> None:
    finding = _kernel_finding(code, message)
    assert xid_alerts(code) == [alert]
    assert takes_out_of_service(engine, incident_of(finding)) == (out, runbook)
    assert (finding.severity is Severity.critical) == out
    if alert != "GpuXidLineDependent":
        assert (RULES[alert]["labels"]["severity"] == "critical") == out


@pytest.mark.real
def test_promtool_pages_every_code_as_the_policy_rates_it(tmp_path: Path) -> None:
    """The generated rules in the real rule engine: one series per catalog code (and an unlisted one), each firing
    exactly the rule its rating names, at that rule's severity."""
    require_tool("promtool")
    codes = [*sorted(load_xid_catalog()), 999]
    labels = {"gpu": "0", "UUID": "GPU-0", "device": "nvidia0", "modelName": "NVIDIA H100 80GB HBM3",
              "hostname": NODE, "window_size_in_ms": "300000"}  # fmt: skip
    series = [
        {"series": "DCGM_EXP_XID_ERRORS_COUNT{" + ",".join(f'{k}="{v}"' for k, v in {**labels, "xid": str(c)}.items())
         + "}", "values": "_ 1 1"}
        for c in codes
    ]  # fmt: skip
    expected: dict[str, list[dict[str, object]]] = {name: [] for name in XID_RULES}
    for code in codes:
        (name,) = xid_alerts(code)
        rule = RULES[name]
        alert_labels = {**labels, "xid": str(code), **rule["labels"]}
        notes = {k: render_annotation(v, alert_labels, None) for k, v in rule["annotations"].items()}
        expected[name].append({"exp_labels": alert_labels, "exp_annotations": notes})
    assert_alerts(tmp_path, series, expected)
