"""Version-tagged NCCL tuning constants (data/constants_<version>.yaml)."""

from __future__ import annotations

from functools import cache
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from gpufleet.errors import UserError
from gpufleet.nccl._files import data_names, load_yaml

ALGOS = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
PROTOS = ("LL", "LL128", "Simple")
HW = ("NVLINK", "PCI", "NET")
Triple = tuple[float, float, float]


class Variant(BaseModel):
    """Where tuning.cc's formulas differ between versions."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ring_ll: Literal["half", "quarter"]
    ring_ll128_low_ppn: float | None
    nvls_bw: Literal["efficiency", "min_intra_inter", "ratio"]
    nvls_ratio: Literal["nranks_over_nsteps", "five_sixths"]
    ring_allreduce_inter_steps: Literal["nodes", "nodes_minus_one"]
    nvls_latency: Literal["intra_plus_inter", "base_plus_net"]
    nvlstree_latency: Literal["log_nodes", "linear_nodes"]
    ppn1_uses_tree_net_latency: bool
    allgather_reducescatter_algos: tuple[str, ...]
    pat: bool
    pat_bw_factor: float = 0.75  # PAT busBw discount (0.85 in 2.23, 0.75 from 2.24)
    nvlstree_size_correction: bool = False  # getAlgoTime corrects NVLSTree bw by size on sm100 + x86 (2.29+)
    channel_scaled_time: bool
    max_channels: int = Field(gt=0)
    collnet_arity_latency_us: float


class ThreadThresholds(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    LL: int
    LL128: int
    Simple: int
    ring_ll_times_nranks: bool
    collnet_simple: int


class MaxThreads(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    ring_simple_pci: int
    simple: int
    ll: int
    ll128: int
    max: int


class NvlsChannels(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    hopper: int
    blackwell_multi_node: int
    blackwell_single_node: int


class NcclConstants(BaseModel):
    """One NCCL version's cost-model constants."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: str
    applies_from: str
    source: str
    base_latency: dict[str, Triple]
    hw_latency: dict[str, dict[str, Triple]]
    ll_max_bw: tuple[Triple, Triple, Triple, Triple]
    per_ch_max_ring_ll128_bw: tuple[Triple, Triple, Triple, Triple]
    per_ch_max_tree_ll128_bw: tuple[Triple, Triple, Triple, Triple]
    per_ch_max_tree_bw: tuple[Triple, Triple, Triple, Triple]
    per_ch_max_nvls_tree_bw: tuple[Triple, Triple, Triple, Triple] | None
    nvls_efficiency: tuple[float, float, float, float] | None
    net_overhead_us: dict[str, float]
    tree_correction: dict[str, tuple[float, ...]]
    variant: Variant
    thread_thresholds: ThreadThresholds
    max_threads: MaxThreads
    nvls_channels: NvlsChannels
    max_dev_work_batch_colls: int

    def base(self, algo: str, proto: str) -> float:
        return self.base_latency[algo][PROTOS.index(proto)]

    def hw(self, hw: str, algo: str, proto: str) -> float:
        return self.hw_latency[hw][algo][PROTOS.index(proto)]


def version_key(version: str) -> tuple[int, ...]:
    parts: list[int] = []
    for piece in version.replace("-", ".").split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


@cache
def available_versions() -> tuple[str, ...]:
    names = [n for n in data_names() if n.startswith("constants_") and n.endswith(".yaml")]
    versions = [n.removeprefix("constants_").removesuffix(".yaml") for n in names]
    return tuple(sorted(versions, key=version_key))


@cache
def _load(version: str) -> NcclConstants:
    return NcclConstants(**load_yaml(f"constants_{version}.yaml"))


DEFAULT_VERSION = "2.30"


@cache
def load_constants(version: str = DEFAULT_VERSION) -> NcclConstants:
    """Constants for an NCCL version: the newest table whose ``applies_from`` is not after ``version``."""
    wanted = version_key(version)
    if not wanted or wanted[0] != 2:
        raise UserError(f"cannot read NCCL version {version!r}", fix="give it as 2.MINOR[.PATCH], e.g. 2.21.5")
    tables = [_load(v) for v in available_versions()]
    chosen = None
    for table in tables:
        if version_key(table.applies_from) <= wanted:
            chosen = table
    if chosen is None:
        oldest = tables[0]
        raise UserError(
            f"NCCL {version} is older than the oldest modelled version ({oldest.applies_from})",
            fix=f"use --nccl-version {oldest.applies_from} or newer",
        )
    return chosen
