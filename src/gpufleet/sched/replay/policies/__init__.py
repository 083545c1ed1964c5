"""Placement policies by name."""

from __future__ import annotations

from collections.abc import Callable

from gpufleet.errors import UserError
from gpufleet.sched.replay.policies.base import Policy, pick_max
from gpufleet.sched.replay.policies.fgd import FGD
from gpufleet.sched.replay.policies.fgd_pack import FGDPack
from gpufleet.sched.replay.policies.fgd_plus import FGDPlus
from gpufleet.sched.replay.policies.simple import BestFit, DotProduct, FirstFit, GpuClustering, GpuPacking, RandomFit

POLICIES: dict[str, Callable[[], Policy]] = {
    "random": RandomFit,
    "first-fit": FirstFit,
    "dot-product": DotProduct,
    "gpu-clustering": GpuClustering,
    "gpu-packing": GpuPacking,
    "best-fit": BestFit,
    "fgd": FGD,
    "fgd-plus": FGDPlus,
    "fgd-pack": FGDPack,
}

# the six policies of the FGD paper, in its order, with the names its result files use
PAPER_NAMES = {
    "random": "01-Random",
    "dot-product": "02-DotProd",
    "gpu-clustering": "03-GpuClustering",
    "gpu-packing": "04-GpuPacking",
    "best-fit": "05-BestFit",
    "fgd": "06-FGD",
}


def make_policy(name: str) -> Policy:
    try:
        return POLICIES[name]()
    except KeyError:
        raise UserError(f"unknown policy {name!r}", fix=f"choose one of: {', '.join(POLICIES)} (or 'all')") from None


def expand_policies(spec: str) -> list[str]:
    """'all' or a comma-separated list of policy names."""
    names = list(POLICIES) if spec.strip() == "all" else [s.strip() for s in spec.split(",") if s.strip()]
    for name in names:
        make_policy(name)
    if not names:
        raise UserError("no policy given", fix="pass --policy NAME, a comma-separated list, or 'all'")
    return names


__all__ = ["PAPER_NAMES", "POLICIES", "Policy", "expand_policies", "make_policy", "pick_max"]
