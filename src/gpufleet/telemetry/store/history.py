"""Durable history: the series registry and fixed-length value chunks in one SQLite file.

A chunk is one series' values for `chunk_slots` consecutive slots of one tier (NaN where no sample), stored as
zlib-compressed little-endian float64. Slot times are implied by the chunk number, so no timestamps are
stored.

A chunk still being filled is kept durable by deltas, not by rewriting every series' chunk: each flush stores the
slots written since the last one, for every series at once, as one compressed block (`pending`). When the chunk is
sealed its series are written one by one and its deltas dropped; deltas left by a stop are folded into their chunks
when the store opens again.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import zlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

from gpufleet.errors import BackendError
from gpufleet.private_files import private_database, private_dir

_SCHEMA = """
CREATE TABLE IF NOT EXISTS series (
  id INTEGER PRIMARY KEY,
  labels TEXT NOT NULL UNIQUE,
  kind TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS chunks (
  tier INTEGER NOT NULL,
  series_id INTEGER NOT NULL,
  chunk INTEGER NOT NULL,
  data BLOB NOT NULL,
  PRIMARY KEY (tier, series_id, chunk)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS pending (
  tier INTEGER NOT NULL,
  chunk INTEGER NOT NULL,
  seq INTEGER NOT NULL,
  first INTEGER NOT NULL,
  ids BLOB NOT NULL,
  data BLOB NOT NULL,
  PRIMARY KEY (tier, chunk, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""

WRITE_BATCH = 4096  # series per statement when a chunk is sealed: readers of the file wait no longer than this


def encode_chunk(values: np.ndarray) -> bytes:
    return zlib.compress(np.ascontiguousarray(values, dtype="<f8").tobytes(), 1)


def decode_chunk(data: bytes, slots: int) -> np.ndarray:
    arr = np.frombuffer(zlib.decompress(data), dtype="<f8")
    if arr.size != slots:
        raise BackendError(f"stored chunk has {arr.size} values, expected {slots}", fix="the data dir is corrupt")
    return arr


def labels_key(labels: Mapping[str, str]) -> str:
    return json.dumps(sorted(labels.items()), separators=(",", ":"))


class History:
    """SQLite-backed registry and chunk files. `path=None` keeps everything in memory (tests, benchmarks).

    The store writes under its own lock, but a sealed chunk's series are written by the flusher outside it; one lock
    here keeps the connection to one statement at a time."""

    def __init__(self, path: Path | None) -> None:
        target = ":memory:"
        try:
            if path is not None:  # its folder and files 0700/0600 like everything in the data directory
                private_dir(path.parent)
                target = str(private_database(path))
            self.db = sqlite3.connect(target, check_same_thread=False)
            self.db.executescript(_SCHEMA)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
        except (sqlite3.DatabaseError, OSError) as exc:
            raise BackendError(f"cannot open metric history {path or target}: {exc}", fix="check the data dir") from exc
        self.lock = threading.RLock()

    def load_series(self) -> list[tuple[int, dict[str, str], str]]:
        with self.lock:
            rows = self.db.execute("SELECT id, labels, kind FROM series ORDER BY id").fetchall()
        return [(sid, dict(json.loads(labels)), kind) for sid, labels, kind in rows]

    def has_series(self) -> bool:
        with self.lock:
            return self.db.execute("SELECT 1 FROM series LIMIT 1").fetchone() is not None

    def add_series(self, sid: int, labels: Mapping[str, str], kind: str) -> None:
        with self.lock:
            self.db.execute("INSERT INTO series (id, labels, kind) VALUES (?, ?, ?)", (sid, labels_key(labels), kind))

    def add_many_series(self, rows: Sequence[tuple[int, str, str]]) -> None:
        """(id, labels_key, kind) of several new series in one statement."""
        with self.lock:
            self.db.executemany("INSERT INTO series (id, labels, kind) VALUES (?, ?, ?)", rows)

    def write_chunks(self, tier: int, chunk: int, series_ids: Iterable[int], rows: np.ndarray) -> None:
        """Store (replacing) one chunk for several series; `rows[k]` belongs to the k-th id."""
        ids = list(series_ids)
        for start in range(0, len(ids), WRITE_BATCH):
            part = ids[start : start + WRITE_BATCH]
            payload = [(tier, sid, chunk, encode_chunk(rows[start + k])) for k, sid in enumerate(part)]
            with self.lock:
                self.db.executemany("INSERT OR REPLACE INTO chunks VALUES (?, ?, ?, ?)", payload)

    def read_chunk_rows(self, tier: int, chunk: int, slots: int) -> dict[int, np.ndarray]:
        with self.lock:
            cur = self.db.execute("SELECT series_id, data FROM chunks WHERE tier=? AND chunk=?", (tier, chunk))
            return {sid: decode_chunk(data, slots) for sid, data in cur}

    # -- deltas of the chunk being filled ----------------------------------------------------------------------
    def write_delta(self, tier: int, chunk: int, first: int, ids: np.ndarray, block: np.ndarray) -> None:
        """Slots `first .. first + block.shape[1] - 1` of chunk `chunk` for the series `ids` (one row each)."""
        id_bytes = zlib.compress(np.ascontiguousarray(ids, dtype="<i8").tobytes(), 1)
        data = zlib.compress(np.ascontiguousarray(block, dtype="<f8").tobytes(), 1)
        with self.lock:
            row = self.db.execute("SELECT MAX(seq) FROM pending WHERE tier=? AND chunk=?", (tier, chunk)).fetchone()
            seq = 0 if row[0] is None else int(row[0]) + 1
            self.db.execute("INSERT INTO pending VALUES (?, ?, ?, ?, ?, ?)", (tier, chunk, seq, first, id_bytes, data))

    def read_deltas(self, tier: int, chunk: int) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """A chunk's deltas in the order they were written: (first slot, series ids, values[ids, slots])."""
        with self.lock:
            rows = self.db.execute(
                "SELECT first, ids, data FROM pending WHERE tier=? AND chunk=? ORDER BY seq", (tier, chunk)
            ).fetchall()
        out = []
        for first, id_bytes, data in rows:
            ids = np.frombuffer(zlib.decompress(id_bytes), dtype="<i8")
            values = np.frombuffer(zlib.decompress(data), dtype="<f8")
            if ids.size == 0 or values.size % ids.size:
                raise BackendError(
                    f"a stored delta of tier {tier} chunk {chunk} has {values.size} values for {ids.size} series",
                    fix="the data dir is corrupt",
                )
            out.append((int(first), ids, values.reshape(ids.size, values.size // ids.size)))
        return out

    def pending_chunks(self, tier: int) -> list[int]:
        with self.lock:
            return [r[0] for r in self.db.execute("SELECT DISTINCT chunk FROM pending WHERE tier=?", (tier,))]

    def drop_deltas(self, tier: int, chunk: int) -> None:
        with self.lock:
            self.db.execute("DELETE FROM pending WHERE tier=? AND chunk=?", (tier, chunk))

    def read_series_chunks(self, tier: int, series_id: int, first: int, last: int, slots: int) -> dict[int, np.ndarray]:
        with self.lock:
            cur = self.db.execute(
                "SELECT chunk, data FROM chunks WHERE tier=? AND series_id=? AND chunk BETWEEN ? AND ?",
                (tier, series_id, first, last),
            )
            return {chunk: decode_chunk(data, slots) for chunk, data in cur}

    def drop_before(self, tier: int, chunk: int) -> None:
        with self.lock:
            self.db.execute("DELETE FROM chunks WHERE tier=? AND chunk < ?", (tier, chunk))
            self.db.execute("DELETE FROM pending WHERE tier=? AND chunk < ?", (tier, chunk))

    def get_meta(self, key: str) -> str | None:
        with self.lock:
            row = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else None

    def set_meta(self, key: str, value: str) -> None:
        with self.lock:
            self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def commit(self) -> None:
        with self.lock:
            self.db.commit()

    def close(self) -> None:
        with self.lock:
            self.db.commit()
            self.db.close()

    def chunk_count(self, tier: int) -> int:
        with self.lock:
            return int(self.db.execute("SELECT COUNT(*) FROM chunks WHERE tier=?", (tier,)).fetchone()[0])

    def series_ids_with_chunks(self, tier: int, chunks: Sequence[int]) -> set[int]:
        marks = ",".join("?" * len(chunks))
        with self.lock:
            cur = self.db.execute(
                f"SELECT DISTINCT series_id FROM chunks WHERE tier=? AND chunk IN ({marks})", (tier, *chunks)
            )
            return {row[0] for row in cur}
