"""A run the model cannot size, judged by what it shows of itself.

The model needs the GPU (for its links) and, across nodes, the NICs' speed. Where the output does not give them (no
`#  Rank ... device` lines, a GPU the catalog does not name such as an engineering sample's "NVIDIA Graphics
Device", a vendor the model does not cover, a multi-node run whose NCCL INFO lines name its NICs but not their
speed), two things still hold whatever the hardware:

- nccl-tests' bus bandwidth (doc/PERFORMANCE.md: normalised so it compares across rank counts) does not fall as
  messages grow once the links are saturated: a large size more than TOLERANCE below the run's own peak is a link
  that slowed, throttling or contention during the run;
- within one node, GPUs reach each other at least over PCIe. NCCL's topology (src/graph/topo.h, NVIDIA/nccl
  v2.30.7-1) rates a PCIe link at gen_factor x width / 80 GB/s per direction, 12 GB/s for Gen3 x16, the slowest
  link of any server GPU since Pascal; a ring over it reaches most of that. A single-node run that peaks below half
  of the GPU's own PCIe link (Gen3 x16 when the GPU is unknown) is not on a GPU peer path: the data goes through
  host memory (NCCL_P2P_DISABLE=1, GPUs that cannot do P2P, ACS/IOMMU redirecting it) or a link trained down.

Nothing here says a run is as fast as its hardware allows: the notes say the peak was not compared with a model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpufleet.catalog.gpus import GpuModelSpec
from gpufleet.model import Severity
from gpufleet.nccl.perf_parser import PerfRow, PerfTable

BANDWIDTH_REGION_BYTES = 256 << 20  # saturated sizes, as nccl.compare judges them
SMALLEST_JUDGED_BYTES = 64 << 20  # a run that stops below this never shows its links' bandwidth
TOLERANCE = 0.15  # as nccl.compare's TOLERANCE_BANDWIDTH: healthy runs hold within it at large sizes
PCI_GEN_FACTOR = {1: 15, 2: 30, 3: 60, 4: 120, 5: 240, 6: 480}  # topo.cc kvDictPciGen, GB/s = factor x width / 80
FLOOR_SHARE = 0.5  # of the PCIe link: below it the data is not on a peer path
UNKNOWN_PCIE = (3, 16)
GPUS_ON_ONE_BOARD = 8  # an HGX/OAM baseboard: more ranks than this with no hosts named are likely several nodes


@dataclass(frozen=True)
class OwnCause:
    code: str
    message: str
    severity: Severity


@dataclass
class OwnPeak:
    """What the run shows of itself: its peak, the causes found, and what was assumed to find them."""

    peak: float | None
    causes: list[OwnCause] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)  # the sizes flagged
    floor_checked: bool = False  # one node: its peak was held against the PCIe floor

    @property
    def conclusive(self) -> bool:
        """Enough for a verdict: a cause found, or a single-node peak above the floor. Across nodes, a run that
        holds its own peak says nothing of the network it was given (a socket fallback holds its peak too)."""
        return self.peak is not None and (bool(self.causes) or self.floor_checked)


def _fmt(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):g} {unit}"
    return f"{n} B"


def _region(rows: list[PerfRow]) -> list[PerfRow]:
    """The saturated sizes: from 256 MiB up, or the run's largest size when it stops between 64 and 256 MiB."""
    sized = [r for r in rows if r.busbw > 0]
    if not sized:
        return []
    largest = max(r.bytes for r in sized)
    if largest < SMALLEST_JUDGED_BYTES:
        return []
    return [r for r in sized if r.bytes >= min(BANDWIDTH_REGION_BYTES, largest)]


def judge_own_peak(
    table: PerfTable,
    nodes: int | None,
    nranks: int | None,
    spec: GpuModelSpec | None,
    why: str,
    nodes_assumed: bool = False,
) -> OwnPeak:
    """Judge `table` against its own peak and, on one node, the PCIe floor. `why` says what the model lacked;
    `nodes_assumed`: the output names no hosts, so one node is an assumption (not made past one board's GPUs)."""
    region = _region(table.rows)
    if not region:
        return OwnPeak(None, notes=[f"bandwidth not judged: {why}, and no size of 64 MiB or more to judge by itself"])
    peak = max(r.busbw for r in region)
    out = OwnPeak(peak, notes=[f"{why}: judged against the run's own peak ({peak:g} GB/s bus bandwidth from "
                               f"{_fmt(region[0].bytes)} up), not against a model of its hardware"])  # fmt: skip
    # bandwidth still rising at 256 MiB is normal (large NVLink domains peak at GiBs); a fall below what a smaller
    # size already reached is not
    sagging: list[tuple[PerfRow, float]] = []
    reached = 0.0
    for row in sorted(region, key=lambda r: r.bytes):
        if row.busbw < (1 - TOLERANCE) * reached:
            sagging.append((row, reached))
        reached = max(reached, row.busbw)
    if sagging:
        worst, before = min(sagging, key=lambda pair: pair[0].busbw / pair[1])
        out.sizes = [r.bytes for r, _ in sagging]
        out.causes.append(
            OwnCause(
                "low_peak",
                f"at {_fmt(worst.bytes)} bus bandwidth falls to {worst.busbw / before:.0%} of what smaller messages "
                f"of the same run reached ({worst.busbw:g} of {before:g} GB/s): a link that slowed during the run, "
                "throttling or contention",
                Severity.warning,
            )
        )
    on_one_node = nodes == 1 and not (nodes_assumed and (nranks or 0) > GPUS_ON_ONE_BOARD)
    if not on_one_node:
        where = (
            f"across {nodes} nodes"
            if nodes and nodes > 1
            else f"{nranks} GPUs with no hosts named (more than one node's worth)"
        )
        out.notes.append(f"{where}: the network's speed is not in the output, so the run is held only to its own "
                         "peak")  # fmt: skip
    elif nranks is None or nranks > 1:
        out.floor_checked = True
        gen, width = (spec.pcie_gen, spec.pcie_width) if spec is not None and spec.pcie_gen else UNKNOWN_PCIE
        link = PCI_GEN_FACTOR.get(gen, PCI_GEN_FACTOR[3]) * width / 80
        floor = FLOOR_SHARE * link
        whose = (
            f"the GPU's own PCIe Gen{gen} x{width} link"
            if spec is not None
            else f"a PCIe Gen{gen} x{width} link (the slowest a server GPU has)"
        )
        if peak < floor:
            disabled = " (NCCL_P2P_DISABLE=1 is set in the run)" if table.env.get("NCCL_P2P_DISABLE") == "1" else ""
            gpus = f"{nranks} GPUs" if nranks else "its GPUs"
            out.causes.append(
                OwnCause(
                    "wrong_transport",
                    f"bus bandwidth peaks at {peak:g} GB/s across {gpus} in one node, below half of what {whose} "
                    f"carries ({link:g} GB/s per direction): the data goes through host memory"
                    f"{disabled} (P2P disabled, GPUs that cannot reach each other peer-to-peer, ACS/IOMMU "
                    "redirecting it) or a link trained down",
                    Severity.warning,
                )
            )
        else:
            out.notes.append(f"the peak is above half of what {whose} carries ({link:g} GB/s per direction)")
        if spec is not None and spec.nvlink_links:
            out.notes.append(f"the catalog gives {spec.name} {spec.nvlink_links} scale-up links of "
                             f"{spec.nvlink_bw_gbps_per_link:g} GB/s per direction")  # fmt: skip
    return out
