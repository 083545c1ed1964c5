"""Everything gpufleet writes under its data directory is its owner's only, whatever the umask: each writer (the
state database, the metric store, tickets, the token and config files, an agent's spool) leaves files 0600 and
directories 0700, and tightens what an older version left wider."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.private_files import private_database, private_dir, private_file, write_private

UMASKS = [0o022, 0o000]


@pytest.fixture(params=UMASKS, ids=lambda m: f"umask-{m:03o}")
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def modes(root: Path) -> dict[str, int]:
    """Every file and directory under `root` (itself included) with its permission bits."""
    found = {".": stat.S_IMODE(root.stat().st_mode)}
    for path in root.rglob("*"):
        found[str(path.relative_to(root))] = stat.S_IMODE(path.lstat().st_mode)
    return found


def assert_private(root: Path) -> None:
    wrong = {}
    for name, mode in modes(root).items():
        want = 0o700 if (root / name).is_dir() else 0o600
        if mode != want:
            wrong[name] = f"{mode:o}"
    assert not wrong, f"not the owner's only: {wrong}"


def write_everything(home: Path) -> None:
    """What a control plane and an agent write in their data directory, through their own writers."""
    from gpufleet.agent.spool import RecordSpool
    from gpufleet.cli.client import write_config
    from gpufleet.control.paths import data_dir
    from gpufleet.remediate.tickets import FileTicketSink, Ticket
    from gpufleet.state import AuditLog, open_state
    from gpufleet.state.tokens import TokenStore, bootstrap_admin
    from gpufleet.telemetry.store import EmbeddedStore

    assert data_dir() == home
    db = open_state(home)
    AuditLog(db).append(actor="tester", action="cordon", target="node/a", decision="done")
    assert bootstrap_admin(TokenStore(db), home / "token") is not None
    store = EmbeddedStore(home / "metrics")
    for t in range(5):
        store.write({"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": "0"}, 1_700_000_000.0 + 15 * t, 40.0 + t)
    store.flush()
    ticket = Ticket("INC-1:rma", "rma", 0.0, "INC-1", "gpu-lost", "critical", "a", 3, "1652", 79, "GPU 3 lost")
    FileTicketSink(home / "tickets").file(ticket)
    write_config({"server": "http://cp:8470"})
    spool = RecordSpool(home / "agent" / "spool-a.db")
    spool.set("kmsg-offset", "12")
    assert (home / "state.db-wal").exists() and (home / "agent" / "spool-a.db-wal").exists()
    assert_private(home)  # open, with SQLite's -wal and -shm files beside each database
    spool.close()
    store.close()
    db.close()


def test_every_writer_leaves_its_files_private(tmp_path: Path, umask: int, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("GPUFLEET_HOME", str(home))
    write_everything(home)
    assert {"state.db", "token", "config", "metrics", "tickets", "agent"} <= set(modes(home))
    assert_private(home)


def test_what_an_older_version_left_wider_is_tightened(
    tmp_path: Path, umask: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    for folder in (home, home / "metrics", home / "tickets", home / "agent"):
        folder.mkdir(parents=True)
        folder.chmod(0o755)
    for name in ("state.db", "token", "config"):
        (home / name).write_text("")
        (home / name).chmod(0o644)
    (home / "state.db").unlink()  # an empty file is no database; its mode is what matters, on the next one
    monkeypatch.setenv("GPUFLEET_HOME", str(home))
    write_everything(home)
    assert_private(home)


def test_the_helpers_under_any_umask(tmp_path: Path, umask: int) -> None:
    made = private_dir(tmp_path / "a" / "b")
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o700 and made.is_dir()
    written = write_private(made / "f.json", "{}\n")
    assert written.read_text() == "{}\n"
    existing = made / "wide"
    existing.write_text("x")
    existing.chmod(0o666)
    private_file(existing)
    assert existing.read_text() == "x"  # tightened, not emptied
    private_database(made / "db.sqlite")
    assert_private(tmp_path / "a")
    assert not [p for p in made.iterdir() if p.name.endswith(".tmp")]  # no partial file left behind


def test_a_file_written_elsewhere_leaves_its_existing_folder_alone(tmp_path: Path, umask: int) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o755)
    write_private(shared / "agent.token", "gf_secret\n")  # `gpufleet token create --out shared/agent.token`
    assert stat.S_IMODE(shared.stat().st_mode) == 0o755
    assert stat.S_IMODE((shared / "agent.token").stat().st_mode) == 0o600
