"""ibdiagnet's Summary table, its stages' entries with their detail lines, and db_csv sections."""

from __future__ import annotations

from gpufleet.parsers.infiniband.ibdiagnet import parse_ibdiagnet
from tests.conftest import CAPTURES

IB = CAPTURES / "infiniband"

# the console layout of ibdiagnet 2.x: a rule, the stage's title, its entries (detail lines indented)
STAGES = """---------------------------------------------
Port Counters
-E- lid=0x0003 dev=51000 S248a0703008b3f5c/N248a0703008b3f5c/P9
        Performance Monitor counter     : Value
        symbol_error_counter            : 52   (threshold=1)
        link_downed_counter             : 3    (threshold=1)
-I- Ports counters value Check finished with errors

---------------------------------------------
Summary
-I- Stage                     Warnings   Errors     Comment
-I- Discovery                 0          0
-I- Port Counters             0          1
-I- Routing                   0          0          Skipped

-I- You can find detailed errors/warnings in: /var/tmp/ibdiagnet2/ibdiagnet2.log
"""


def test_a_summary_with_blank_lines_between_rows() -> None:
    parsed = parse_ibdiagnet((IB / "ibdiagnet_summary_speed_width_errors.txt").read_text())
    rows = {s.stage: (s.warnings, s.errors) for s in parsed.summary}
    assert rows["Speed / Width checks"] == (0, 15) and rows["Nodes Information"] == (16, 0)
    assert len(rows) == 11 and not parsed.unreadable


def test_stage_entries_and_their_counters() -> None:
    parsed = parse_ibdiagnet(STAGES)
    entry = parsed.in_stage("Port Counters")[0]
    assert entry.level == "E" and entry.counters == {"symbol_error_counter": 52, "link_downed_counter": 3}
    assert parsed.summary[2].comment == "Skipped"
    assert parsed.log_path == "/var/tmp/ibdiagnet2/ibdiagnet2.log"


def test_db_csv_sections() -> None:
    text = (
        "START_PM_INFO\nNodeGUID,PortGUID,PortNumber,SymbolErrorCounter,LinkDownedCounter\n"
        "0x248a0703008b3f5c,0x248a0703008b3f5c,9,52,3\nEND_PM_INFO\nSTART_NODES\nNodeDesc,NodeGUID\n"
    )
    parsed = parse_ibdiagnet(text)
    assert parsed.tables["PM_INFO"][0]["SymbolErrorCounter"] == "52"
    assert parsed.open_tables == ["NODES"]
