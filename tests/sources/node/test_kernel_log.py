"""Incremental kernel-log reading: partial lines, growing and rotated files, /dev/kmsg, running dmesg."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from gpufleet.errors import BackendError, DependencyMissingError
from gpufleet.parsers.kernel.kmsg import parse_kmsg
from gpufleet.sources.node import kernel_log
from gpufleet.sources.node.kernel_log import (
    FilePosition,
    KernelLogFollower,
    KmsgPosition,
    Position,
    follow_file,
    read_dev_kmsg,
    run_dmesg,
)


def test_follow_file_sees_appended_lines_and_rotation(corpus: Path, tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text((corpus / "xid032_nvsentinel_csvtest.log").read_text())
    calls = {"n": 0}

    def stop() -> bool:
        # first idle poll: the file grows (with a partial last line); second: it is rotated; third: stop
        calls["n"] += 1
        if calls["n"] == 1:
            with log.open("a") as f:
                f.write((corpus / "xid119_aznhc_readme.log").read_text().rstrip("\n"))
            return False
        if calls["n"] == 2:
            log.rename(tmp_path / "kern.log.1")
            log.write_text((corpus / "xid079_dcgm_kmsgtest.log").read_text())
            return False
        return True

    events = list(follow_file(log, poll_s=0.0, stop=stop))
    assert [e.xid for e in events] == [32, 119, 79]


def test_follow_file_from_end_skips_old_lines(corpus: Path, tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text((corpus / "xid032_nvsentinel_csvtest.log").read_text())
    calls = {"n": 0}

    def stop() -> bool:
        calls["n"] += 1
        if calls["n"] == 1:
            with log.open("a") as f:
                f.write((corpus / "xid069_nvsentinel_csvtest.log").read_text())
            return False
        return True

    assert [e.xid for e in follow_file(log, from_start=False, poll_s=0.0, stop=stop)] == [69]


def test_read_dev_kmsg_records(corpus: Path, tmp_path: Path) -> None:
    # a saved /dev/kmsg dump: one `prio,seq,usec,flags;msg` record per line, dictionary lines indented
    good = (corpus / "xid079_dcgm_kmsgtest.log").read_text().strip()
    bad = (corpus / "neg_xid043_kmsg_malformed.log").read_text().strip()
    dump = tmp_path / "kmsg.dump"
    dump.write_text(f"{bad}\n SUBSYSTEM=pci\n4,1228,437812450000,-;{good}\n")
    events = list(read_dev_kmsg(dump))
    assert [(e.xid, e.uptime_s) for e in events] == [(79, pytest.approx(437812.45))]


def test_read_dev_kmsg_missing_path_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(BackendError, match="cannot open"):
        list(read_dev_kmsg(tmp_path / "no-kmsg"))


def _xid(code: int, second: int, name: str = "python") -> str:
    return f"[ {second}.000000] NVRM: Xid (PCI:0000:3b:00): {code}, pid={second}, name={name}, Xid {code} here\n"


def _read_what_there_is(follower: KernelLogFollower) -> list[int | None]:
    """Read to the current end and stop as a follower that will be resumed does."""
    events = [event for batch in follower.follow(lambda: True) for event in batch]
    return [event.xid for event in events + follower.end(last_line=False)]


@pytest.mark.parametrize("chunk", [3, 1 << 20])
def test_a_resumed_follower_reads_the_lines_written_while_stopped_across_a_rotation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    monkeypatch.setattr(kernel_log, "CHUNK", chunk)  # a line (and a character) split between reads is read once
    log = tmp_path / "kern.log"
    log.write_text(_xid(31, 1, "pythön") + _xid(43, 2))
    first = KernelLogFollower(log, poll_s=0.0)
    assert _read_what_there_is(first) == [31, 43]
    assert first.position == FilePosition(log.stat().st_dev, log.stat().st_ino, log.stat().st_size)
    saved = first.position.text()
    with log.open("a") as fh:  # written while no follower runs, then rotated away
        fh.write(_xid(13, 3) + _xid(48, 4))
    log.rename(tmp_path / "kern.log.1")
    log.write_text(_xid(79, 5))
    second = KernelLogFollower(log, position=FilePosition.parse(saved), poll_s=0.0)
    assert _read_what_there_is(second) == [13, 48, 79]
    assert second.position == FilePosition(log.stat().st_dev, log.stat().st_ino, log.stat().st_size)
    names = [e.process for e in KernelLogFollower(log.with_suffix(".log.1")).events(lambda: True)]
    assert names[0] == "pythön"


def test_a_line_without_its_newline_is_left_for_the_resumed_follower(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    whole, cut = _xid(31, 1), _xid(79, 2)
    log.write_text(whole + cut[:30])
    first = KernelLogFollower(log, poll_s=0.0)
    assert _read_what_there_is(first) == [31]
    assert isinstance(first.position, FilePosition) and first.position.offset == len(whole)
    with log.open("a") as fh:
        fh.write(cut[30:])
    assert _read_what_there_is(KernelLogFollower(log, position=first.position, poll_s=0.0)) == [79]


def test_a_resumed_follower_reads_a_truncated_file_from_its_start(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text(_xid(31, 1) + _xid(43, 2))
    first = KernelLogFollower(log, poll_s=0.0)
    _read_what_there_is(first)
    log.write_text(_xid(13, 3))  # copytruncate: the same file, shorter
    assert _read_what_there_is(KernelLogFollower(log, position=first.position, poll_s=0.0)) == [13]


def test_a_resumed_follower_waits_for_the_rotated_files_successor(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text(_xid(31, 1))
    first = KernelLogFollower(log, poll_s=0.0)
    _read_what_there_is(first)
    with log.open("a") as fh:
        fh.write(_xid(13, 2))
    log.rename(tmp_path / "kern.log-20250101")
    said: list[tuple[bool, str]] = []
    calls = {"n": 0}

    def stop() -> bool:
        calls["n"] += 1
        if calls["n"] == 2:  # the new file appears after a while
            log.write_text(_xid(79, 3))
        return calls["n"] > 3

    second = KernelLogFollower(log, position=first.position, poll_s=0.0, status=lambda ok, why: said.append((ok, why)))
    assert [e.xid for batch in second.follow(stop) for e in batch] == [13, 79]
    assert (False, f"{log} does not exist yet") in said and said[-1] == (True, "")


def test_positions_are_stored_as_text_and_older_forms_still_read() -> None:
    assert FilePosition.parse(FilePosition(2049, 1234, 56).text()) == FilePosition(2049, 1234, 56)
    assert FilePosition.parse("1234:56") == FilePosition(None, 1234, 56)  # what older agents stored
    assert [FilePosition.parse(bad) for bad in (None, "", "x:1", "1:2:3:4")] == [None] * 4
    assert KmsgPosition.parse(KmsgPosition(7, "b00t").text()) == KmsgPosition(7, "b00t")
    assert KmsgPosition.parse("7") == KmsgPosition(7)
    assert [KmsgPosition.parse(bad) for bad in (None, "", "-1", "x:b00t")] == [None] * 4


def test_kmsg_resumes_after_the_last_record_read_in_the_same_boot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    boot = tmp_path / "boot_id"
    boot.write_text("boot-a\n")
    monkeypatch.setattr(kernel_log, "BOOT_ID", boot)
    dump = tmp_path / "kmsg.dump"
    records = [f"4,{seq},{seq}000000,-;" + _xid(code, seq).split("] ", 1)[1] for seq, code in ((7, 31), (8, 43))]
    dump.write_text(records[0] + " SUBSYSTEM=pci\n" + records[1])

    def read(position: KmsgPosition | None) -> tuple[list[int | None], Position | None]:
        follower = KernelLogFollower(dump, kmsg=True, position=position, poll_s=0.0)
        return [e.xid for e in follower.events(lambda: True)], follower.position

    assert read(None) == ([31, 43], KmsgPosition(8, "boot-a"))
    assert read(KmsgPosition(7, "boot-a")) == ([43], KmsgPosition(8, "boot-a"))
    assert read(KmsgPosition(8)) == ([], KmsgPosition(8, "boot-a"))  # stored before boots were: this boot
    assert read(KmsgPosition(8, "boot-before")) == ([31, 43], KmsgPosition(8, "boot-a"))  # rebooted since


def _fake_tool(directory: Path, name: str, script: str) -> Path:
    path = directory / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_run_dmesg_returns_output(corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = corpus / "burst_xid13_43_oom_gpud.log"
    _fake_tool(tmp_path, "dmesg", f'cat "{source}"\n')
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert [e.xid for e in parse_kmsg(run_dmesg())][-1] == 43


def test_run_dmesg_refused_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_tool(tmp_path, "dmesg", 'echo "dmesg: read kernel buffer failed: Operation not permitted" >&2\nexit 1\n')
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(BackendError) as info:
        run_dmesg()
    assert "Operation not permitted" in info.value.message and "CAP_SYSLOG" in (info.value.fix or "")


def test_run_dmesg_missing_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(DependencyMissingError, match="not installed"):
        run_dmesg()


def test_this_machines_kernel_log_via_dev_kmsg_and_dmesg() -> None:
    """The real /dev/kmsg (one record per read, drained without blocking) and dmesg agree on GPU faults."""
    if not os.access("/dev/kmsg", os.R_OK) or shutil.which("dmesg") is None:
        pytest.skip("needs a readable /dev/kmsg and dmesg")
    try:
        text = run_dmesg(("--raw",))
    except BackendError as exc:
        pytest.skip(f"dmesg refused here: {exc.message}")
    from_kmsg = list(read_dev_kmsg())
    from_dmesg = parse_kmsg(text)
    assert [(e.kind, e.code, e.pci) for e in from_kmsg] == [(e.kind, e.code, e.pci) for e in from_dmesg]
