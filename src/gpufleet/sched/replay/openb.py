"""Loader for the Alibaba openb GPU-sharing trace (cluster-trace-gpu-v2023).

Node lists have the columns ``sn,cpu_milli,memory_mib,gpu,model``; pod lists have
``name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,...`` (the multi-GPU variants stop after
``gpu_milli``). ``gpu_milli`` is the share of each requested GPU in 1/1000 GPU; ``gpu_spec`` lists the GPU
models a pod accepts, joined by ``|``.

Beyond the trace: a node's ``model`` may be any catalog model (``h100-sxm``, ``mi300x``, ``gaudi3``; the trace's
own codes are NVIDIA parts), and an optional pod column ``gpu_resource`` names the vendor resource a pod asks for
(``nvidia.com/gpu``, ``amd.com/gpu``, ``habana.ai/gaudi``; empty: any vendor), so a trace can run on a cluster of
several vendors with each pod kept to its vendor's nodes. An optional pod column ``gang`` names the gang a pod belongs
to (empty: a lone pod): a gang's pods arrive together and are placed all or none, under as few leaf switches as the
replay cluster's fabric allows; its pods take whole GPUs.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import numpy.typing as npt

from gpufleet.catalog.gpus import get_gpu_model
from gpufleet.catalog.vendors import get_vendor, gpu_resources
from gpufleet.errors import NotFoundError, ParseError

MILLI = 1000
NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
GPU_NODE_FILE = "openb_node_list_gpu_node.csv"
ALL_NODE_FILE = "openb_node_list_all_node.csv"

IntArray = npt.NDArray[np.int64]
# The trace's model codes; G1-G3 are undisclosed internal models.
OPENB_MODELS = {
    "P100": "p100",
    "T4": "t4",
    "V100M16": "v100-16gb",
    "V100M32": "v100",
    "A10": "a10",
    "G1": "openb-g1",
    "G2": "openb-g2",
    "G3": "openb-g3",
}


@cache
def model_resource(model: str) -> str:
    """The whole-device resource of a node list's model: a trace code or a catalog model's vendor; a code the
    catalog does not know is the trace's, and the trace's GPUs are NVIDIA's."""
    try:
        spec = get_gpu_model(OPENB_MODELS.get(model, model))
    except NotFoundError:
        return get_vendor("nvidia").resource
    return spec.resource


@dataclass(frozen=True)
class NodeList:
    """Nodes of a trace, column-wise."""

    names: tuple[str, ...]
    cpu_milli: IntArray
    memory_mib: IntArray
    num_gpu: IntArray
    model: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.names)

    @property
    def total_gpu_milli(self) -> int:
        return int(self.num_gpu.sum()) * MILLI


@dataclass(frozen=True)
class PodList:
    """Pods of a trace, column-wise. ``gpu_milli`` is 0 for pods without GPUs."""

    names: tuple[str, ...]
    cpu_milli: IntArray
    memory_mib: IntArray
    num_gpu: IntArray
    gpu_milli: IntArray
    gpu_spec: tuple[str, ...]
    qos: tuple[str, ...]
    gpu_resource: tuple[str, ...] = ()  # per pod, "" for any vendor; empty tuple: no pod names one
    gang: tuple[str, ...] = ()  # per pod, its gang ("" for a lone pod); empty tuple: no pod is in one

    def __len__(self) -> int:
        return len(self.names)

    @property
    def has_gangs(self) -> bool:
        return any(self.gang)

    def resource(self, i: int) -> str:
        return self.gpu_resource[i] if self.gpu_resource else ""

    @property
    def total_gpu_milli(self) -> int:
        return int((self.num_gpu * self.gpu_milli).sum())

    def take(self, index: npt.ArrayLike) -> PodList:
        """The pods at ``index`` (in that order; repeats allowed)."""
        idx = np.asarray(index, dtype=np.int64)
        return PodList(
            names=tuple(self.names[i] for i in idx),
            cpu_milli=self.cpu_milli[idx],
            memory_mib=self.memory_mib[idx],
            num_gpu=self.num_gpu[idx],
            gpu_milli=self.gpu_milli[idx],
            gpu_spec=tuple(self.gpu_spec[i] for i in idx),
            qos=tuple(self.qos[i] for i in idx),
            gpu_resource=tuple(self.gpu_resource[i] for i in idx) if self.gpu_resource else (),
            gang=tuple(self.gang[i] for i in idx) if self.gang else (),
        )


def _int(path: Path, line: int, column: str, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ParseError(
            f"{path}:{line}: column {column!r} must be a whole number, got {text!r}",
            fix="correct the row or regenerate the CSV from the trace",
        ) from None
    if value < 0:
        raise ParseError(
            f"{path}:{line}: column {column!r} must not be negative, got {value}",
            fix="correct the row or regenerate the CSV from the trace",
        )
    return value


def _rows(path: Path, required: tuple[str, ...]) -> tuple[list[str], list[tuple[int, list[str]]]]:
    if not path.is_file():
        raise NotFoundError(f"trace file {path} not found", fix="pass --trace-dir pointing at the openb CSV folder")
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None:
            raise ParseError(f"{path}:1: empty file, expected a header {','.join(required)}")
        header = [h.strip() for h in header]
        missing = [c for c in required if c not in header]
        if missing:
            raise ParseError(
                f"{path}:1: header lacks column(s) {', '.join(missing)} (got {','.join(header)})",
                fix=f"the header must start with {','.join(required)}",
            )
        rows: list[tuple[int, list[str]]] = []
        for row in reader:
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) != len(header):
                raise ParseError(
                    f"{path}:{reader.line_num}: expected {len(header)} fields, got {len(row)}",
                    fix="each row needs one value per header column",
                )
            rows.append((reader.line_num, row))
    return header, rows


def load_nodes(path: Path) -> NodeList:
    """Read a node list (``openb_node_list_*.csv``)."""
    header, rows = _rows(path, NODE_COLUMNS)
    col = {name: header.index(name) for name in NODE_COLUMNS}
    names: list[str] = []
    cpu, mem, gpu = [], [], []
    models: list[str] = []
    for line, row in rows:
        n_gpu = _int(path, line, "gpu", row[col["gpu"]])
        model = row[col["model"]].strip()
        if n_gpu > 0 and not model:
            raise ParseError(f"{path}:{line}: a node with {n_gpu} GPUs needs a model", fix="fill the model column")
        names.append(row[col["sn"]].strip())
        cpu.append(_int(path, line, "cpu_milli", row[col["cpu_milli"]]))
        mem.append(_int(path, line, "memory_mib", row[col["memory_mib"]]))
        gpu.append(n_gpu)
        models.append(model)
    return NodeList(
        names=tuple(names),
        cpu_milli=np.array(cpu, dtype=np.int64),
        memory_mib=np.array(mem, dtype=np.int64),
        num_gpu=np.array(gpu, dtype=np.int64),
        model=tuple(models),
    )


def load_pods(path: Path) -> PodList:
    """Read a pod list (``openb_pod_list_*.csv``); ``gpu_spec``, ``qos``, ``gpu_resource`` and ``gang`` are
    optional."""
    header, rows = _rows(path, POD_COLUMNS)
    col = {name: header.index(name) for name in header}
    names: list[str] = []
    cpu, mem, ngpu, milli = [], [], [], []
    specs: list[str] = []
    qos: list[str] = []
    resources: list[str] = []
    gangs: list[str] = []
    for line, row in rows:
        n = _int(path, line, "num_gpu", row[col["num_gpu"]])
        m = _int(path, line, "gpu_milli", row[col["gpu_milli"]])
        if n == 0:
            m = 0  # a CPU-only pod's share column carries no request
        elif not 0 < m <= MILLI:
            raise ParseError(
                f"{path}:{line}: gpu_milli must be 1..{MILLI} for a pod with num_gpu={n}, got {m}",
                fix="gpu_milli is the share of each GPU in 1/1000 GPU",
            )
        elif n > 1 and m != MILLI:
            raise ParseError(
                f"{path}:{line}: a pod with num_gpu={n} must request whole GPUs (gpu_milli=1000), got {m}",
                fix="only single-GPU pods can share a GPU",
            )
        names.append(row[col["name"]].strip())
        cpu.append(_int(path, line, "cpu_milli", row[col["cpu_milli"]]))
        mem.append(_int(path, line, "memory_mib", row[col["memory_mib"]]))
        ngpu.append(n)
        milli.append(m)
        spec = row[col["gpu_spec"]].strip() if "gpu_spec" in col else ""
        specs.append("|".join(s for s in spec.split("|") if s) if n else "")
        qos.append(row[col["qos"]].strip() if "qos" in col else "")
        resource = row[col["gpu_resource"]].strip() if "gpu_resource" in col and n else ""
        if resource and resource not in gpu_resources():
            raise ParseError(
                f"{path}:{line}: gpu_resource {resource!r} is not a vendor's GPU resource",
                fix=f"use one of {', '.join(sorted(gpu_resources()))}, or leave it empty for any vendor",
            )
        resources.append(resource)
        gang = row[col["gang"]].strip() if "gang" in col else ""
        if gang and 0 < m < MILLI:
            raise ParseError(
                f"{path}:{line}: pod {names[-1]!r} of gang {gang!r} shares a GPU (gpu_milli={m})",
                fix="a gang's pods take whole GPUs (gpu_milli=1000) or none",
            )
        gangs.append(gang)
    return PodList(
        names=tuple(names),
        cpu_milli=np.array(cpu, dtype=np.int64),
        memory_mib=np.array(mem, dtype=np.int64),
        num_gpu=np.array(ngpu, dtype=np.int64),
        gpu_milli=np.array(milli, dtype=np.int64),
        gpu_spec=tuple(specs),
        qos=tuple(qos),
        gpu_resource=tuple(resources) if "gpu_resource" in col else (),
        gang=tuple(gangs) if any(gangs) else (),
    )


def pod_file(trace_dir: Path, pods: str) -> Path:
    """``default`` -> ``openb_pod_list_default.csv``; a path to a CSV is taken as is."""
    candidate = Path(pods)
    if candidate.suffix == ".csv":
        return candidate if candidate.is_absolute() or candidate.exists() else trace_dir / candidate
    return trace_dir / f"openb_pod_list_{pods}.csv"


def load_trace(trace_dir: Path, pods: str = "default", nodes: str = GPU_NODE_FILE) -> tuple[NodeList, PodList]:
    """The node list and one pod list of an openb trace folder."""
    if not trace_dir.is_dir():
        raise NotFoundError(f"trace folder {trace_dir} not found", fix="pass --trace-dir pointing at the openb CSVs")
    return load_nodes(trace_dir / nodes), load_pods(pod_file(trace_dir, pods))
