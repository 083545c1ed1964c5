"""Hostlists as Slurm writes them, checked against the real `scontrol show hostnames` (it expands a hostlist
without a controller: a two-line slurm.conf is enough)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from gpufleet.integrations.slurm.client import expand_hostlist
from gpufleet.integrations.slurm.hostlist import compress_hostlist
from tests.conftest import require_tool

CASES = [
    (["node01", "node02", "node03", "node07"], "node[01-03,07]"),
    (["node03", "node01", "node02", "node01"], "node[01-03]"),  # any order, repeats dropped
    (["node9", "node10", "node11"], "node[9-11]"),  # unpadded numbers grow a digit inside one range
    (["node08", "node09", "node10"], "node[08-10]"),
    (["node08", "node9"], "node[08,9]"),  # 9 is not 09: a range of width 2 would print node09
    (["node1", "node01"], "node[1,01]"),
    (["node009", "node010", "node011"], "node[009-011]"),
    (["gpu-01", "gpu-02", "cn1", "cn2", "login"], "cn[1-2],gpu-[01-02],login"),  # several prefixes
    (["a1b2", "a1b3", "a2b2"], "a1b[2-3],a2b2"),  # only the trailing number is ranged
    (["node01-ib", "node02-ib"], "node01-ib,node02-ib"),  # Slurm refuses node[01-02]-ib
    (["leaf-su1-r0", "leaf-su1-r1", "leaf-su2-r0"], "leaf-su1-r[0-1],leaf-su2-r0"),
    (["solo"], "solo"),
    (["x7"], "x7"),
]


@pytest.mark.parametrize(("names", "written"), CASES)
def test_compress(names: list[str], written: str) -> None:
    assert compress_hostlist(names) == written
    assert sorted(expand_hostlist(written)) == sorted(set(names))


@pytest.mark.real
def test_scontrol_expands_each_back_to_the_same_names(tmp_path: Path) -> None:
    require_tool("scontrol")
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=hostlist\nSlurmctldHost=localhost\n")
    env = dict(os.environ, SLURM_CONF=str(conf))
    for names, _ in CASES:
        written = compress_hostlist(names)
        out = subprocess.run(
            ["scontrol", "show", "hostnames", written], env=env, capture_output=True, text=True, check=True, timeout=30
        )
        assert sorted(out.stdout.split()) == sorted(set(names)), written


@pytest.mark.parametrize("name", ["bad name", "node[1]", "a,b", "x#1", "k=v", ""])
def test_a_name_the_syntax_cannot_hold_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="cannot be written"):
        compress_hostlist(["ok1", name])
