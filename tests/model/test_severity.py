import json

from gpufleet.model import Severity


def test_rank_orders_info_warning_critical() -> None:
    assert [s.rank for s in (Severity.info, Severity.warning, Severity.critical)] == [0, 1, 2]
    assert sorted(Severity, key=lambda s: -s.rank) == [Severity.critical, Severity.warning, Severity.info]


def test_worst_of_none_is_none() -> None:
    assert Severity.worst([]) is None
    assert Severity.worst([Severity.info, Severity.critical, Severity.warning]) is Severity.critical
    assert Severity.worst(iter([Severity.info, Severity.warning])) is Severity.warning


def test_the_values_are_the_wire_strings() -> None:
    assert [str(s) for s in Severity] == ["critical", "warning", "info"]
    assert json.dumps({"severity": Severity.warning}) == '{"severity": "warning"}'
    assert Severity("critical") is Severity.critical
