"""Kernel-log fault events, tested on the corpus captures and on the same lines in every framing."""

from __future__ import annotations

import csv
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.model.pci import normalise_pci
from gpufleet.parsers.kernel import kmsg
from gpufleet.parsers.kernel.framing import split_frame
from gpufleet.parsers.kernel.kmsg import KernelEvent, KmsgParser, parse_kmsg, scan_kmsg

XID79 = "NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


def _one(text: str, host: str | None = None, year: int | None = None) -> KernelEvent:
    events = parse_kmsg(text, host=host, year=year)
    assert len(events) == 1, events
    return events[0]


def _expected_rows(corpus: Path) -> list[dict[str, str]]:
    with (corpus / "expected.csv").open() as f:
        return list(csv.DictReader(f))


def test_every_expected_file_yields_its_code(corpus: Path) -> None:
    for row in _expected_rows(corpus):
        scan = scan_kmsg((corpus / row["file"]).read_text())
        if not row["xid_code"]:
            assert scan.events == [], row["file"]
            assert len(scan.rejected) == 1, row["file"]
            continue
        if row["xid_code"].startswith("SXid"):
            assert {e.kind for e in scan.events} == {"sxid"}
            assert {e.sxid for e in scan.events} == {int(row["xid_code"].split()[1])}
        else:
            assert [e.xid for e in scan.events] == [int(row["xid_code"])], row["file"]
            assert scan.events[0].known
        assert scan.rejected == [], row["file"]


def test_every_kernel_log_in_corpus_parses_without_rejects(corpus: Path) -> None:
    files = sorted(corpus.glob("*.log"))
    assert len(files) >= 17
    for path in files:
        scan = scan_kmsg(path.read_text())
        if path.name.startswith("neg_"):
            assert scan.events == [] and scan.rejected
        else:
            assert scan.rejected == [], path.name


def test_burst_xid119_with_rpc_history(corpus: Path) -> None:
    events = parse_kmsg((corpus / "burst_xid119_gsp_rpc_history_gpud.log").read_text())
    assert [e.xid for e in events] == [119] * 5
    assert [e.line for e in events] == [3, 38, 40, 42, 43]
    first = events[0]
    assert first.pci == "0000:9b:00"
    assert first.gpu_uuid == "GPU-509665ad-b600-ac93-3616-d754b23d636d"
    assert first.pid == 2024380 and first.process == "nvidia-smi"
    assert first.wall_time == datetime(2025, 2, 23, 16, 24, 18)
    assert {e.process for e in events} == {"nvidia-smi", "cache_mgr_main", "gpud"}


def test_burst_xid13_43_decode_iso(corpus: Path) -> None:
    events = parse_kmsg((corpus / "burst_xid13_43_oom_gpud.log").read_text())
    assert [e.xid for e in events] == [13] * 16 + [43]
    assert all(e.pid is None and e.process is None for e in events[:16])
    assert events[0].wall_time == datetime(2025, 1, 21, 4, 41, 44, 283302, tzinfo=UTC)
    assert events[16].pid == 2924364 and events[16].process == "pt_main_thread"
    assert events[16].message == "Ch 00000008"
    # the units hit, for NVIDIA's WORKFLOW_XID_13 (the same GPC/TPC failing again points at hardware)
    assert events[0].gpc_tpc_sm == (8, 5, 1) and events[1].gpc_tpc_sm is None
    assert {e.gpc_tpc_sm for e in events if e.gpc_tpc_sm} == {
        (8, 5, 1),
        (9, 1, 1),
        (9, 2, 0),
        (9, 5, 0),
        (10, 1, 1),
        (10, 4, 0),
    }


def test_burst_xid79_then_sxids(corpus: Path) -> None:
    events = parse_kmsg((corpus / "burst_xid79_sxid_gpud.log").read_text())
    kinds = [e.kind for e in events]
    assert kinds == ["xid", "fallen_off_bus"] + ["sxid"] * 8
    assert events[0].uptime_s == pytest.approx(6781741.548779)
    fallen = events[1]
    assert fallen.pci == "0000:91:00" and fallen.root_xid == 79
    assert fallen.gpu_uuid == "GPU-b6c3b2be-c55b-d076-fa0e-d464e4c7e08b"
    sx = events[2]
    assert sx.sxid == 20034 and sx.pci == "0000:06:00"
    assert sx.sxid_detail is not None
    assert sx.sxid_detail.switch == "nvidia-nvswitch1" and sx.sxid_detail.fatal is True and sx.sxid_detail.link == 48
    data = events[5]  # nvswitch0's Data words belong to its `Fatal, Link 63` head two lines up
    assert data.sxid_detail is not None
    assert (data.sxid_detail.fatal, data.sxid_detail.link, data.sxid_detail.continues_line) == (True, 63, 7)
    # nvswitch2's detail line (line 8) came before its `Fatal, Link 37` head (line 10): it joins that record
    early, head = events[4], events[6]
    assert (early.line, head.line) == (8, 10)
    assert early.sxid_detail is not None
    assert (early.sxid_detail.fatal, early.sxid_detail.link, early.sxid_detail.continues_line) == (True, 37, 10)
    assert all(e.sxid_detail is not None and e.sxid_detail.fatal is True for e in events[2:])


SXID_HEAD = "[100.000200] nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 63 LTSSM Fault Up"
SXID_DATA = "[100.000100] nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Data {0x10000000, 0x00000000}"
SXID_SEVERITY = (
    "[100.000150] nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Severity 1 Engine instance 63 Sub-engine "
    "instance 00"
)


@pytest.mark.parametrize(
    "lines",
    [
        [SXID_DATA, SXID_SEVERITY, SXID_HEAD],
        [SXID_SEVERITY, SXID_HEAD, SXID_DATA],
        [SXID_HEAD, SXID_DATA, SXID_SEVERITY],
        [SXID_DATA, "unrelated line", SXID_HEAD, SXID_SEVERITY],
    ],
)
def test_sxid_detail_lines_join_their_head_in_any_order(lines: list[str]) -> None:
    events = parse_kmsg("\n".join(lines))
    assert len(events) == 3
    head_line = next(e.line for e in events if e.sxid_detail is not None and e.sxid_detail.continues_line is None)
    for event in events:
        assert event.sxid_detail is not None
        assert (event.sxid_detail.fatal, event.sxid_detail.link) == (True, 63)
        assert event.sxid_detail.continues_line in (None, head_line)
    assert sum(e.sxid_detail.continues_line is None for e in events if e.sxid_detail) == 1


def test_a_detail_line_whose_head_never_comes_is_read_on_its_own() -> None:
    events = parse_kmsg(SXID_DATA)
    assert len(events) == 1 and events[0].sxid_detail is not None and events[0].sxid_detail.fatal is None


def test_a_detail_line_does_not_join_a_head_long_after_it() -> None:
    late_head = SXID_HEAD.replace("[100.000200]", "[160.000000]")
    lines = [SXID_DATA] + [f"[1{i:02d}.5] NVRM: unrelated {i}" for i in range(3)] + [late_head]
    events = parse_kmsg("\n".join(lines))
    data = next(e for e in events if "Data" in e.message)
    assert data.sxid_detail is not None and data.sxid_detail.fatal is None


def test_a_held_detail_line_is_released_when_no_head_follows_in_the_stream() -> None:
    parser = KmsgParser()
    assert parser.feed_line(SXID_DATA) == []  # held: its head may be the next line
    released = []
    for i in range(20):
        released += parser.feed_line(f"[{101 + i}.0] NVRM: unrelated {i}")
    assert len(released) == 1 and released[0].sxid_detail is not None and released[0].sxid_detail.fatal is None
    assert parser.finish() == []


def test_nvlink5_register_words(corpus: Path) -> None:
    event = parse_kmsg((corpus / "xid145_gpud_rlw_rxpipe.log").read_text())[0]
    assert event.process == "ray::WorkerDict" and event.pci == "0018:01:00"
    assert event.nvl5 is not None
    assert event.nvl5.unit == "RLW_RXPIPE" and not event.nvl5.fatal
    assert event.nvl5.link == 13 and event.nvl5.intrinfo == 0x0409A0C2 and event.nvl5.error_status == 0x8
    assert len(event.nvl5.words) == 6
    double_spaced = parse_kmsg((corpus / "xid149_nvsentinel_netir_link_evt.log").read_text())[0]
    assert double_spaced.nvl5 is not None
    assert double_spaced.nvl5.unit == "NETIR_LINK_EVT" and double_spaced.nvl5.fatal and double_spaced.nvl5.link == 9
    no_pid = parse_kmsg((corpus / "xid149_gpud_pr1174_netir.log").read_text())[0]
    assert no_pid.pid is None and no_pid.nvl5 is not None and no_pid.nvl5.link == -1


def test_xid154_recovery_transition(corpus: Path) -> None:
    event = parse_kmsg((corpus / "xid154_gpud_gb200.log").read_text())[0]
    assert event.recovery is not None
    assert (event.recovery.from_code, event.recovery.from_name) == (4, "Drain and Reset")
    assert (event.recovery.to_code, event.recovery.to_name) == (1, "GPU Reset Required")


def test_xid154_cut_inside_its_new_state(corpus: Path) -> None:
    """The new state's code is whole once its name's bracket follows it; a line cut before that has no transition to
    give (the health policy takes the worst state it could be)."""
    line = (corpus / "xid154_gpud_gb200.log").read_text().splitlines()[0]
    cut_in_name = parse_kmsg(line[: line.index("(GPU Reset") + 5])[0].recovery
    assert cut_in_name is not None and (cut_in_name.to_code, cut_in_name.to_name) == (1, "GPU")
    after_code = parse_kmsg(line[: line.index("(GPU Reset") + 1])[0].recovery
    assert after_code is not None and (after_code.to_code, after_code.to_name) == (1, "")
    for cut in (line.index(" to 0x1") + 6, line.index(" to 0x1") + 4, line.index(") to")):
        (event,) = parse_kmsg(line[:cut])
        assert event.xid == 154 and event.recovery is None, line[:cut]


def test_pid_without_name_and_odd_device_number(corpus: Path) -> None:
    event = parse_kmsg((corpus / "xid063_stas00_rowremap.log").read_text())[0]
    assert event.pci == "0000:10:1c" and event.pid == 1896 and event.process is None
    assert event.message.startswith("Row Remapper: New row marked")


# -- the same message in every framing seen in the field ---------------------------------------------------
FRAMINGS = [
    (XID79, None, None, None),
    (f"[6781741.548779] {XID79}", None, 6781741.548779, None),
    (f"[ 3606.832215] {XID79}", None, 3606.832215, None),
    (f"[Mon Jun  5 10:11:12 2023] {XID79}", datetime(2023, 6, 5, 10, 11, 12), None, None),
    (
        f"2023-06-05T10:11:12,123456+00:00 {XID79}",
        datetime(2023, 6, 5, 10, 11, 12, 123456, tzinfo=UTC),
        None,
        None,
    ),
    (
        f"kern  :err   : 2023-06-05T10:11:12,000001+00:00 {XID79}",
        datetime(2023, 6, 5, 10, 11, 12, 1, tzinfo=UTC),
        None,
        None,
    ),
    (
        f"Jun  5 10:11:12 gpu-node-07 kernel: [ 12.5] {XID79}",
        datetime(2023, 6, 5, 10, 11, 12),
        12.5,
        "gpu-node-07",
    ),
    (f"Jun 05 10:11:12 gpu-node-07 kernel: {XID79}", datetime(2023, 6, 5, 10, 11, 12), None, "gpu-node-07"),
    (
        f"Jun 05 10:11:12.250000 gpu-node-07 kernel: {XID79}",
        datetime(2023, 6, 5, 10, 11, 12, 250000),
        None,
        "gpu-node-07",
    ),
    (
        f"2023-06-05T10:11:12+0000 gpu-node-07 kernel: {XID79}",
        datetime(2023, 6, 5, 10, 11, 12, tzinfo=UTC),
        None,
        "gpu-node-07",
    ),
    (
        f"2023-06-05T10:11:12.5+02:00 gpu-node-07 kernel: {XID79}",
        datetime.fromisoformat("2023-06-05T10:11:12.5+02:00"),
        None,
        "gpu-node-07",
    ),
    (f"4,1227,437812449932,-;{XID79}", None, 437812.449932, None),
    (f"<4>[ 3606.832215] {XID79}", None, 3606.832215, None),
    (f"<3>{XID79}", None, None, None),
    (f"[ 3606.832215] gpu-node-07 kernel: {XID79}", None, 3606.832215, "gpu-node-07"),
]


@pytest.mark.parametrize(("line", "wall", "uptime", "host"), FRAMINGS)
def test_framings(line: str, wall: datetime | None, uptime: float | None, host: str | None) -> None:
    event = _one(line, year=2023)
    assert event.xid == 79 and event.pci == "0000:91:00"
    assert event.message == "GPU has fallen off the bus."
    assert event.wall_time == wall
    assert event.uptime_s == (pytest.approx(uptime) if uptime is not None else None)
    assert event.host == host


def test_syslog_without_year_keeps_host_but_no_guessed_time() -> None:
    event = _one(f"Jun  5 10:11:12 gpu-node-07 kernel: {XID79}")
    assert event.host == "gpu-node-07" and event.wall_time is None


def test_host_given_by_caller_fills_unframed_lines() -> None:
    assert _one(XID79, host="n1").host == "n1"


def test_raw_kmsg_record_fields_and_dictionary_lines() -> None:
    frame = split_frame(f"4,1227,437812449932,c;{XID79}")
    assert (frame.priority, frame.sequence) == (4, 1227)
    events = parse_kmsg(f"4,1227,437812449932,c;{XID79}\n SUBSYSTEM=pci\n DEVICE=+pci:0000:91:00.0\n")
    assert len(events) == 1


def test_driver_variants() -> None:
    old = _one("NVRM: Xid (0000:03:00): 13, 0003 00000000 0000a1c0 000002bc 00000000 00000000")
    assert old.xid == 13 and old.pci == "0000:03:00" and old.pid is None
    no_ctx = _one("NVRM: Xid (PCI:0000:03:00): 31, Ch 00000010, engmask 00000101, intr 10000000")
    assert no_ctx.process is None and no_ctx.message.startswith("Ch 00000010")
    unknown_pid = _one("NVRM: Xid (PCI:0000:3b:00): 43, pid=<unknown>, name=<unknown>, Ch 00000008")
    assert unknown_pid.pid is None and unknown_pid.process is None
    mig = _one("NVRM: Xid (PCI:0000:3b:00 GPU-I:01 GPU-CI:02): 31, pid=77, name=python, Ch 00000010")
    assert (mig.gpu_instance, mig.compute_instance, mig.pci) == (1, 2, "0000:3b:00")
    gi_only = _one("NVRM: Xid (PCI:0000:3b:00 GPU-I:05): 43, pid=77, name=python, Ch 00000010")
    assert (gi_only.gpu_instance, gi_only.compute_instance) == (5, None)


def test_caused_by_previous_xid() -> None:
    event = _one(
        "NVRM: Xid (PCI:0000:3b:00): 45, pid=1234, name=python3, Ch 00000010, intr 0x0 caused by previous Xid 48"
    )
    assert event.xid == 45 and event.root_xid == 48
    assert event.message == "Ch 00000010, intr 0x0"


def test_sxid_nonfatal() -> None:
    event = _one(
        "[  99.1] nvidia-nvswitch3: SXid (PCI:0000:08:00.0): 12028, Non-fatal, Link 30 egress non-posted PRIV error"
    )
    assert event.kind == "sxid" and event.sxid == 12028
    assert event.sxid_detail.fatal is False and event.sxid_detail.link == 30


def test_fallen_off_bus_multiline_dmesg() -> None:
    text = (
        "[14387.209961] NVRM: The NVIDIA GPU 0000:5d:00.0\n"
        "               NVRM: (PCI ID: 10de:2330) installed in this system has\n"
        "               NVRM: fallen off the bus and is not responding to commands.\n"
        "[14387.210134] nvidia: probe of 0000:5d:00.0 failed with error -1\n"
    )
    event = _one(text)
    assert event.kind == "fallen_off_bus" and event.pci == "0000:5d:00"
    assert event.pci_device_id == "10de:2330" and event.line == 1 and event.xid is None
    assert event.uptime_s == pytest.approx(14387.209961)
    assert "not responding to commands" in event.message


def test_fallen_off_bus_multiline_syslog_and_single_line_forms() -> None:
    text = (
        "Jun  5 10:11:12 n7 kernel: NVRM: The NVIDIA GPU 0000:b3:00.0\n"
        "Jun  5 10:11:12 n7 kernel: NVRM: (PCI ID: 10de:26b5) installed in this system has\n"
        "Jun  5 10:11:12 n7 kernel: NVRM: fallen off the bus and is not responding to commands.\n"
        "NVRM: The NVIDIA GPU 0000:01:00.0 (PCI ID: 10de:2d04) installed in this system has\n"
        "NVRM: fallen off the bus and is not responding to commands.\n"
        "NVRM: GPU at PCI:0000:3b:00: GPU has fallen off the bus.\n"
        "NVRM: GPU 0000:3c:00.0: GPU has fallen off the bus.\n"
    )
    events = parse_kmsg(text)
    assert [(e.kind, e.pci, e.line) for e in events] == [
        ("fallen_off_bus", "0000:b3:00", 1),
        ("fallen_off_bus", "0000:01:00", 4),
        ("fallen_off_bus", "0000:3b:00", 6),
        ("fallen_off_bus", "0000:3c:00", 7),
    ]
    assert events[0].host == "n7" and events[1].pci_device_id == "10de:2d04"
    assert all(e.root_xid is None for e in events)


def _journal_json(message: object, **extra: str) -> str:
    entry = {
        "MESSAGE": message,
        "_HOSTNAME": "gpu-node-07",
        "SYSLOG_IDENTIFIER": "kernel",
        "__REALTIME_TIMESTAMP": "1740327858000000",
        "_SOURCE_MONOTONIC_TIMESTAMP": "3606832215",
        **extra,
    }
    return json.dumps(entry)


def test_journald_json_entries() -> None:
    event = _one(_journal_json(XID79))
    assert (event.xid, event.host, event.uptime_s) == (79, "gpu-node-07", pytest.approx(3606.832215))
    assert event.wall_time == datetime(2025, 2, 23, 16, 24, 18, tzinfo=UTC)
    # a multi-line printk is one journal entry whose MESSAGE holds the newlines
    fallen = _one(
        _journal_json(
            "NVRM: The NVIDIA GPU 0000:b3:00.0\nNVRM: (PCI ID: 10de:26b5) installed in this system has\n"
            "NVRM: fallen off the bus and is not responding to commands."
        )
    )
    assert (fallen.kind, fallen.pci, fallen.pci_device_id) == ("fallen_off_bus", "0000:b3:00", "10de:26b5")
    assert "[report cut short]" not in fallen.message and fallen.raw.startswith("{")
    # journald keeps messages that are not valid UTF-8 as byte arrays
    as_bytes = _one(_journal_json(list(XID79.encode())))
    assert as_bytes.xid == 79
    assert parse_kmsg('{"not": "a journal entry"}') == []


def test_fallen_off_bus_cut_short_at_end_is_still_reported() -> None:
    event = _one("[1.0] NVRM: The NVIDIA GPU 0000:5d:00.0\n")
    assert event.kind == "fallen_off_bus" and "[report cut short]" in event.message


def test_fallen_off_bus_report_interrupted_by_another() -> None:
    text = (
        "[1.0] NVRM: The NVIDIA GPU 0000:5d:00.0\n"
        "[1.1] NVRM: The NVIDIA GPU 0000:5e:00.0\n"
        "               NVRM: (PCI ID: 10de:2330) installed in this system has\n"
        "               NVRM: fallen off the bus and is not responding to commands.\n"
    )
    events = parse_kmsg(text)
    assert [(e.pci, e.line, "[report cut short]" in e.message) for e in events] == [
        ("0000:5d:00", 1, True),
        ("0000:5e:00", 2, False),
    ]
    assert events[1].pci_device_id == "10de:2330"


def test_reset_required() -> None:
    line = "[ 55.2] NVRM: GPU 0000:3b:00.0: RmInitAdapter failed! rmStatus = NV_ERR_RESET_REQUIRED (0x00000067)"
    event = _one(line)
    assert event.kind == "reset_required" and event.pci == "0000:3b:00"


def test_unknown_code_is_kept_with_its_text() -> None:
    event = _one("NVRM: Xid (PCI:0000:3b:00): 999, pid=1, name=x, something new")
    assert event.xid == 999 and not event.known and event.message == "something new"
    assert event.raw.endswith("something new")


@pytest.mark.parametrize(
    "line",
    [
        "NVRM: Xid PCI:0000:01:00: 43, pid=1814139, name=cuda_assert_64b, Ch 00000018",
        "NVRM: Xid (PCI:0000:01:00): 7",
        "NVRM: Xid (PCI:0000:01:00): ",
        "NVRM: Xid (PCI:zz:01:00): 43, Ch 00000018",
        "NVRM: Xid (PCI:0000:01:00): 43, pid=12,",
        "NVRM: Xid (PCI:0000:01:00): 4\x003, pid=1, name=a, b",
        "NVRM: Xid (PCI:0000:01:00): 43, pid=1, name=a, \ufffd\ufffd",
        "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034,",
    ],
)
def test_malformed_lines_are_rejected_not_parsed(line: str) -> None:
    scan = scan_kmsg(line)
    assert scan.events == []
    assert len(scan.rejected) == 1 and scan.rejected[0].line == 1


def test_unrelated_noise_is_ignored_silently() -> None:
    scan = scan_kmsg("hello\n\n\x00\x01binary\nNVRM: loading NVIDIA UNIX x86_64 Kernel Module 535\n[x] y\n")
    assert scan.events == [] and scan.rejected == []


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_any_text_parses_without_raising(text: str) -> None:
    scan_kmsg(text)
    scan_kmsg("NVRM: Xid (PCI:0000:01:00): " + text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("00000000:10:1C.0", "0000:10:1c"),
        ("0000:3b:00", "0000:3b:00"),
        ("3b:00.0", "0000:3b:00"),
        ("00000002:00:00.0", "0002:00:00"),
        ("nope", None),
        ("123456789:00:00.0", None),
    ],
)
def test_normalise_pci(text: str, expected: str | None) -> None:
    assert normalise_pci(text) == expected


def test_driver_api_mismatch_is_a_report_in_both_its_spellings() -> None:
    """nv.c prints it over four NVRM lines; some captures join them into one."""
    four = (
        "[   39.753267] NVRM: API mismatch: the client has the version 535.104.05, but\n"
        "[   39.753268] NVRM: this kernel module has the version 550.90.07.  Please\n"
        "[   39.753269] NVRM: make sure that this kernel module and all NVIDIA driver\n"
        "[   39.753270] NVRM: components have the same version.\n"
    )
    one = "NVRM: API mismatch: the client has the version 535.1, but this kernel module has the version 550.2.  Please"
    (split,) = scan_kmsg(four).events
    (joined,) = scan_kmsg(one).events
    assert split.kind == joined.kind == "api_mismatch" and split.line == 1
    assert "535.104.05" in split.message
    assert joined.message == "driver API mismatch: user-space driver 535.1, kernel module 550.2"


# the lines as public captures show them: driver 535 (GPU named) and driver 4xx (no GPU, `bearing minor number`)
RM_INIT_NEW = (
    "[ 3964.293978] NVRM: GPU 0000:41:00.0: RmInitAdapter failed! (0x62:0x40:2404)\n"
    "[ 3964.295103] NVRM: GPU 0000:41:00.0: rm_init_adapter failed, device minor number 1\n"
)
RM_INIT_OLD = (
    "Nov 24 22:40:32 hostname kernel: [351621.701637] NVRM: RmInitAdapter failed! (0x30:0xffff:660)\n"
    "Nov 24 22:40:32 hostname kernel: [351621.701735] NVRM: rm_init_adapter failed for device bearing minor number 0\n"
)


@pytest.mark.parametrize(("text", "pci", "status"), [(RM_INIT_NEW, "0000:41:00", "0x62:0x40:2404"),
                                                      (RM_INIT_OLD, None, "0x30:0xffff:660")])  # fmt: skip
def test_a_gpu_the_driver_cannot_initialise_is_one_report_per_pair(text: str, pci: str | None, status: str) -> None:
    (event,) = scan_kmsg(text).events
    assert (event.kind, event.pci, event.detail, event.xid, event.line) == ("init_failed", pci, status, None, 1)
    assert "RmInitAdapter failed!" in event.message


def test_repeated_init_failures_are_each_a_report_and_a_lone_tail_line_is_one() -> None:
    """Each retry of the driver is a report; a `rm_init_adapter failed` line without its head is one too."""
    lone = "NVRM: GPU 0000:42:00.0: rm_init_adapter failed, device minor number 2\n"
    events = scan_kmsg(RM_INIT_NEW * 3 + lone).events
    assert [(e.kind, e.pci, e.line) for e in events] == [
        ("init_failed", "0000:41:00", 1), ("init_failed", "0000:41:00", 3), ("init_failed", "0000:41:00", 5),
        ("init_failed", "0000:42:00", 7),
    ]  # fmt: skip


@pytest.mark.parametrize(
    "attr", ["PCI:...", "PCI:XXXX:XX:XX", "PCI:xxxx:xx:xx.x", "PCI:<redacted>", "PCI:", "...", "PCI:0000:XX:00"]
)
def test_an_xid_whose_pci_address_is_redacted_is_read_with_the_gpu_unknown(attr: str) -> None:
    """NVIDIA/nccl#2241 posted its Xids as `NVRM: Xid (PCI:...): 145, ...`: the code is still the report."""
    event = _one(f"kernel: NVRM: Xid ({attr}): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 11 (...)")
    assert (event.kind, event.xid, event.pci, event.gpu_uuid) == ("xid", 145, None, None)
    assert event.message == "RLW_RXPIPE Nonfatal XC0 i0 Link 11 (...)"


def test_an_xid_with_a_garbled_device_is_still_rejected() -> None:
    scan = scan_kmsg("NVRM: Xid (PCI:0000:zz:00 junk): 79, GPU has fallen off the bus.")
    assert not scan.events and "unreadable device" in scan.rejected[0].reason


def test_a_line_without_a_trigger_is_counted_not_read_unless_a_report_waits_on_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Most lines of a log hold nothing the parser reads: they are not framed or searched further, only counted (the
    next report keeps its line number). While a fallen-off-the-bus report is open, a line without a trigger is read:
    the report takes it (and is cut short after four)."""
    framed: list[str] = []

    def counted(line: str, *, year: int | None = None) -> object:
        framed.append(line)
        return split_frame(line, year=year)

    monkeypatch.setattr(kmsg, "split_frame", counted)
    noise = [f"[ {i}.000000] eth0: renamed from veth{i}" for i in range(50)]
    events = parse_kmsg([*noise, f"[ 60.000000] {XID79}", *noise])
    assert len(framed) == 1 and [(e.kind, e.line) for e in events] == [("xid", 51)]
    framed.clear()
    start = "[ 61.000000] NVRM: The NVIDIA GPU 0000:b3:00.0"
    events = parse_kmsg([start, *noise[:6]])
    assert framed == [start, *noise[:3]]
    assert events[0].kind == "fallen_off_bus" and events[0].message.endswith("[report cut short]")
