"""The Xid escalations that need history: a row remap followed by an uncorrectable error on the same GPU, and a node
whose GPUs keep falling off the bus. Judged through the correlator and its incident book, as the control plane does,
and rebuilt from kept incidents after a restart."""

from __future__ import annotations

from gpufleet.health.correlation import Correlator
from gpufleet.health.fault_history import FaultHistory
from gpufleet.health.incidents import IncidentBook
from gpufleet.model import Entity, EntityKind, IncidentState, RootCause, Severity
from gpufleet.model.observe import Finding

T0 = 1_800_000_000.0
DAY = 86_400.0
REMAP_LINE = "NVRM: Xid (PCI:0000:18:00): 63, pid=1, Row Remapper: New row marked for remapping, reset gpu to activate."
DBE_LINE = "NVRM: Xid (PCI:0000:18:00): 48, pid=1, An uncorrectable double bit error (DBE) has been detected on GPU"


def gpu(node: str = "n1", index: int = 2) -> Entity:
    return Entity(EntityKind.gpu, node, index)


def remap(t: float, entity: Entity | None = None) -> Finding:
    return Finding(t, RootCause.retired_pages, entity or gpu(), Severity.info, "Xid 63", REMAP_LINE, "kmsg",
                   action="IGNORE", xid=63)  # fmt: skip


def dbe(t: float, entity: Entity | None = None) -> Finding:
    return Finding(t, RootCause.ecc_dbe, entity or gpu(), Severity.critical, "Xid 48", DBE_LINE, "kmsg",
                   action="WORKFLOW_XID_48", xid=48)  # fmt: skip


def lost(t: float, node: str = "n1", index: int = 2) -> Finding:
    return Finding(t, RootCause.gpu_lost, gpu(node, index), Severity.critical, "Xid 79", "GPU has fallen off the bus.",
                   "kmsg", action="RESTART_BM", xid=79)  # fmt: skip


def test_a_lone_row_remap_stays_a_watched_info_incident() -> None:
    c = Correlator()
    (inc,) = c.add([remap(T0)])
    assert (inc.cause, inc.severity, inc.action) == (RootCause.retired_pages, Severity.info, "IGNORE")


def test_a_dbe_after_a_row_remap_on_the_same_gpu_escalates_and_says_why() -> None:
    c = Correlator()
    (watched,) = c.add([remap(T0)])
    (escalated,) = c.add([dbe(T0 + 2 * DAY)])
    assert escalated.id != watched.id
    assert (escalated.cause, escalated.severity, escalated.action) == (RootCause.ecc_dbe, Severity.critical, "RMA")
    assert "63/64 -> 48" in escalated.summary and "2.0 days" in escalated.summary
    assert "escalated (RMA)" in escalated.evidence[0].text


def test_a_dbe_right_after_a_remap_in_the_same_burst_is_not_a_progression() -> None:
    c = Correlator()
    c.add([remap(T0)])
    (inc,) = c.add([dbe(T0 + 0.5)])  # the 63 the DBE triggered, printed a moment before it
    assert inc.action == "WORKFLOW_XID_48" and inc.cause is RootCause.ecc_dbe
    assert inc.severity is Severity.critical  # graver than the remap record: not folded into its incident


def test_a_dbe_on_another_gpu_or_after_the_window_does_not_escalate() -> None:
    c = Correlator()
    c.add([remap(T0)])
    (other,) = c.add([dbe(T0 + DAY, gpu("n1", 3))])
    assert other.action == "WORKFLOW_XID_48"
    (late,) = c.add([dbe(T0 + 31 * DAY)])
    assert late.action == "WORKFLOW_XID_48"


def test_a_lone_dbe_keeps_its_own_workflow() -> None:
    (inc,) = Correlator().add([dbe(T0)])
    assert inc.action == "WORKFLOW_XID_48"


def _four_fall_offs(c: Correlator, spacing: float = 5 * DAY) -> list[str]:
    actions = []
    for k in range(4):
        (inc,) = c.add([lost(T0 + k * spacing)])
        actions.append(inc.action)
        c.book.transition(inc.id, IncidentState.resolved)  # rebooted and passed its diag
    return actions


def test_the_fourth_fall_off_on_a_node_within_30_days_escalates_to_rma() -> None:
    c = Correlator()
    assert _four_fall_offs(c) == ["RESTART_BM", "RESTART_BM", "RESTART_BM", "RMA"]
    rma = max(c.book.incidents.values(), key=lambda i: i.first_seen)
    assert rma.cause is RootCause.gpu_lost and "more than 3" in rma.summary


def test_fall_offs_spread_beyond_30_days_do_not_escalate() -> None:
    assert _four_fall_offs(Correlator(), spacing=11 * DAY) == ["RESTART_BM"] * 4


def test_the_lines_of_one_fall_off_count_once() -> None:
    c = Correlator()
    for k in range(3):
        c.add([lost(T0 + k * DAY), lost(T0 + k * DAY + 0.01, index=3), lost(T0 + k * DAY + 1)])
    assert len(c.history.lost["n1"]) == 3
    (inc,) = c.add([lost(T0 + 3 * DAY)])
    assert inc.action == "RMA"


def test_an_escalation_opens_its_own_incident_even_while_the_last_one_is_open() -> None:
    c = Correlator()
    opened = [c.add([lost(T0 + k * DAY)])[0] for k in range(4)]
    assert opened[0].id == opened[1].id == opened[2].id  # repeats of one open incident
    assert opened[3].id != opened[2].id and opened[3].action == "RMA"


def test_the_count_survives_a_restart_through_the_kept_incidents() -> None:
    first = Correlator()
    _four_fall_offs(first, spacing=DAY)  # three plain, one escalated
    kept = [i for i in first.book.incidents.values() if i.action != "RMA"]
    book = IncidentBook(first_number=100)
    book.load(kept)
    restarted = Correlator(book)
    restarted.history.remember(kept)  # resolved ones the control plane reads back from its database
    (inc,) = restarted.add([lost(T0 + 4 * DAY)])
    assert inc.action == "RMA"


def test_a_remap_kept_in_a_dbe_incident_is_remembered() -> None:
    c = Correlator()
    (first,) = c.add([dbe(T0)])
    (joined,) = c.add([remap(T0 + 0.2)])  # the DBE's own remap record joins its incident
    assert joined.id == first.id
    history = FaultHistory()
    history.remember([first])
    assert "n1/2" in history.remapped
