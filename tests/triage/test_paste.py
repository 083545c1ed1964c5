"""Pasted text back into what the tool printed."""

from __future__ import annotations

import io

from gpufleet.triage.paste import MAX_LINE, Paste, text_lines


def test_prompts_quoting_elisions_markers_colour_and_launchers_come_off() -> None:
    paste = Paste()
    pasted = [
        "root@gpu01:~# dmesg -T | grep -i xid",
        "> [  12.3] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus. <=== this one",
        "....",
        "[1,3]<stdout>:node1:12:12 [3] NCCL WARN NET/IB : Got completion with error 12",
        "\x1b[31mError\x1b[0m\r",
        "```",
    ]
    assert list(paste.cleaned(pasted)) == [
        "[  12.3] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.",
        "node1:12:12 [3] NCCL WARN NET/IB : Got completion with error 12",
        "Error",
    ]
    assert any("prompts" in n for n in paste.notes()) and any("quoting" in n for n in paste.notes())


def test_a_tools_own_hash_lines_stay() -> None:
    lines = ["# nThread 1 nGpus 8 minBytes 8 maxBytes 8589934592", "# Port counters: Lid 1 port 1", "# HELP DCGM_FI_X"]
    assert list(Paste().cleaned(lines)) == lines
    assert list(Paste().cleaned(["# nvidia-smi -q", "$ ibstat"])) == []


def test_launcher_prefixes_stay_when_the_reader_needs_them() -> None:
    assert list(Paste(launchers=False).cleaned(["  3: node1:1:1 [0] NCCL INFO x"])) == [
        "  3: node1:1:1 [0] NCCL INFO x"
    ]


def test_an_overlong_line_is_cut_not_held() -> None:
    data = b"a" * (3 * MAX_LINE) + b"\nnext\n\xff\xfe bad utf-8\n"
    lines = list(text_lines(io.BytesIO(data)))
    assert len(lines[0]) <= MAX_LINE + 1 and lines[1] == "next\n" and "\ufffd" in lines[2]


def test_tool_arrows_are_not_an_authors_marker() -> None:
    paste = Paste()
    link = '          1    1[  ] ==( 4X 25.78125 Gbps Active/  LinkUp)==>       2    1[  ] "H-0008f10403960559" ( )'
    info = '   Link info:     22    1[  ] ==( 4X 10.0 Gbps Active/  LinkUp)==>  0x0002c90200412345    1    1[  ] "s"'
    assert paste.clean(link) == link and paste.clean(info) == info
    assert paste.clean("value: 3 ==> the bad one") == "value: 3"
    assert paste.clean("Xid 79 line   <=== this one") == "Xid 79 line"
