"""Build a cluster from the openb production trace's node list (sn,cpu_milli,memory_mib,gpu,model)."""

from __future__ import annotations

import csv
from pathlib import Path

from gpufleet.catalog.gpus import get_gpu_model
from gpufleet.errors import ParseError
from gpufleet.model import Cluster, Gpu, Node, NodePool
from gpufleet.spec.builder import board_serial, gpu_uuid, pci_bus_ids

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
NODE_COLUMNS = ["sn", "cpu_milli", "memory_mib", "gpu", "model"]


def load_openb_nodes(path: Path, name: str = "openb") -> Cluster:
    """One model Node per CSV row; a malformed row is an error naming the file and line."""
    path = Path(path)
    try:
        fh = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise ParseError(f"{path}: cannot read ({exc.strerror})", fix="pass the openb node list CSV") from None
    nodes: list[Node] = []
    with fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header != NODE_COLUMNS:
            raise ParseError(f"{path}:1: expected header {','.join(NODE_COLUMNS)}, got {header}")
        for line, row in enumerate(reader, start=2):
            if not row:
                continue
            if len(row) != 5:
                raise ParseError(f"{path}:{line}: expected 5 columns, got {len(row)}: {row}")
            sn, cpu, mem, gpus, model = row
            try:
                cpu_milli, memory_mib, gpu_count = int(cpu), int(mem), int(gpus)
            except ValueError:
                raise ParseError(f"{path}:{line}: cpu_milli, memory_mib and gpu must be integers: {row}") from None
            if gpu_count and model not in OPENB_MODELS:
                raise ParseError(f"{path}:{line}: unknown GPU model {model!r}", fix=f"known: {', '.join(OPENB_MODELS)}")
            node = Node(name=sn, pool=model or "cpu", cpu_milli=cpu_milli, memory_mib=memory_mib)
            if gpu_count:
                spec = get_gpu_model(OPENB_MODELS[model])
                node.labels["nvidia.com/gpu.product"] = spec.product_name.replace(" ", "-")
                for i, bus in enumerate(pci_bus_ids(gpu_count)):
                    node.gpus.append(Gpu(i, gpu_uuid(name, sn, i), bus, board_serial(name, sn, i), spec, minor=i))
            nodes.append(node)
    pools: dict[str, list[str]] = {}
    for n in nodes:
        pools.setdefault(n.pool, []).append(n.name)
    return Cluster(
        name=name,
        nodes=nodes,
        pools=[NodePool(p, names, OPENB_MODELS.get(p), 0, 0, 0.0) for p, names in sorted(pools.items())],
    )
