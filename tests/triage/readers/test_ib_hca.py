"""ibv_devinfo and mlxlink through triage: told by content, each port judged by the port rules, mlxlink's errors
after FEC against the symbol-error budget, and an HCA that vanished never called healthy."""

from __future__ import annotations

import io
import random

import pytest

from gpufleet.triage.formats import read
from gpufleet.triage.report import TriageReport
from gpufleet.triage.run import triage_lines
from tests.conftest import CAPTURES

IB = CAPTURES / "infiniband"
EXPECTED = {
    "ibv_devinfo_mlx4_port2_down.txt": ("ibv_devinfo", "faulty", {"mlx4_1 port 2", "mlx4_0 port 2"}),
    "ibv_devinfo_vv_cx6_port_disabled.txt": ("ibv_devinfo", "faulty", {"mlx5_1 port 1"}),
    "mlxlink_cx6_ib_hdr_2x.txt": ("mlxlink", "healthy", set()),
    "mlxlink_cx6_counters_grep.txt": ("mlxlink", "healthy", set()),
}
MLXLINK = (IB / "mlxlink_cx6_ib_hdr_2x.txt").read_text()


def _triage(text: str) -> TriageReport:
    return triage_lines(io.StringIO(text), "test")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_captures(name: str) -> None:
    fmt, verdict, entities = EXPECTED[name]
    report = _triage((IB / name).read_text())
    assert (report.format, report.verdict) == (fmt, verdict), report.notes
    assert entities <= {f.entity.split(" (")[0] for f in report.findings}


def test_a_disabled_port_is_named_and_the_active_one_is_not() -> None:
    report = _triage((IB / "ibv_devinfo_vv_cx6_port_disabled.txt").read_text())
    assert [(f.code, f.entity) for f in report.findings] == [
        ("Down/Disabled", "mlx5_1 port 1 (GUID 0x88e9a4ffff25a463)")
    ]


@pytest.mark.parametrize(
    ("text", "entity"),
    [
        ("IB device 'mlx5_3' wasn't found\n", "mlx5_3"),
        ("No IB devices found\n", "host"),
        ("0 HCAs found:\n", "host"),
    ],
)
def test_a_missing_hca_is_faulty_and_named(text: str, entity: str) -> None:
    report = read("ibv_devinfo", iter(text.splitlines()), "test")
    assert report.verdict == "faulty" and report.findings[0].entity == entity
    assert report.findings[0].code == "HCA missing"


def test_ibv_devinfo_speeds_below_the_siblings_are_said() -> None:
    text = (IB / "ibv_devinfo_vv_cx6_port_disabled.txt").read_text()
    text = text.replace("PORT_DOWN (1)", "PORT_ACTIVE (4)").replace("DISABLED (3)", "LINK_UP (5)")
    text = text.replace("invalid speed (0)", "25.0 Gbps (32)")
    report = _triage(text)
    assert report.verdict == "healthy"  # a slower port is a note: hosts mix rates by design
    assert any(f.check == "ib-link-speed" and f.entity.startswith("mlx5_1") for f in report.findings)


def test_mlxlink_link_down_with_the_firmwares_advice() -> None:
    text = MLXLINK.replace(": Active", ": Polling").replace(": LinkUp", ": N/A")
    text = text.replace("Status Opcode                   : 0", "Status Opcode                   : 1024")
    text = text.replace("No issue was observed", "Cable is unplugged")
    report = _triage("mlxlink -d mlx5_2 -p 1\n" + text)  # the command, as a script echoes it
    assert report.verdict == "faulty"
    assert {f.code for f in report.findings} == {"Down/Polling", "Status Opcode 1024"}
    assert all(f.entity == "mlx5_2 port 1" for f in report.findings)
    assert any("Cable is unplugged" in f.message for f in report.findings)


@pytest.mark.parametrize(
    ("command", "entity"),
    [
        ("user@gpu-node-07:~$ sudo mlxlink -d mlx5_2 -p 1", "mlx5_2 port 1"),
        ("[root@gpu-node-07 ~]# mlxlink -d /dev/mst/mt4123_pciconf7", "/dev/mst/mt4123_pciconf7"),
        ("# mlxlink -d mlx5_0 --show_module", "mlx5_0"),
    ],
)
def test_mlxlink_names_the_device_of_a_command_pasted_behind_a_prompt(command: str, entity: str) -> None:
    # the prompt line is taken off by the paste cleaner, which keeps its command for the readers
    text = MLXLINK.replace(": Active", ": Polling").replace(": LinkUp", ": N/A")
    report = _triage(command + "\n" + text)
    assert report.verdict == "faulty"
    assert {f.entity for f in report.findings} == {entity}
    assert any("as the pasted command line names it" in note for note in report.notes)
    bare = _triage(text)  # no command anywhere: said as such, not guessed
    assert {f.entity for f in bare.findings} == {"the port mlxlink was run on"}


COUNTERS = """
Physical Counters and BER Info
------------------------------
Time Since Last Clear [Min]     : {minutes}
Effective Physical Errors       : {errors}
Effective Physical BER          : 3E-12
Link Down Counter               : 0
"""


@pytest.mark.parametrize(
    ("minutes", "errors", "verdict"),
    [("60.0", "0", "healthy"), ("60.0", "2", "degraded"), ("60.0", "40", "faulty"), ("600.0", "4", "degraded")],
)
def test_mlxlink_errors_after_fec_against_the_budget(minutes: str, errors: str, verdict: str) -> None:
    text = MLXLINK.replace(": 2x", ": 4x").replace(": IB-HDR", ": IB-EDR")  # 100 Gb/s
    text = text.replace("(HDR,EDR,FDR,QDR,SDR)", "(EDR,FDR,QDR,SDR)")
    report = _triage(text + COUNTERS.format(minutes=minutes, errors=errors))
    assert report.verdict == verdict, [f.message for f in report.findings]


def test_mlxlink_speed_below_what_port_and_cable_support() -> None:
    report = _triage(MLXLINK.replace(": IB-HDR", ": IB-EDR").replace(": 2x", ": 4x"))
    assert report.verdict == "degraded" and any(f.code == "could be 53.125 Gbps" for f in report.findings)


def test_hostile_input_is_read_without_an_exception() -> None:
    for fmt in ("ibv_devinfo", "mlxlink"):
        for text in ("", "\x00" * 100, "hca_id:\n" * 50, "State : " * 400, "{" * 200, "port:\t99999999999999999"):
            assert read(fmt, iter(text.splitlines()), "x").verdict in ("healthy", "unknown", "faulty", "degraded")


@pytest.mark.parametrize("seed", range(4))
def test_seeded_fuzz_never_escapes(seed: int) -> None:
    """Cuts, character swaps and shuffles of every capture: each reader answers, never a traceback."""
    rng = random.Random(seed)
    captures = sorted(p for p in IB.glob("*.txt") if not p.name.endswith(".source.txt"))
    for _ in range(150):
        lines = rng.choice(captures).read_text().splitlines()
        op = rng.randrange(4)
        if op == 0:
            lines = lines[: rng.randrange(len(lines) + 1)]
        elif op == 1:
            old, new = rng.choice(":\t -0"), rng.choice(["", "::", "\x00", "9"])
            lines = [line.replace(old, new) for line in lines]
        elif op == 2:
            rng.shuffle(lines)
        else:
            lines = ["".join(chr(rng.randrange(32, 127)) for _ in range(rng.randrange(80))) for _ in range(20)]
        for fmt in ("ibv_devinfo", "mlxlink", "ibdiagnet", "ibstat", "ibstatus"):
            read(fmt, iter(lines), "fuzz")
