"""`saquery SMIR` (infiniband-diags): the SMInfoRecords the subnet administrator holds, one per subnet manager it
knows (the master and the standbys it polls), as `saquery` dumps them:

    SMInfoRecord dump:
                RID
                LID...................1
                SMInfo dump:
                GUID..................0x0000000000200000
                SM_Key................0x0000000000000000
                ActCount..............533
                Priority..............0
                SMState...............3

SMState is the SMInfo state of IBA 14.2.5.13: 0 not active, 1 discovering, 2 standby, 3 master. Tested on the
output of infiniband-diags 39 against OpenSM 3.3.23 on ibsim (tests/fabric/test_settings_ibsim.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SM_STATES = {0: "NOTACTIVE", 1: "DISCOVERING", 2: "STANDBY", 3: "MASTER"}
_FIELD = re.compile(r"^\s*(?P<key>[A-Za-z_]+)\.{2,}(?P<value>\S+)\s*$")


@dataclass(frozen=True, slots=True)
class SMInfoRecord:
    lid: int
    guid: str
    activity: int
    priority: int
    state: str  # MASTER, STANDBY, ...


def parse_smir(text: str) -> list[SMInfoRecord]:
    records: list[SMInfoRecord] = []
    fields: dict[str, str] = {}

    def flush() -> None:
        if {"LID", "GUID", "Priority", "SMState"} <= fields.keys():
            try:
                state = int(fields["SMState"], 0)
                records.append(
                    SMInfoRecord(
                        int(fields["LID"], 0),
                        f"0x{int(fields['GUID'], 16):016x}",
                        int(fields.get("ActCount", "0"), 0),
                        int(fields["Priority"], 0),
                        SM_STATES.get(state, str(state)),
                    )
                )
            except ValueError:
                pass
        fields.clear()

    for line in text.splitlines():
        if line.strip().startswith("SMInfoRecord dump"):
            flush()
            continue
        found = _FIELD.match(line)
        if found is not None:
            fields[found.group("key")] = found.group("value")
    flush()
    return records
