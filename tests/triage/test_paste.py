"""Pasted text back into what the tool printed."""

from __future__ import annotations

import io
import random
import re
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from gpufleet.triage.paste import MAX_LINE, Paste, Shape, text_lines
from gpufleet.triage.run import triage_lines
from tests.conftest import CAPTURES, CORPUS


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


def _clean(text: str) -> list[str]:
    lines = text.splitlines()
    return list(Paste(shape=Shape.learn(lines)).cleaned(lines))


# lines of real captures (tests/corpus/xid079_gpud_sxid_readme.log, tests/captures/gaudi/hl_smi_q_gaudi2_poc.txt)
XID = "[ 1003.425390] NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus."
SXID = "[ 1003.427511] nvidia-nvswitch3: SXid (PCI:0000:c3:00.0): 20034, Fatal, Link 31 LTSSM Fault Up"


def test_a_markdown_list_and_its_indentation_come_off() -> None:
    assert _clean(f"- {XID}\n  {SXID}\n") == [XID, SXID]
    assert _clean(f"1. {XID}\n   {SXID}\n2. {XID}\n") == [XID, SXID, XID]
    # a line that is not indented as far as the item's text: no list, the text is the tool's
    assert _clean(f"- {XID}\n{SXID}\n") == [f"- {XID}", SXID]


def test_a_list_item_whose_text_starts_with_its_own_indentation_keeps_it() -> None:
    # `nvidia-smi topo -m` starts with a tab (or spaces, once a paste turned them): CommonMark takes one space after
    # the marker, the rest is the text's
    assert _clean("* \tGPU0\tGPU1\n  GPU0\t X \tNV18\n") == ["\tGPU0\tGPU1", "GPU0\t X \tNV18"]
    assert _clean("-       GPU0  GPU1\n  GPU0   X    NV18\n") == ["      GPU0  GPU1", "GPU0   X    NV18"]


def test_a_uniform_indentation_comes_off_and_the_relative_one_stays() -> None:
    q = "    [0] AIP (accel0) 0000:43:00.0\n            Product Name                    : HL-225\n"
    assert _clean(q) == ["[0] AIP (accel0) 0000:43:00.0", "        Product Name                    : HL-225"]


def test_a_fence_on_the_lines_of_content_comes_off() -> None:
    assert _clean(f"```text {XID}\n{SXID}```\n") == [XID, SXID]
    assert _clean(f"```{XID}\n{SXID}\n```\n") == [XID, SXID]


def test_a_line_wrapped_at_the_terminals_width_is_joined() -> None:
    wrapped = [XID[:80], XID[80:], SXID[:80], SXID[80:]]
    assert len(XID) > 80 and len(SXID) > 80
    assert _clean("\n".join(wrapped)) == [XID, SXID]
    paste = Paste(shape=Shape.learn(wrapped))
    assert list(paste.numbered(enumerate(wrapped, 1))) == [(1, XID), (3, SXID)]
    assert "took off hard wraps (2 lines)" in paste.notes()


def test_lines_of_one_width_that_are_not_wrapped_stay_apart() -> None:
    """A report's own aligned lines (nvlink -s's GPU lines, an 80-column table's rows) are not a wrap."""
    gpu = "GPU 10: NVIDIA GeForce RTX 4090 (UUID: GPU-5269b708-678a-b1a8-60f0-c90406537486)"
    link = "         Link 0: 25 GB/s"
    assert len(gpu) == 80 and _clean(f"{gpu}\n{link}\n{gpu}\n{link}\n") == [gpu, link, gpu, link]
    row = "|" + "-" * 78 + "|"
    assert _clean(f"{row}\n{row}\nGPU 0\n") == [row, row, "GPU 0"]


def test_launcher_tags_on_every_line_come_off_exactly() -> None:
    assert _clean(f"[0] {XID}\n[0]     indented\n[1] {SXID}\n") == [XID, "    indented", SXID]
    assert _clean(f"[1,0]<stdout>:{XID}\n[1,0]<stdout>:    x\n[1,1]<stdout>:{SXID}\n") == [XID, "    x", SXID]
    assert _clean(f"[default0]:{XID}\n[default0]:{SXID}\n[default1]:{XID}\n") == [XID, SXID, XID]
    # hl-smi -q's own `[0] AIP` block heads are not a launcher's tags
    q = "[0] AIP (accel0) 0000:43:00.0\n        Product Name : HL-225\n        Serial : AM1\n[1] AIP (accel1) x\n"
    assert _clean(q)[0] == "[0] AIP (accel0) 0000:43:00.0"


def test_kubectl_and_oc_log_prefixes_come_off_each_line() -> None:
    """Each line its own pod's tag (`kubectl logs -l app=x --prefix` interleaves pods), its indentation kept."""
    lines = [f"[pod/a-0/main] {XID}", "[pod/b-1/side-car]     indented", "[pod/a-0/main]", f"[node/gpu-7] {SXID}"]
    paste = Paste(launchers=False)
    assert list(paste.cleaned(lines)) == [XID, "    indented", "", SXID]
    assert "took off kubectl log prefixes (4 lines)" in paste.notes()
    assert Paste().clean("[pod] not a prefix") == "[pod] not a prefix"


# -- what pasting does to a whole text: every real capture keeps its verdict under each -------------------------
def _list(marker: str) -> Callable[[str], str]:
    def paste(text: str) -> str:
        lines = text.lstrip("\r\n").splitlines()
        pad = " " * len(marker)
        return "\n".join([marker + lines[0], *(pad + line if line.strip() else line for line in lines[1:])]) + "\n"

    return paste


def _bulleted(text: str) -> str:
    """Every line made an item of its own, blank ones too (a log pasted into a list line by line)."""
    return "".join("- " + line for line in text.splitlines(keepends=True))


def _indented(text: str) -> str:
    return "".join("    " + line if line.strip() else line for line in text.splitlines(keepends=True))


def _wrapped(width: int) -> Callable[[str], str]:
    """A terminal `width` columns wide: a longer line goes on on the next one."""

    def paste(text: str) -> str:
        out = []
        for line in text.splitlines():
            out.extend([line[i : i + width] for i in range(0, len(line), width)] or [""])
        return "\n".join(out) + "\n"

    return paste


def _fenced_inline(info: str) -> Callable[[str], str]:
    def paste(text: str) -> str:
        return "```" + info + text.rstrip("\n") + "```\n"

    return paste


def _tagged(tag: str) -> Callable[[str], str]:
    return lambda text: "".join(tag + line for line in text.splitlines(keepends=True))


_UPTIME = re.compile(r"^(?P<lead>.*?)\[\s*(?P<sec>\d+)\.\d+\] ", re.M)
_BOOT = datetime(2024, 3, 5, 10, 11, 12)


def _dmesg_t(text: str) -> str:
    """`dmesg -T`: each `[ seconds.usec]` stamp as the wall time it stands for."""

    def stamp(match: re.Match[str]) -> str:
        when = _BOOT + timedelta(seconds=int(match.group("sec")))
        return f"{match.group('lead')}[{when.strftime('%a %b %e %H:%M:%S %Y')}] "

    return _UPTIME.sub(stamp, text)


HAZARDS: dict[str, Callable[[str], str]] = {
    "markdown list -": _list("- "),
    "markdown list *": _list("* "),
    "markdown list 1.": _list("1. "),
    "every line a list item": _bulleted,
    "indented 4": _indented,
    "wrapped at 80": _wrapped(80),
    "wrapped at 120": _wrapped(120),
    "wrapped at 160": _wrapped(160),
    "fence on the first and last line": _fenced_inline(""),
    "```text on the first line": _fenced_inline("text "),
    "[0] tags": _tagged("[0] "),
    "mpirun tags": _tagged("[1,0]<stdout>:"),
    "srun labels": _tagged("0: "),
    # kubectl logs --prefix / oc logs --prefix (kubectl pkg/cmd/logs/logs.go: "[pod/%s/%s] ")
    "kubectl logs --prefix": _tagged("[pod/gpu-burn-7d9f8b6c4-x2x9q/burn] "),
    "oc logs --prefix": _tagged("[pod/habana-ai-device-plugin-ds-jx8pm.1/device-plugin] "),
    "dmesg -T": _dmesg_t,
}
_CAPTURE_SUFFIXES = (".txt", ".log", ".json", ".conf")


# real captures kept beside their parser's tests rather than in tests/captures
PARSER_CAPTURES = (Path(__file__).parents[1] / "parsers" / "clock" / "data",)


def _captures() -> list[Path]:
    found = [
        p
        for root in (CORPUS, CAPTURES, *PARSER_CAPTURES)
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.suffix in _CAPTURE_SUFFIXES and not p.name.endswith(".source.txt")
    ]
    return [p for p in found if p.stat().st_size < 256 * 1024]


def _verdict(text: str) -> tuple[str, str]:
    report = triage_lines(io.StringIO(text), "hazard")
    return report.format, report.verdict


@pytest.mark.parametrize("hazard", sorted(HAZARDS))
def test_a_capture_pasted_with_a_hazard_keeps_its_verdict(hazard: str) -> None:
    """Every real capture (tests/corpus, tests/captures) wrapped in the hazard is told and judged as it is bare."""
    changed = []
    captures = _captures()
    assert len(captures) > 100
    for path in captures:
        text = path.read_text(errors="replace")
        if not text.strip():
            continue
        bare, pasted = _verdict(text), _verdict(HAZARDS[hazard](text))
        if pasted != bare:
            changed.append(f"{path.relative_to(CORPUS.parent)}: {bare} -> {pasted}")
    assert not changed, "\n".join(changed)


def test_the_commands_of_prompt_lines_taken_off_are_noted_for_the_readers() -> None:
    from gpufleet.triage.paste import Cleaned, noted_commands

    raw = ["user@gpu01:~$ sudo mlxlink -d mlx5_0 -p 1\n", "State : Active\n", "[root@h ~]# ibstat mlx5_1\n", "x\n"]
    lines = Cleaned(Paste(), raw)
    assert list(lines) == ["State : Active", "x"]
    assert noted_commands(lines) == ["sudo mlxlink -d mlx5_0 -p 1", "ibstat mlx5_1"]
    assert noted_commands(["State : Active"]) == []  # plain lines carry none
    many = Cleaned(Paste(), [f"$ echo {i}\n" for i in range(100)])
    assert list(many) == [] and noted_commands(many)[-1] == "echo 99" and len(noted_commands(many)) == 16


def test_a_line_no_step_changes_passes_as_the_steps_would_pass_it() -> None:
    """Lines of a streamed log skip the steps when one match says none would change them: what comes out, and what
    the notes count, is what the steps one by one make of the same lines."""
    rng = random.Random(37)
    pieces = ["[ 12.345678] ", "[Sun Feb 23 16:24:18 2025] ", "[pod/a-1/c] ", "[node/n1] ", "> ", "$ ", "# nvidia-smi",
              "```", "~~~", "\x1b[31m", "  <=== look", "0: ", "12: ", "[1,0]<stdout>:", "[0] ", "...", "[...]", "  ",
              "\t", "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.", "٣: x", "² ", "- ", "(...)", "%",
              "Killed process 7 (a)", "x" * 70, "\r", "…", "-- snip --", "eth0: up", "a=b", "->", "1.5"]  # fmt: skip
    lines = ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 4))) for _ in range(3000)]
    lines += ["x" * (MAX_LINE + 5), "[ 1.0] " + "y" * MAX_LINE]
    streamed, one_by_one = Paste(), Paste()
    got = list(streamed.numbered(enumerate(lines, start=1)))
    want = [(n, clean) for n, line in enumerate(lines, start=1) if (clean := one_by_one.clean(line)) is not None]
    assert got == want
    assert streamed.notes() == one_by_one.notes() and streamed.lines == one_by_one.lines == len(lines)
    assert streamed.commands == one_by_one.commands
