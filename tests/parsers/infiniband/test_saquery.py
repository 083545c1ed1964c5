from pathlib import Path

from gpufleet.parsers.infiniband.saquery import parse_smir

CAPTURES = Path(__file__).parents[2] / "captures" / "infiniband"


def test_two_subnet_managers_of_ibsim() -> None:
    records = parse_smir((CAPTURES / "saquery_smir_ibsim_two_sms.txt").read_text())
    assert [(r.lid, r.guid, r.activity, r.priority, r.state) for r in records] == [
        (2, "0x0000000000100001", 468, 0, "MASTER"),
        (1, "0x0000000000200000", 1341, 0, "STANDBY"),
    ]


def test_nothing_or_a_torn_record() -> None:
    assert parse_smir("") == []
    assert parse_smir("SMInfoRecord dump:\n\t\tRID\n\t\tLID...................1\n") == []
