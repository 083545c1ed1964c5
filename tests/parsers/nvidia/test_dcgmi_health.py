"""`dcgmi health -c` reports, in the tree layout dcgmi prints (Health.cpp, DcgmiOutputTree 28/60)."""

from __future__ import annotations

from gpufleet.parsers.nvidia.dcgmi_health import parse_health, parse_health_any, parse_health_json, read_health
from tests.conftest import CAPTURES

DATA = CAPTURES


def test_entities_systems_and_wrapped_messages() -> None:
    report = parse_health((DATA / "dcgmi_health_failure.txt").read_text())
    assert report.overall == "Failure" and report.complete
    gpu0, gpu1 = report.entities
    assert (gpu0.name, gpu0.health) == ("GPU 0", "Warning")
    [pcie] = gpu0.systems
    assert pcie.name == "PCIe system" and pcie.health == "Warning"
    assert pcie.message == "Detected more than 8 PCIe replays per minute for GPU 0 : 24"  # two rows joined
    assert [s.name for s in gpu1.systems] == ["Memory system", "InfoROM system"]
    assert gpu1.systems[0].message == "GPU 1 had uncorrectable memory errors and row remapping failed."
    assert len(gpu1.systems[0].lines) == 3  # its row and the two rows of its message


def test_healthy_and_not_enabled() -> None:
    healthy = parse_health((DATA / "dcgmi_health_healthy.txt").read_text())
    assert healthy.overall == "Healthy" and not healthy.entities and healthy.complete
    off, rows = read_health((DATA / "dcgmi_health_not_enabled.txt").read_text().splitlines())
    assert rows == 0 and off.errors == ["Health watches not enabled. Please enable watches."]


def test_cut_and_dropped_rows_are_seen() -> None:
    text = (DATA / "dcgmi_health_failure.txt").read_text().splitlines()
    for cut in range(1, len(text)):
        report = parse_health("\n".join(text[:cut]))
        assert not report.complete, cut
    without_failure = [line for line in text if "Memory system" not in line and "row" not in line]
    report = parse_health("\n".join(without_failure))
    assert any("GPU 1 is Failure" in gap for gap in report.gaps)


def test_the_watch_list_is_not_a_check() -> None:
    text = (
        "+------------------+----------------------------------------------------------------------+\n"
        "| Health monitor systems report                                                           |\n"
        "+==================+======================================================================+\n"
        "| PCIe             | On                                                                   |\n"
        "+------------------+----------------------------------------------------------------------+\n"
    )
    assert parse_health(text).watch_list


# dcgmi_health_failure.json: the report of dcgmi_health_failure.txt as `dcgmi health -c -j` prints it (DcgmiOutputJson:
# jsoncpp's styled string of the same tree, keys sorted, each node's value, overflow rows and children), written from
# DCGM's dcgmi/DcgmiOutput.cpp and DcgmiOutput.h (2.x-4.x)
def test_the_json_report_is_the_table_report() -> None:
    table = parse_health((DATA / "dcgmi_health_failure.txt").read_text())
    as_json = parse_health_json((DATA / "dcgmi_health_failure.json").read_text())
    assert as_json.overall == table.overall == "Failure" and not as_json.gaps
    shown = [(e.name, e.health, sorted((s.name, s.health, s.message) for s in e.systems)) for e in as_json.entities]
    assert shown == [(e.name, e.health, sorted((s.name, s.health, s.message) for s in e.systems))
                     for e in table.entities]  # fmt: skip
    assert parse_health_any((DATA / "dcgmi_health_failure.json").read_text()).overall == "Failure"


def test_json_that_is_cut_or_not_a_health_report_says_so() -> None:
    assert parse_health_json('{"body": {"Overall').gaps[0].startswith("not whole JSON")
    assert parse_health_json('{"header": ["x"]}').gaps == ["no `body` in the JSON: not a `dcgmi health -j` report"]
