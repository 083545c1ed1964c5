"""`gpufleet fabric discover` as a person runs it: saved outputs or stdin, a table or JSON, an exit status that says
whether anything is critical, and one clear line for every input it cannot use."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.clirun import Ran, gpufleet
from tests.conftest import CAPTURES

CAPTURES = CAPTURES / "ibsim"
NETDISCOVER = CAPTURES / "ibnetdiscover.txt"
LINKINFO = CAPTURES / "iblinkinfo.txt"
EXAMPLE = Path(__file__).parents[2] / "src" / "gpufleet" / "examples" / "clusters" / "ibsim-fattree.yaml"


def _clear_error(res: Ran, *words: str) -> None:
    """Exit 2, one `error:` line and its `fix:`, naming what went wrong; never a traceback."""
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert lines[0].startswith("error: ") and len(lines) <= 2 and lines[-1].strip().startswith("fix: "), lines
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])


def test_json_shape_of_the_capture() -> None:
    res = gpufleet("fabric", "discover", "--ibnetdiscover", str(NETDISCOVER), "-o", "json")
    assert res.returncode == 0, res.stderr  # warnings only
    body = json.loads(res.stdout)
    assert set(body) == {"switches", "hcas", "links", "findings"}
    assert len(body["switches"]) == 6 and len(body["hcas"]) == 8 and len(body["links"]) == 19
    leaf1 = next(s for s in body["switches"] if s["name"] == "leaf1")
    assert leaf1 == {"name": "leaf1", "guid": "0x0000000000200002", "lid": 4, "ports": 36, "tier": "leaf"}
    node05 = next(h for h in body["hcas"] if h["name"] == "node05/mlx5_0")
    assert node05 == {"name": "node05/mlx5_0", "host": "node05", "guid": "0x0000000000100008", "ports": 2}
    link = next(lk for lk in body["links"] if lk["a"] == "node01/mlx5_0/1")
    assert link == {"a": "node01/mlx5_0/1", "b": "leaf1/1", "width": "4x", "speed": "HDR", "rate_gbps": 200.0,
                    "up": True}  # fmt: skip
    assert [(f["kind"], f["severity"], f["port"]) for f in body["findings"]] == [
        ("asymmetric-uplinks", "warning", "leaf1/0"),
        ("asymmetric-uplinks", "warning", "spine1/0"),
    ]


def test_against_the_manifest_a_missing_cable_is_critical() -> None:
    res = gpufleet(
        "fabric", "discover", "--ibnetdiscover", str(NETDISCOVER), "--iblinkinfo", str(LINKINFO),
        "--expect", str(EXAMPLE), "-o", "json",
    )  # fmt: skip
    assert res.returncode == 1, res.stderr
    [finding] = json.loads(res.stdout)["findings"]
    assert finding["kind"] == "missing-link" and finding["ends"] == ["leaf1/35", "spine1/1"]
    assert set(finding) == {"kind", "severity", "ends", "message", "fix"}


def test_an_ibnetdiscover_output_as_the_expected_fabric_from_stdin() -> None:
    text = NETDISCOVER.read_text()
    res = gpufleet("fabric", "discover", "--ibnetdiscover", "-", "--expect", str(NETDISCOVER), input=text)
    assert res.returncode == 0, res.stderr
    assert "stdin" in res.stdout and "6 switches, 8 HCAs, 19 links; findings: 0 critical, 0 warning, 0 info" in (
        res.stdout
    )


def test_the_table_names_both_ends_worst_first() -> None:
    res = gpufleet(
        "fabric", "discover", "--ibnetdiscover", str(NETDISCOVER), "--iblinkinfo", str(LINKINFO),
        "--expect", str(EXAMPLE),
    )  # fmt: skip
    assert res.returncode == 1
    out = res.stdout
    assert "6 switches, 8 HCAs, 19 links; findings: 1 critical, 0 warning, 0 info" in out
    assert "SWITCH" in out and "leaf1" in out and "3/36" in out  # leaf1 has 3 of its 36 ports cabled
    row = next(line for line in out.splitlines() if line.startswith("critical"))
    assert "missing-link" in row and "leaf1/35 <-> spine1/1" in row and "Down/Polling" in out
    wide = gpufleet("fabric", "discover", "--ibnetdiscover", str(NETDISCOVER), "-o", "wide")
    assert "END A" in wide.stdout and "node05/mlx5_0/2" in wide.stdout and "GUID" in wide.stdout


def test_yaml_output() -> None:
    res = gpufleet("fabric", "discover", "--ibnetdiscover", str(NETDISCOVER), "-o", "yaml")
    assert res.returncode == 0 and res.stdout.startswith("switches:")


def test_which_fabric_to_read_is_a_clear_choice() -> None:
    _clear_error(gpufleet("fabric", "discover"), "no fabric to discover")
    _clear_error(gpufleet("fabric", "discover", "--live", "--ibnetdiscover", str(NETDISCOVER)), "both given")
    _clear_error(gpufleet("fabric", "discover", "--ibnetdiscover", str(NETDISCOVER), "--ca", "mlx5_0"), "--live")
    _clear_error(gpufleet("fabric", "discover", "--live", "--iblinkinfo", str(LINKINFO)), "--iblinkinfo")
    _clear_error(gpufleet("fabric", "discover", "--ibnetdiscover", "-", "--iblinkinfo", "-", input=""), "stdin")


def test_bad_inputs_are_one_line_errors(tmp_path: Path) -> None:
    _clear_error(gpufleet("fabric", "discover", "--ibnetdiscover", str(tmp_path / "nope.txt")), "no such file")
    _clear_error(gpufleet("fabric", "discover", "--ibnetdiscover", str(tmp_path)), "is a directory")
    foreign = tmp_path / "notes.txt"
    foreign.write_text("hello\nthis is not a fabric\n")
    _clear_error(gpufleet("fabric", "discover", "--ibnetdiscover", str(foreign)), "not an ibnetdiscover line")
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    _clear_error(gpufleet("fabric", "discover", "--ibnetdiscover", str(empty)), "no Switch or Ca entries")
    cut = tmp_path / "cut.txt"
    cut.write_text(NETDISCOVER.read_text()[:1500])  # cut in the middle of a record
    _clear_error(gpufleet("fabric", "discover", "--ibnetdiscover", str(cut)), "stops early")
    mid_line = tmp_path / "mid.txt"
    mid_line.write_text(NETDISCOVER.read_text()[:1000].rstrip() + '\n[3]\t"S-00000')
    _clear_error(gpufleet("fabric", "discover", "--ibnetdiscover", str(mid_line)), "not an ibnetdiscover line")
    _clear_error(
        gpufleet("fabric", "discover", "--ibnetdiscover", str(NETDISCOVER), "--iblinkinfo", str(foreign)),
        "no iblinkinfo port lines",
    )


def test_a_bad_expected_fabric_is_a_clear_error(tmp_path: Path) -> None:
    base = ("fabric", "discover", "--ibnetdiscover", str(NETDISCOVER), "--expect")
    _clear_error(gpufleet(*base, str(tmp_path / "cluster.yaml")), "no such file")
    bad = tmp_path / "cluster.yaml"
    bad.write_text(EXAMPLE.read_text().replace("{a: leaf1/35, b: spine1/1}", "{a: leaf1/99, b: spine1/1}"))
    _clear_error(gpufleet(*base, str(bad)), "leaf1 has ports 1-36")


def test_live_without_the_tools_says_what_to_install(tmp_path: Path) -> None:
    res = gpufleet("fabric", "discover", "--live", "--tool-timeout", "5", env={"PATH": str(tmp_path)})
    _clear_error(res, "ibnetdiscover is not installed")
    assert "infiniband-diags" in res.stderr


@pytest.mark.parametrize(
    "content",
    [b"\xff\xfe\x80 Switch 36 \x00\n", b"\x00" * 4096, b"x" * (2 * 1024 * 1024), b'Switch\t36 "S-1"\n' * 3],
    ids=["invalid-utf8", "nul-bytes", "endless-line", "headers-only"],
)
def test_hazards_get_a_clear_error_or_an_answer(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "hazard.txt"
    path.write_bytes(content)
    res = gpufleet("fabric", "discover", "--ibnetdiscover", str(path))
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr
    assert res.returncode in (0, 2), res.stderr


# --- export ------------------------------------------------------------------------------------------------------


def _switch_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("SwitchName=")]


def test_export_slurm_topology_from_the_manifest_to_stdout_and_a_file(tmp_path: Path) -> None:
    res = gpufleet("fabric", "export", "--format", "slurm-topology", "--cluster", str(EXAMPLE))
    assert res.returncode == 0, res.stderr
    assert _switch_lines(res.stdout)[:3] == [
        "SwitchName=leaf1 Nodes=node[01-02]",
        "SwitchName=leaf2 Nodes=node[03-04]",
        "SwitchName=leaf3 Nodes=node[05-08]",
    ]
    out = tmp_path / "topology.conf"
    res = gpufleet("fabric", "export", "--format", "slurm-topology", "--cluster", str(EXAMPLE), "--out", str(out))
    assert res.returncode == 0 and f"wrote {out}" in res.stdout
    assert _switch_lines(out.read_text()) == _switch_lines(
        gpufleet("fabric", "export", "--format", "slurm-topology", "--cluster", str(EXAMPLE)).stdout
    )


def test_export_from_a_discovery_on_stdin() -> None:
    res = gpufleet(
        "fabric", "export", "--format", "slurm-topology", "--ibnetdiscover", "-", input=NETDISCOVER.read_text()
    )
    assert res.returncode == 0, res.stderr
    # the capture's leaf1 has lost its cable to spine1
    assert "SwitchName=spine1 Switches=leaf[2-3]" in _switch_lines(res.stdout)


def test_export_refuses_a_discovery_that_differs_from_the_manifest() -> None:
    res = gpufleet(
        "fabric", "export", "--format", "slurm-topology", "--ibnetdiscover", str(NETDISCOVER), "--cluster", str(EXAMPLE)
    )
    _clear_error(res, "differs from", "critical", "leaf1/35")
    assert "gpufleet fabric discover" in res.stderr


def test_export_bad_inputs_are_one_line_errors(tmp_path: Path) -> None:
    _clear_error(gpufleet("fabric", "export", "--format", "slurm-topology"), "no fabric to export")
    _clear_error(
        gpufleet("fabric", "export", "--format", "slurm-topology", "--cluster", str(tmp_path / "nope.yaml")),
        "no such file",
    )
    res = gpufleet("fabric", "export", "--format", "flux", "--cluster", str(EXAMPLE))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    res = gpufleet(
        "fabric", "export", "--format", "slurm-topology", "--cluster", str(EXAMPLE), "--out", str(tmp_path / "x" / "y")
    )
    _clear_error(res, "cannot write")


def test_export_from_a_discovery_that_matches_the_manifest(tmp_path: Path) -> None:
    from gpufleet.fabric.intended import load_expected
    from gpufleet.fabric.render import to_ibnetdiscover

    found = tmp_path / "ibnetdiscover.txt"
    found.write_text(to_ibnetdiscover(load_expected(EXAMPLE)))
    both = gpufleet(
        "fabric", "export", "--format", "slurm-topology", "--ibnetdiscover", str(found), "--cluster", str(EXAMPLE)
    )
    assert both.returncode == 0, both.stderr
    alone = gpufleet("fabric", "export", "--format", "slurm-topology", "--cluster", str(EXAMPLE))
    assert _switch_lines(both.stdout) == _switch_lines(alone.stdout)
    assert f"checked against {EXAMPLE}" in both.stdout.splitlines()[1]


def test_export_from_a_running_control_plane_is_the_export_of_what_it_was_pushed(tmp_path: Path) -> None:
    """A control plane fed the ibsim capture as its fabric watcher's polls writes the same topology.conf from
    GET /api/v1/fabric/topology as the export of the capture itself."""
    import time

    from gpufleet.control.fabric import FabricService
    from gpufleet.control.service import ControlPlane
    from gpufleet.fabric.discover import from_ibnetdiscover
    from gpufleet.fabric.report import report_from_graph
    from gpufleet.health.thresholds import load_thresholds
    from gpufleet.model.observe import SCHEMA_VERSION, Batch
    from gpufleet.parsers.infiniband.diags import parse_ibnetdiscover
    from gpufleet.remediate.backends.observe import ObserveOnlyBackend
    from gpufleet.state import Database
    from tests import apiclient

    plane = ControlPlane(
        Database(tmp_path / "state.db"), ObserveOnlyBackend(lambda: []), fabric=FabricService(load_thresholds())
    )
    with apiclient.serving(apiclient.app(plane)) as url:
        env = {"GPUFLEET_TOKEN": apiclient.TOKEN, "GPUFLEET_HOME": str(tmp_path)}
        args = ("fabric", "export", "--format", "slurm-topology", "--server", url)
        _clear_error(gpufleet(*args, env=env), "no fabric topology", "no fabric poll")  # nothing pushed yet
        graph = from_ibnetdiscover(parse_ibnetdiscover(NETDISCOVER.read_text()))
        report = report_from_graph(graph, subnet="mlx5_0/1", time=time.time())
        plane.ingest(Batch(v=SCHEMA_VERSION, agent="watch", incarnation="i", node="sm", sent=time.time(),
                           fabric=[report]))  # fmt: skip
        served = gpufleet(*args, env=env)
        assert served.returncode == 0, served.stderr
        local = gpufleet("fabric", "export", "--format", "slurm-topology", "--ibnetdiscover", str(NETDISCOVER))
        assert _switch_lines(served.stdout) == _switch_lines(local.stdout)
        assert "SwitchName=spine1 Switches=leaf[2-3]" in _switch_lines(served.stdout)
        both = gpufleet(*args, "--cluster", str(EXAMPLE), env=env)
        _clear_error(both, "--server and a local fabric")
    plane.close()


def test_export_from_a_control_plane_that_is_not_there_is_a_clear_error(tmp_path: Path) -> None:
    from tests import apiclient

    url = f"http://127.0.0.1:{apiclient.free_port()}"
    res = gpufleet(
        "fabric", "export", "--format", "slurm-topology", "--server", url, env={"GPUFLEET_HOME": str(tmp_path)}
    )
    assert res.returncode != 0 and "no control plane answers" in res.stderr and "Traceback" not in res.stderr


GB200 = EXAMPLE.parent / "gb200-nvl72.yaml"


def test_export_slurm_block_writes_a_block_per_nvlink_domain() -> None:
    res = gpufleet("fabric", "export", "--format", "slurm-block", "--cluster", str(GB200))
    assert res.returncode == 0, res.stderr
    lines = [line for line in res.stdout.splitlines() if not line.startswith("#")]
    assert lines == [
        "BlockName=gb200-nvl00 Nodes=gb200-[000-017]",
        "BlockName=gb200-nvl01 Nodes=gb200-[018-035]",
        "BlockName=gb200-nvl02 Nodes=gb200-[036-053]",
        "BlockName=gb200-nvl03 Nodes=gb200-[054-071]",
        "BlockSizes=18,36,72",
    ]
    old = gpufleet("fabric", "export", "--format", "slurm-block", "--cluster", str(GB200), "--slurm-version", "23.11")
    assert old.returncode == 0 and old.stdout.splitlines()[-1] == "BlockLevels=0-2"


def test_export_slurm_block_bad_inputs_are_one_line_errors() -> None:
    _clear_error(gpufleet("fabric", "export", "--format", "slurm-block", "--cluster", str(EXAMPLE)), "NVLink domain")
    for version, words in (("24", ("not a Slurm release",)), ("22.05", ("no topology/block", "23.11"))):
        block = ("fabric", "export", "--format", "slurm-block", "--cluster", str(GB200))
        res = gpufleet(*block, "--slurm-version", version)
        _clear_error(res, *words)
