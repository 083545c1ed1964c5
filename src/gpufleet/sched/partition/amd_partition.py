"""AMD Instinct compute and memory partitions: what each mode exposes, which modes are valid, and what the AMD device
plugin advertises for them.

A compute mode groups the package's XCDs into logical GPUs: SPX one GPU of all XCDs, DPX two, TPX three, QPX four,
CPX one per XCD. A memory (NPS) mode splits the HBM into NUMA pools: NPS1 one, NPS2 two, NPS4 four (on MI300X one per
IOD, 48 GB each). Every logical GPU is its own KFD node, render device and Kubernetes device; it allocates from one
pool, which it shares with the other partitions of that pool (CPX+NPS4 on MI300X: 2 partitions per 48 GB quadrant).

Valid pairs are the kernel's compatibility list (amdgpu aqua_vanjaram.c: GC 9.4.3/9.4.4 take NPS1 and NPS4, GC 9.5.0
adds NPS2 for QPX and CPX) within the modes the catalog lists for the model. AMD's Device Config Manager validates
less: SPX and CPX only, NPS1 and NPS4 only, NPS4 only with CPX, one NPS mode per node.

The device plugin names resources by its `-resource_naming_strategy`: `single` advertises every logical GPU as
`amd.com/gpu` and refuses a node whose GPUs are in different modes; `mixed` advertises one resource per mode,
`amd.com/<compute>_<memory>` in lower case (8 MI300X in CPX+NPS4 give `amd.com/cpx_nps4: 64`), and GPUs that cannot
be partitioned (MI210, MI250X) as `amd.com/gpu` under either strategy.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from gpufleet.catalog.gpus import GpuModelSpec, get_gpu_model
from gpufleet.errors import UserError
from gpufleet.model.node import Node

AMD_RESOURCE = "amd.com/gpu"
COMPUTE_MODES = ("SPX", "DPX", "TPX", "QPX", "CPX")
MEMORY_MODES = ("NPS1", "NPS2", "NPS4", "NPS8")
_LOGICAL = {"SPX": 1, "DPX": 2, "TPX": 3, "QPX": 4}  # logical GPUs per package; CPX: one per XCD
_POOLS = {"NPS1": 1, "NPS2": 2, "NPS4": 4, "NPS8": 8}
# XCDs per package, keyed by catalog model (the catalog records compute units, not dies). ROCm's MI300 and MI350
# architecture pages: MI300X and MI325X 8 XCDs of 38 active CUs, MI355X 8 XCDs of 32.
XCDS = {"mi300x": 8, "mi325x": 8, "mi355x": 8}
# Which memory modes each compute mode may pair with, by LLVM target (the kernel's compatibility lists).
KERNEL_COMPATIBLE: dict[str, dict[str, tuple[str, ...]]] = {
    "gfx942": {"SPX": ("NPS1",), "DPX": ("NPS1", "NPS2"), "TPX": ("NPS1", "NPS4"), "QPX": ("NPS1", "NPS4"),
               "CPX": ("NPS1", "NPS4")},
    "gfx950": {"SPX": ("NPS1",), "DPX": ("NPS1", "NPS2"), "QPX": ("NPS1", "NPS2"), "CPX": ("NPS1", "NPS2")},
}  # fmt: skip
DCM_COMPUTE = ("SPX", "CPX")
DCM_MEMORY = ("NPS1", "NPS4")
DEFAULT_MODE = ("SPX", "NPS1")  # what a package boots in until someone repartitions it
SIMD_PER_CU = 4  # CDNA: KFD topology's simd_per_cu
PARTITION_LABEL = "amd.com/gpu.compute-memory-partition"  # the node labeller's, on a node in one mode

Naming = Literal["single", "mixed"]
_RESOURCE = re.compile(r"^amd\.com/([a-z]px)_(nps\d)$")
_MODE_TEXT = re.compile(r"^\s*([A-Za-z]px)\s*[_+/\- ]\s*(nps\d)\s*$", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class PartitionMode:
    """One (compute, memory) mode of one model, and what each logical GPU it makes gets."""

    model: GpuModelSpec
    compute: str  # SPX, DPX, TPX, QPX, CPX
    memory: str  # NPS1, NPS2, NPS4

    @property
    def name(self) -> str:
        """`cpx_nps4`: the device plugin's and node labeller's spelling."""
        return f"{self.compute}_{self.memory}".lower()

    @property
    def xcds(self) -> int:
        return XCDS[self.model.name]

    @property
    def partitions(self) -> int:
        """Logical GPUs the package shows in this mode."""
        return self.xcds if self.compute == "CPX" else _LOGICAL[self.compute]

    @property
    def xcds_each(self) -> int:
        return self.xcds // self.partitions

    @property
    def cus_each(self) -> int:
        return (self.model.compute_units or 0) // self.partitions

    @property
    def simds_each(self) -> int:
        return self.cus_each * SIMD_PER_CU

    @property
    def pools(self) -> int:
        return _POOLS[self.memory]

    @property
    def shared_by(self) -> int:
        """Logical GPUs that allocate from the same memory pool."""
        return self.partitions // self.pools

    @property
    def pool_mib(self) -> int:
        """The NUMA pool a logical GPU allocates from (NPS4 on MI300X: its quadrant's 48 GB)."""
        return self.model.memory_mib // self.pools

    @property
    def memory_mib(self) -> int:
        """Its share of that pool: what KFD reports as its VRAM and DRA as its `memory` capacity."""
        return self.pool_mib // self.shared_by

    @property
    def dcm_valid(self) -> bool:
        return not dcm_mode_problems(self.compute, self.memory)

    @property
    def is_default(self) -> bool:
        return (self.compute, self.memory) == DEFAULT_MODE

    def resource(self, naming: Naming = "single") -> str:
        return f"amd.com/{self.name}" if naming == "mixed" else AMD_RESOURCE

    def __str__(self) -> str:
        return f"{self.compute}+{self.memory}"


def _model(model: str | GpuModelSpec) -> GpuModelSpec:
    return model if isinstance(model, GpuModelSpec) else get_gpu_model(model)


def partitionable(model: str | GpuModelSpec) -> bool:
    spec = _model(model)
    return spec.vendor == "amd" and len(spec.compute_partitions) > 1 and spec.name in XCDS


def _require_partitionable(spec: GpuModelSpec) -> None:
    if spec.vendor != "amd":
        raise UserError(
            f"{spec.name} is not an AMD Instinct part ({spec.vendor_spec.display_name}): compute and memory "
            "partitions are AMD's",
            fix="plan NVIDIA GPUs with MIG (`gpufleet partition plan`); Gaudi devices are not partitioned",
        )
    if not partitionable(spec):
        capable = ", ".join(sorted(XCDS))
        raise UserError(
            f"{spec.product_name} ({spec.name}) cannot be partitioned: the device plugin advertises it whole as "
            f"{AMD_RESOURCE}",
            fix=f"choose a partitionable model ({capable})",
        )


def _pair(compute: str, memory: str) -> tuple[str, str]:
    c, m = compute.strip().upper(), memory.strip().upper()
    if c not in COMPUTE_MODES:
        raise UserError(f"unknown compute partition mode {compute!r}", fix=f"use one of: {', '.join(COMPUTE_MODES)}")
    if m not in MEMORY_MODES:
        raise UserError(f"unknown memory partition mode {memory!r}", fix=f"use one of: {', '.join(MEMORY_MODES)}")
    return c, m


def mode_problems(model: str | GpuModelSpec, compute: str, memory: str) -> list[str]:
    """Why the kernel would refuse this pair on this model (empty when valid)."""
    spec = _model(model)
    _require_partitionable(spec)
    c, m = _pair(compute, memory)
    problems = []
    if c not in spec.compute_partitions:
        problems.append(f"{spec.name} has no {c} compute mode (it has {', '.join(spec.compute_partitions)})")
    if m not in spec.memory_partitions:
        problems.append(f"{spec.name} has no {m} memory mode (it has {', '.join(spec.memory_partitions)})")
    allowed = KERNEL_COMPATIBLE.get(spec.gfx_target, {}).get(c, ())
    if not problems and m not in allowed:
        with_c = ", ".join(allowed) or "no memory mode"
        problems.append(f"the amdgpu driver pairs {c} with {with_c} on {spec.gfx_target}, not {m}")
    if not problems:
        logical = XCDS[spec.name] if c == "CPX" else _LOGICAL[c]
        if logical % _POOLS[m]:
            problems.append(f"{c} makes {logical} GPUs, which {m}'s {_POOLS[m]} memory pools cannot share evenly")
    return problems


def mode(model: str | GpuModelSpec, compute: str, memory: str) -> PartitionMode:
    """The mode, or a UserError that says why the pair is invalid and lists the valid ones."""
    spec = _model(model)
    problems = mode_problems(spec, compute, memory)
    if problems:
        valid = ", ".join(str(m) for m in valid_modes(spec))
        raise UserError(f"{compute.upper()}+{memory.upper()} on {spec.name}: {'; '.join(problems)}", fix=f"use {valid}")
    c, m = _pair(compute, memory)
    return PartitionMode(spec, c, m)


def valid_modes(model: str | GpuModelSpec, *, dcm_only: bool = False) -> list[PartitionMode]:
    """Every pair the kernel accepts on the model (and AMD's DCM too, with `dcm_only`), fewest GPUs first."""
    spec = _model(model)
    _require_partitionable(spec)
    out = [
        PartitionMode(spec, c, m)
        for c in COMPUTE_MODES
        for m in MEMORY_MODES
        if c in spec.compute_partitions and m in spec.memory_partitions and not mode_problems(spec, c, m)
    ]
    return [m for m in out if m.dcm_valid] if dcm_only else out


def parse_mode(model: str | GpuModelSpec, text: str) -> PartitionMode:
    """`cpx_nps4`, `CPX+NPS4`, `cpx-nps4` or `CPX/NPS4` on the model."""
    found = _MODE_TEXT.match(text)
    if found is None:
        raise UserError(f"{text!r} is not a partition mode", fix="write COMPUTE_MEMORY, e.g. cpx_nps4 or spx_nps1")
    return mode(model, found.group(1), found.group(2))


def default_mode(model: str | GpuModelSpec) -> PartitionMode:
    return mode(model, *DEFAULT_MODE)


def dcm_mode_problems(compute: str, memory: str) -> list[str]:
    """What AMD's Device Config Manager refuses in one profile entry (its documented checks)."""
    c, m = _pair(compute, memory)
    problems = []
    if c not in DCM_COMPUTE:
        problems.append(f"DCM supports the {' and '.join(DCM_COMPUTE)} compute types, not {c}")
    if m not in DCM_MEMORY:
        problems.append(f"DCM supports the {' and '.join(DCM_MEMORY)} memory types, not {m}")
    elif m == "NPS4" and c != "CPX":
        problems.append(f"DCM supports NPS4 only with CPX, not with {c}")
    return problems


def dcm_profile_problems(entries: Sequence[tuple[str, str, int]], gpus: int, skipped: Sequence[int] = ()) -> list[str]:
    """DCM's checks on one profile: (compute, memory, numGPUsAssigned) entries for a node of `gpus` GPUs."""
    problems = [p for c, m, _ in entries for p in dcm_mode_problems(c, m)]
    memories = {m.upper() for _, m, _ in entries}
    if {"NPS1", "NPS4"} <= memories:
        problems.append("NPS1 and NPS4 cannot be combined in one profile")
    if "NPS4" in memories and len(entries) > 1:
        problems.append("NPS4 does not work with heterogeneous partition schemes")
    bad_ids = [i for i in skipped if not 0 <= i < gpus]
    if bad_ids:
        problems.append(f"skippedGPUs ids {bad_ids} are outside 0..{gpus - 1}")
    assigned = sum(n for _, _, n in entries)
    if assigned + len(skipped) != gpus:
        problems.append(
            f"numGPUsAssigned adds up to {assigned} and skippedGPUs holds {len(skipped)}: together they must be "
            f"the node's {gpus} GPUs"
        )
    return problems


# --- what the device plugin advertises ---------------------------------------------------------------------------


def parse_partition_resource(name: str) -> tuple[str, str] | None:
    """`amd.com/cpx_nps4` -> ("CPX", "NPS4"); None for any other name."""
    found = _RESOURCE.match(name)
    if found is None or found.group(1).upper() not in COMPUTE_MODES or found.group(2).upper() not in MEMORY_MODES:
        return None
    return found.group(1).upper(), found.group(2).upper()


def is_partition_resource(name: str) -> bool:
    return parse_partition_resource(name) is not None


def advertised(
    model: str | GpuModelSpec, modes: Sequence[PartitionMode | None], naming: Naming = "single"
) -> dict[str, int]:
    """The node's allocatable as the device plugin reports it: one entry of `modes` per physical GPU (None: the
    model cannot be partitioned). `single` refuses a node whose GPUs are in different modes, as the plugin does."""
    spec = _model(model)
    if not modes:
        return {}
    if not partitionable(spec) or all(m is None for m in modes):
        return {AMD_RESOURCE: len(modes)}
    if any(m is None for m in modes):
        raise UserError(f"{spec.name}: every partitionable GPU of a node is in some mode", fix="name a mode per GPU")
    names = Counter(m.name for m in modes if m is not None)
    if naming == "single":
        if len(names) > 1:
            raise UserError(
                f"the AMD device plugin's single naming strategy refuses a node whose GPUs are in different modes "
                f"({', '.join(sorted(names))})",
                fix="start the plugin with -resource_naming_strategy=mixed, or put every GPU of the node in one mode",
            )
        return {AMD_RESOURCE: sum(m.partitions for m in modes if m is not None)}
    out: Counter[str] = Counter()
    for m in modes:
        if m is not None:
            out[m.resource("mixed")] += m.partitions
    return dict(sorted(out.items()))


Modes = PartitionMode | Sequence[PartitionMode | None] | None


def node_modes(node: Node, modes: Modes = None) -> list[PartitionMode | None]:
    """One mode per GPU: as given, else the node labeller's homogeneous-node label, else the boot default (SPX, NPS1);
    None for GPUs that cannot be partitioned."""
    if not node.gpus:
        return []
    model = node.gpus[0].model
    if not partitionable(model):
        return [None] * len(node.gpus)
    if modes is None:
        label = node.labels.get(PARTITION_LABEL)
        modes = parse_mode(model, label) if label else default_mode(model)
    if isinstance(modes, PartitionMode):
        return [modes] * len(node.gpus)
    if len(modes) != len(node.gpus):
        raise UserError(f"node {node.name}: {len(modes)} modes for {len(node.gpus)} GPUs", fix="give one per GPU")
    return list(modes)
