"""What every placement policy implements, and the kube-scheduler-style node selection they share."""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np
import numpy.typing as npt

from gpufleet.sched.replay.openb import PodList
from gpufleet.sched.replay.state import (
    BoolArray,
    ClassStore,
    IntArray,
    NodeStates,
    PodRequest,
    ReplayCluster,
    ReplayPlacement,
)

# kube-scheduler's score range
MAX_NODE_SCORE = 100
# normalisers the reference simulator uses: the largest node it expects (128 cores, 8 GPUs)
MAX_SPEC_CPU = 128000
MAX_SPEC_GPU = 8000


class Policy(ABC):
    """Scores node states for one pod and picks the GPUs the pod gets on the chosen node.

    ``scores`` reads only the rows' state (free CPU, memory, GPU shares, model, whether used, affinity tags when
    ``class_fields`` names them) and the pod, so the placement engine can score one row per class of identical
    nodes and cache it; ``choose`` is the reference path that scores every node.
    """

    name: str = ""
    description: str = ""
    tie_by_index: bool = False  # ties go to the lowest node index, not the run's tie order (name_rank)
    picks_at_random: bool = False  # a uniformly random feasible node, in node order (scores only filter)
    class_fields: frozenset[str] = frozenset()  # extra node state the scores read: "affinity"

    def prepare(self, cluster: ReplayCluster, workload: PodList | None) -> None:  # noqa: B027 - optional hook
        """Called once before a replay; ``workload`` is the trace's pod list (for workload-aware policies)."""

    @abstractmethod
    def scores(self, rows: NodeStates, pod: PodRequest) -> npt.NDArray[np.float64]:
        """Each row's score for the pod (feasibility is checked apart)."""

    def class_scores(self, store: ClassStore, ids: IntArray, pod: PodRequest) -> npt.NDArray[np.float64]:
        """Scores of the classes ``ids`` of the placement engine, -inf where the pod does not fit."""
        rows = store.rows(ids)
        return np.where(rows.feasible(pod), self.scores(rows, pod), -np.inf)

    @abstractmethod
    def pick_gpus(
        self, cluster: ReplayCluster, node: int, pod: PodRequest, rng: np.random.Generator
    ) -> tuple[int, ...]:
        """The GPU ids the pod gets on ``node``."""

    def choose(
        self, cluster: ReplayCluster, pod: PodRequest, feasible: BoolArray, rng: np.random.Generator
    ) -> ReplayPlacement:
        """Pick a node among ``feasible`` (at least one is True) by scoring every node, and its GPUs."""
        if self.picks_at_random:
            nodes = np.flatnonzero(feasible)
            node = int(nodes[rng.integers(len(nodes))])
        elif self.tie_by_index:
            node = int(np.argmax(np.where(feasible, self.scores(cluster, pod), -np.inf)))
        else:
            node = pick_max(self.scores(cluster, pod), feasible, cluster)
        return ReplayPlacement(node, self.pick_gpus(cluster, node, pod, rng))


def pick_max(scores: npt.NDArray[np.float64], feasible: BoolArray, cluster: ReplayCluster) -> int:
    """The feasible node with the highest score; equal scores go to the node with the lowest ``name_rank``.

    The FGD paper's simulator replaced kube-scheduler's random tie-break with "smallest node name" (for
    reproducibility) after prefixing every node name with a random permutation index, so ties follow a
    random node order that stays fixed for a run; a replay sets ``name_rank`` that way, a fresh cluster
    uses plain name order. With coarse integer scores ties are frequent: the rule shapes every result.
    """
    masked = np.where(feasible, scores, -np.inf)
    ties = np.flatnonzero(masked == masked.max())
    if len(ties) == 1:
        return int(ties[0])
    return int(ties[np.argmin(cluster.name_rank[ties])])


def trunc_score(values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Go's int64(float) conversion: truncate toward zero."""
    return np.trunc(values)
