"""What the hardware delivers for the algorithm NCCL picked (data/delivery.yaml).

Selection and delivery are two questions. NCCL picks its (algorithm, protocol) from its own release's table, and
predict.py keeps that table exactly for the pick. The bandwidth the pick then gets is the hardware's: where a
later release corrected that algorithm's bandwidth term from measurement and the kernels move data the same way
in the run's release, the corrected term is the better prediction, whatever release the run used.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from pydantic import BaseModel, ConfigDict

from gpufleet.nccl._files import load_yaml
from gpufleet.nccl.constants import load_constants, version_key
from gpufleet.nccl.topology import Topology
from gpufleet.nccl.tuning import CostTable, bandwidth_under, size_correction


class Correction(BaseModel):
    """One later release's bandwidth term taken as delivery for older releases with the same data path."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    algos: tuple[str, ...]
    constants: str
    applies_from: str
    one_node_search_ceiling: bool
    figures: dict[str, str]
    data_path: str


@dataclass(frozen=True)
class Delivery:
    """Bandwidth (algbw-equivalent GB/s, after NCCL's size corrections) and where the figure comes from."""

    bw_gbps: float
    source: str


@cache
def corrections() -> tuple[Correction, ...]:
    return tuple(Correction(**entry) for entry in load_yaml("delivery.yaml")["corrections"])


def correction_for(algo: str, nccl_version: str) -> Correction | None:
    """The correction that covers ``algo`` on a run of ``nccl_version``, if its data path matches."""
    for corr in corrections():
        if algo in corr.algos and version_key(nccl_version) >= version_key(corr.applies_from):
            return corr
    return None


def delivered(table: CostTable, algo: str, proto: str, nbytes: int) -> Delivery:
    """The bandwidth ``algo``/``proto`` delivers for ``nbytes`` on ``table``'s topology."""
    topo = table.topo
    corr = correction_for(algo, topo.nccl_version)
    own = table.bandwidth.get((algo, proto), 0.0) * size_correction(table.consts, topo, table.coll, algo, proto, nbytes)
    if corr is None:
        return Delivery(own, f"NCCL {table.consts.version} tuning table (the run's own)")
    consts = load_constants(corr.constants)
    bw = _corrected_bw(topo, table.coll, algo, proto, corr.constants, corr.one_node_search_ceiling)
    bw *= size_correction(consts, topo, table.coll, algo, proto, nbytes)
    if bw <= 0:
        return Delivery(own, f"NCCL {table.consts.version} tuning table (the run's own)")
    return Delivery(bw, f"NCCL {consts.version} {algo} terms: " + "; ".join(corr.figures.values()))


@cache
def _corrected_bw(
    topo: Topology, coll: str, algo: str, proto: str, version: str, one_node_search_ceiling: bool
) -> float:
    return bandwidth_under(
        topo, coll, algo, proto, load_constants(version), one_node_search_ceiling=one_node_search_ceiling
    )
