"""The incident book's rule 3b: a kernel report graver than the open incident of its cause on its GPU opens an
incident of its own, so each incident keeps the severity and the remedy of the report that opened it."""

from __future__ import annotations

from gpufleet.health.incidents import IncidentBook
from gpufleet.model import Entity, EntityKind, RootCause, Severity
from gpufleet.model.observe import Finding

GPU = Entity(EntityKind.gpu, "node-a", 3)


def xid(t: float, code: int, severity: Severity, action: str, source: str = "kmsg") -> Finding:
    return Finding(t, RootCause.gpu_xid, GPU, severity, f"Xid {code}", f"Xid {code} line", source, action=action,
                   xid=code)  # fmt: skip


def test_a_fatal_xid_after_an_application_xid_opens_its_own_incident() -> None:
    book = IncidentBook()
    app = book.add(xid(0.0, 31, Severity.warning, "RESTART_APP"))
    fatal = book.add(xid(40.0, 62, Severity.critical, "RESET_GPU"))
    assert fatal.id != app.id
    assert (fatal.severity, fatal.action, fatal.xid) == (Severity.critical, "RESET_GPU", 62)
    assert (app.severity, app.action) == (Severity.warning, "RESTART_APP")
    follow = book.add(xid(41.0, 45, Severity.warning, "WORKFLOW_XID_45"))  # lesser: joins the open incident
    assert follow.id == fatal.id and (fatal.count, fatal.action) == (2, "RESET_GPU")


def test_a_measured_condition_that_grows_stays_one_incident() -> None:
    book = IncidentBook()
    first = book.add(xid(0.0, 0, Severity.warning, "", source="telemetry"))
    again = book.add(xid(5.0, 0, Severity.critical, "", source="telemetry"))
    assert again.id == first.id and again.severity is Severity.critical
