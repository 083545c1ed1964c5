"""The openb trace loader: good files, and malformed rows named by file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.errors import NotFoundError, ParseError
from gpufleet.sched.replay.openb import load_nodes, load_pods, load_trace

POD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
)


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_loads_nodes_and_pods(tmp_path: Path) -> None:
    nodes = load_nodes(
        write(tmp_path, "n.csv", "sn,cpu_milli,memory_mib,gpu,model\na,64000,262144,2,P100\nb,32000,1,0,\n")
    )
    assert nodes.names == ("a", "b")
    assert nodes.num_gpu.tolist() == [2, 0]
    assert nodes.model == ("P100", "")
    assert nodes.total_gpu_milli == 2000
    pods = load_pods(
        write(
            tmp_path,
            "p.csv",
            POD_HEADER
            + "p0,12000,16384,1,460,V100M16|V100M32,LS,Running,0,1,0\n"
            + "p1,6000,12288,0,300,,BE,Running,0,1,0\n"
            + "p2,8000,1024,8,1000,,LS,Running,0,1,0\n",
        )
    )
    assert pods.gpu_milli.tolist() == [460, 0, 1000]  # a CPU-only pod's share is ignored
    assert pods.gpu_spec == ("V100M16|V100M32", "", "")
    assert pods.qos == ("LS", "BE", "LS")
    assert pods.total_gpu_milli == 460 + 8000


def test_five_column_multigpu_files_load(tmp_path: Path) -> None:
    pods = load_pods(write(tmp_path, "m.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1000,10,2,1000\n"))
    assert pods.num_gpu.tolist() == [2]
    assert pods.gpu_spec == ("",)


@pytest.mark.parametrize(
    ("row", "needle"),
    [
        ("p,abc,1,0,0,,LS,R,0,0,0", "column 'cpu_milli' must be a whole number"),
        ("p,1000,1,1,1500,,LS,R,0,0,0", "gpu_milli must be 1..1000"),
        ("p,1000,1,2,500,,LS,R,0,0,0", "must request whole GPUs"),
        ("p,1000,-5,0,0,,LS,R,0,0,0", "must not be negative"),
        ("p,1000,1,0", "expected 11 fields, got 4"),
    ],
)
def test_malformed_pod_row_names_file_and_line(tmp_path: Path, row: str, needle: str) -> None:
    path = write(tmp_path, "bad.csv", POD_HEADER + "ok,1000,1,0,0,,LS,R,0,0,0\n" + row + "\n")
    with pytest.raises(ParseError) as err:
        load_pods(path)
    assert f"{path}:3:" in str(err.value)
    assert needle in str(err.value)


def test_missing_columns_and_missing_model(tmp_path: Path) -> None:
    with pytest.raises(ParseError, match=r"n\.csv:1: header lacks column\(s\) model"):
        load_nodes(write(tmp_path, "n.csv", "sn,cpu_milli,memory_mib,gpu\na,1,1,1\n"))
    with pytest.raises(ParseError, match=r"m\.csv:2: a node with 2 GPUs needs a model"):
        load_nodes(write(tmp_path, "m.csv", "sn,cpu_milli,memory_mib,gpu,model\na,1,1,2,\n"))


def test_missing_files(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError):
        load_trace(tmp_path / "nope")
    with pytest.raises(NotFoundError, match=r"openb_node_list_gpu_node\.csv"):
        load_trace(tmp_path)


def test_real_trace_shape(openb: Path) -> None:
    nodes, pods = load_trace(openb)
    assert len(nodes) == 1213
    assert int(nodes.num_gpu.sum()) == 6212
    assert len(pods) == 8152
    assert pods.total_gpu_milli == 6086800
