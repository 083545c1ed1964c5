"""Build a cluster from the openb production trace's node list (sn,cpu_milli,memory_mib,gpu,model), and a replay node
list from a cluster (a manifest's nodes, so a replay runs on them and the fabric they are cabled into)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gpufleet.catalog.gpus import get_gpu_model
from gpufleet.errors import ParseError
from gpufleet.model import Cluster, Gpu, Node, NodePool
from gpufleet.sched.replay.openb import OPENB_MODELS, NodeList, load_nodes
from gpufleet.spec.builder import board_serial, gpu_uuid, pci_bus_ids

__all__ = ["OPENB_MODELS", "load_openb_nodes", "node_list_of"]


def node_list_of(cluster: Cluster) -> NodeList:
    """The cluster's nodes as a replay node list: CPU, memory, GPUs and each node's GPU model (its catalog name)."""
    nodes = cluster.nodes
    return NodeList(
        names=tuple(n.name for n in nodes),
        cpu_milli=np.array([n.cpu_milli for n in nodes], dtype=np.int64),
        memory_mib=np.array([n.memory_mib for n in nodes], dtype=np.int64),
        num_gpu=np.array([len(n.gpus) for n in nodes], dtype=np.int64),
        model=tuple(n.gpus[0].model.name if n.gpus else "" for n in nodes),
    )


def load_openb_nodes(path: Path, name: str = "openb") -> Cluster:
    """One model Node per row of an openb node list; a malformed row is an error naming the file and line."""
    rows = load_nodes(Path(path))
    nodes: list[Node] = []
    for sn, cpu_milli, memory_mib, gpu_count, model in zip(
        rows.names, rows.cpu_milli, rows.memory_mib, rows.num_gpu, rows.model, strict=True
    ):
        node = Node(name=sn, pool=model or "cpu", cpu_milli=int(cpu_milli), memory_mib=int(memory_mib))
        if gpu_count:
            if model not in OPENB_MODELS:
                raise ParseError(
                    f"{path}: node {sn}: unknown GPU model {model!r}", fix=f"known: {', '.join(OPENB_MODELS)}"
                )
            spec = get_gpu_model(OPENB_MODELS[model])
            node.labels["nvidia.com/gpu.product"] = spec.product_name.replace(" ", "-")
            for i, bus in enumerate(pci_bus_ids(int(gpu_count))):
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
