"""`rocm-smi --showtopo`: the GPU-to-GPU weight, hops and link type tables and each GPU's NUMA node.

rocm_smi_lib's python_smi_tools/rocm_smi.py (showTopo, ROCm 5.x-7.x) prints four sections, each under a
`==== <title> ====` banner; `--showtopoweight`, `--showtopohops`, `--showtopotype` and `--showtoponuma` print one
each:

- "Weight between two GPUs": rsmi_topo_get_link_weight, a relative cost (0 to itself; 15 per XGMI hop, more
  through PCIe and the CPUs)
- "Hops between two GPUs": rsmi_topo_get_link_type's hop count
- "Link Type between two GPUs": XGMI or PCIE (the diagonal prints 0)
- "Numa Nodes": `GPU[0]\t\t: (Topology) Numa Node: 0` and `... Numa Affinity: 0` per GPU
  (rsmi_topo_get_numa_node_number; older releases print `GPU 0` for `GPU[0]`)

The tables are `GPU0 GPU1 ...` column heads, then one `GPUn` row each. There are no NIC rows: AMD's tools show no
GPU-to-NIC link, so the affinity this gives (affinity_from_rocm_topo) has each GPU's NUMA node only; sysfs
(sources/node/pci_affinity.py) adds the NICs on a live node.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpufleet.errors import ParseError
from gpufleet.model.affinity import GpuAffinity, HostAffinity

FIX = "pass the output of `rocm-smi --showtopo` (or --showtopoweight, --showtopohops, --showtopotype, --showtoponuma)"
_BANNER = re.compile(r"^=+ (?P<title>[^=]+?) =+$")
_TABLES = {
    "Weight between two GPUs": "weight",
    "Hops between two GPUs": "hops",
    "Link Type between two GPUs": "link_type",
}
_HEAD = re.compile(r"^\s*GPU0(\s+GPU\d{1,4})*\s*$")
_ROW = re.compile(r"^GPU(?P<index>\d{1,4})\s+(?P<cells>\S.*)$")
_NUMA = re.compile(
    r"^GPU\s?\[?(?P<index>\d{1,4})\]?\s*:\s*\(Topology\) Numa (?P<what>Node|Affinity):\s*(?P<value>-?\d+|\S+)\s*$"
)
MAX_GPUS = 256


@dataclass
class RocmTopology:
    """What `rocm-smi --showtopo` printed: per table, (row GPU, column GPU) -> cell as printed; per GPU its NUMA
    node and affinity (None: not printed, or -1)."""

    gpus: list[int] = field(default_factory=list)
    weight: dict[tuple[int, int], str] = field(default_factory=dict)
    hops: dict[tuple[int, int], str] = field(default_factory=dict)
    link_type: dict[tuple[int, int], str] = field(default_factory=dict)
    numa_node: dict[int, int | None] = field(default_factory=dict)
    numa_affinity: dict[int, int | None] = field(default_factory=dict)

    def xgmi_peers(self, gpu: int) -> list[int]:
        """The GPUs `gpu` reaches over XGMI, by the link type table."""
        return sorted(b for (a, b), kind in self.link_type.items() if a == gpu and b != gpu and kind == "XGMI")


def _node(text: str) -> int | None:
    return int(text) if text.isdigit() and len(text) < 5 else None


def parse_rocm_topology(text: str, *, source: str = "rocm-smi --showtopo") -> RocmTopology:
    topo = RocmTopology()
    table: str | None = None
    columns: list[int] = []
    seen = set()
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        banner = _BANNER.match(line)
        if banner is not None:
            title = banner.group("title").strip()
            table, columns = _TABLES.get(title), []
            if title in _TABLES or title == "Numa Nodes":
                seen.add(title)
            continue
        numa = _NUMA.match(line)
        if numa is not None:
            index = int(numa.group("index"))
            value = _node(numa.group("value"))
            (topo.numa_node if numa.group("what") == "Node" else topo.numa_affinity)[index] = value
            if index not in topo.gpus and len(topo.gpus) < MAX_GPUS:
                topo.gpus.append(index)
            continue
        if table is None:
            continue
        if _HEAD.match(line):
            columns = [int(t[3:]) for t in line.split()][:MAX_GPUS]
            continue
        row = _ROW.match(line)
        if row is None or not columns:
            raise ParseError(f"{source}:{lineno}: not a row of the {table} table: {line[:60]!r}", fix=FIX)
        cells = row.group("cells").split()
        if len(cells) != len(columns):
            raise ParseError(
                f"{source}:{lineno}: GPU{row.group('index')} has {len(cells)} cells for {len(columns)} GPUs", fix=FIX
            )
        index = int(row.group("index"))
        values = getattr(topo, table)
        for column, cell in zip(columns, cells, strict=True):
            values[(index, column)] = cell
        if index not in topo.gpus and len(topo.gpus) < MAX_GPUS:
            topo.gpus.append(index)
    if not seen:
        raise ParseError(f"{source}: none of the topology sections (weight, hops, link type, NUMA nodes)", fix=FIX)
    topo.gpus.sort()
    return topo


def affinity_from_rocm_topo(topo: RocmTopology) -> HostAffinity:
    """Each GPU's NUMA node (no NICs: the tool shows none)."""
    return HostAffinity("rocm-smi --showtopo", [GpuAffinity(g, numa_node=topo.numa_node.get(g)) for g in topo.gpus])
