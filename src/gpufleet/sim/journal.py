"""What lets `gpufleet up` restart where it stopped: the twin is rebuilt from its scenario (it is seeded, so the
same actions at the same moments give the same cluster), then brought to the moment of its last checkpoint with
every action taken on it replayed. The checkpoint also holds its agents' stream positions, so their records go on
from where the control plane's stopped: nothing is replayed into it, nothing is lost.

The journal lives in the control plane's state database (its tables are in state/schema.py); a checkpoint is
written in the same transaction as the batches of its moment.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufleet.state import Database

EPOCH_KEY = "twin_epoch"
LATCHED_KEY = "twin_latched"


@dataclass(frozen=True, slots=True)
class Checkpoint:
    time: float  # twin seconds
    incarnation: str
    agents: dict[str, dict[str, int]]  # node -> {"seq": .., "kmsg": ..}
    latched: dict[str, float] = field(default_factory=dict)  # the agents' detectors' state (NodeHealth.latched)


def scenario_id(path: Path) -> str:
    """A scenario's identity: its path and contents (an edited scenario is a new twin)."""
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
    return f"{Path(path).resolve()}#{digest}"


class TwinJournal:
    def __init__(self, db: Database, scenario: str) -> None:
        self.db = db  # its tables are in the state schema (state/schema.py)
        self.scenario = scenario

    @property
    def snapshots(self) -> bool:
        """Whether the twin's state is kept now and then: in the embedded SQLite file only, which is its owner's
        alone (a snapshot is a pickle, which a database shared with others must not be trusted to hold)."""
        return self.db.dialect == "sqlite"

    def load(self, after_snapshot: bool = False) -> tuple[Checkpoint | None, list[tuple[float, str, list[Any]]]]:
        """The last checkpoint and the actions to replay, if they belong to this scenario: all of them, or with
        `after_snapshot` those taken after the snapshot (`snapshot()`) was."""
        row = self.db.one("SELECT scenario, time, incarnation, agents FROM twin_checkpoint WHERE id = 1")
        if row is None or row[0] != self.scenario:
            return None, []
        since = 0
        if after_snapshot:
            kept = self.db.one("SELECT last_action FROM twin_snapshot WHERE id = 1 AND scenario = ?", (self.scenario,))
            since = int(kept[0]) if kept else 0
        actions = self.db.query(
            "SELECT time, action, args FROM twin_actions WHERE scenario = ? AND id > ? ORDER BY id",
            (self.scenario, since),
        )
        latched = json.loads(self.db.get_meta(LATCHED_KEY) or "{}")
        checkpoint = Checkpoint(float(row[1]), row[2], json.loads(row[3]), latched)
        return checkpoint, [(t, a, json.loads(x)) for t, a, x in actions]

    def snapshot(self) -> tuple[float, bytes] | None:
        """(twin time, the pickled twin) of the last snapshot of this scenario's twin, if there is one."""
        if not self.snapshots:
            return None
        row = self.db.one("SELECT time, body FROM twin_snapshot WHERE id = 1 AND scenario = ?", (self.scenario,))
        return (float(row[0]), zlib.decompress(bytes(row[1]))) if row else None

    def last_action(self) -> int:
        """The id of the newest action journaled (0 for none)."""
        last = self.db.one("SELECT MAX(id) FROM twin_actions WHERE scenario = ?", (self.scenario,))
        return int(last[0] or 0) if last else 0

    def save_snapshot(self, time: float, body: bytes, last_action: int) -> None:
        """The pickled twin at `time`, which has had the actions up to `last_action`: a restart replays only those
        after it."""
        self.db.execute(
            "INSERT INTO twin_snapshot VALUES (1, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET scenario = "
            "excluded.scenario, time = excluded.time, last_action = excluded.last_action, body = excluded.body",
            (self.scenario, time, last_action, zlib.compress(body, 1)),
        )

    def reset(self) -> None:
        """Forget another scenario's journal: this twin starts fresh."""
        with self.db.transaction():
            self.db.execute("DELETE FROM twin_checkpoint")
            self.db.execute("DELETE FROM twin_actions")
            self.db.execute("DELETE FROM twin_snapshot")
            self.db.set_meta(LATCHED_KEY, "{}")
        self.db.set_meta(EPOCH_KEY, "")

    def epoch(self, fresh: float) -> float:
        """The twin's t=0 as Unix time: kept from the run a checkpoint belongs to, so a resumed twin's times go on
        from its incidents' and metrics'; `fresh` (the wall clock) for a twin starting anew."""
        kept = self.db.get_meta(EPOCH_KEY)
        if kept:
            return float(kept)
        self.db.set_meta(EPOCH_KEY, repr(fresh))
        return fresh

    def checkpoint(
        self,
        time: float,
        incarnation: str,
        agents: dict[str, dict[str, int]],
        latched: dict[str, float] | None = None,
    ) -> None:
        if latched is not None:
            self.db.set_meta(LATCHED_KEY, json.dumps(latched, sort_keys=True))
        self.db.execute(
            "INSERT INTO twin_checkpoint VALUES (1, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET "
            "scenario = excluded.scenario, time = excluded.time, incarnation = excluded.incarnation, "
            "agents = excluded.agents",
            (self.scenario, time, incarnation, json.dumps(agents)),
        )

    def record(self, time: float, action: str, args: list[Any]) -> None:
        self.db.execute(
            "INSERT INTO twin_actions(scenario, time, action, args) VALUES (?, ?, ?, ?)",
            (self.scenario, time, action, json.dumps(args, default=str)),
        )
