"""Nodes grouped by identical state, so placement reads classes, not every node.

A scheduler's filters and scores depend on a node only through its state (free CPU, memory, GPU shares, model,
labels that matter...). Nodes in the same state pass the same filters and score the same, so a pod's decision is: the
best-scoring class, then that class's member that wins the tie-break. A fleet of thousands of identical nodes is a
handful of classes, whatever its size; a class's state never changes (a node that changes moves to another class), so
what a class scores for a pod type can be cached for as long as the class exists.

Each class keeps its members in a heap by tie key (lazy deletion: an entry whose node has left the class is dropped
when it reaches the top), so the winner of a class is read in O(log n) and a node moves in O(log n).
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Iterator, Sequence

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

NO_NODE = np.iinfo(np.int64).max  # min_tie of an empty class


class NodeClasses:
    """Partition of nodes ``0..n-1`` into classes of equal state, with each class's member of smallest tie key.

    ``tie[node]`` orders nodes within a class and across tied classes (smaller wins); tie keys must be distinct.
    """

    def __init__(self, tie: Sequence[int] | IntArray) -> None:
        self.tie = np.asarray(tie, dtype=np.int64)
        n = len(self.tie)
        self._node_of_tie = {int(t): i for i, t in enumerate(self.tie.tolist())}
        if len(self._node_of_tie) != n:
            raise ValueError("tie keys must be distinct")
        self.node_class = np.full(n, -1, dtype=np.int64)
        self.keys: list[Hashable] = []
        self._id_of: dict[Hashable, int] = {}
        self._members: list[set[int]] = []
        self._heaps: list[list[int]] = []
        self.min_tie = np.full(16, NO_NODE, dtype=np.int64)
        # active classes (with members) in a dense array, with each class's position in it (-1: inactive)
        self._active = np.zeros(16, dtype=np.int64)
        self._n_active = 0
        self._pos = np.full(16, -1, dtype=np.int64)

    def __len__(self) -> int:
        """How many classes exist (active or not); class ids are ``0..len-1`` and never reused."""
        return len(self.keys)

    @property
    def n_active(self) -> int:
        return self._n_active

    def active(self) -> IntArray:
        """Ids of the classes that have members (a view: read it before the next move)."""
        return self._active[: self._n_active]

    def class_id(self, key: Hashable) -> int | None:
        return self._id_of.get(key)

    def members(self, cls: int) -> set[int]:
        return self._members[cls]

    def size(self, cls: int) -> int:
        return len(self._members[cls])

    def first(self, cls: int) -> int:
        """The member with the smallest tie key (the class must have members)."""
        return self._node_of_tie[int(self.min_tie[cls])]

    def ordered(self, cls: int) -> Iterator[int]:
        """The class's members by tie key, smallest first, read lazily (no move may happen while iterating): the
        heap is walked as a tree from its root, a frontier heap holding the next candidates, so taking the first k
        members costs O(k log k) whatever the class's size."""
        heap = self._heaps[cls]
        node_of = self._node_of_tie
        node_class = self.node_class
        frontier = [(heap[0], 0)] if heap else []
        last = None
        while frontier:
            t, i = heapq.heappop(frontier)
            for child in (2 * i + 1, 2 * i + 2):
                if child < len(heap):
                    heapq.heappush(frontier, (heap[child], child))
            if t == last:  # a node that left and came back has two entries
                continue
            node = node_of[t]
            if node_class[node] == cls:
                last = t
                yield node

    # --- moves ---------------------------------------------------------------------------------------------------

    def move(self, node: int, key: Hashable) -> tuple[int, bool]:
        """Put ``node`` in the class of ``key`` (created if new). Returns the class id and whether it was created."""
        cls = self._id_of.get(key)
        created = cls is None
        if cls is None:
            cls = self._new_class(key)
        old = int(self.node_class[node])
        if old == cls:
            return cls, False
        if old >= 0:
            self._leave(node, old)
        self.node_class[node] = cls
        members = self._members[cls]
        members.add(node)
        t = int(self.tie[node])
        heapq.heappush(self._heaps[cls], t)
        if t < self.min_tie[cls]:
            self.min_tie[cls] = t
        if len(members) == 1:
            self._activate(cls)
        return cls, created

    def _new_class(self, key: Hashable) -> int:
        cls = len(self.keys)
        self.keys.append(key)
        self._id_of[key] = cls
        self._members.append(set())
        self._heaps.append([])
        if cls >= len(self.min_tie):
            grow = len(self.min_tie)
            self.min_tie = np.concatenate([self.min_tie, np.full(grow, NO_NODE, dtype=np.int64)])
            self._pos = np.concatenate([self._pos, np.full(grow, -1, dtype=np.int64)])
            self._active = np.concatenate([self._active, np.zeros(grow, dtype=np.int64)])
        return cls

    def _leave(self, node: int, cls: int) -> None:
        members = self._members[cls]
        members.discard(node)
        if not members:
            self._heaps[cls].clear()
            self.min_tie[cls] = NO_NODE
            self._deactivate(cls)
            return
        heap = self._heaps[cls]
        if int(self.tie[node]) == heap[0]:
            node_class = self.node_class
            node_of = self._node_of_tie
            # the node is still recorded in `cls` by the caller until this returns: skip it explicitly
            while heap and (node_of[heap[0]] == node or node_class[node_of[heap[0]]] != cls):
                heapq.heappop(heap)
            self.min_tie[cls] = heap[0]

    def _activate(self, cls: int) -> None:
        self._pos[cls] = self._n_active
        self._active[self._n_active] = cls
        self._n_active += 1

    def _deactivate(self, cls: int) -> None:
        pos = int(self._pos[cls])
        last = int(self._active[self._n_active - 1])
        self._active[pos] = last
        self._pos[last] = pos
        self._pos[cls] = -1
        self._n_active -= 1

    # --- choice --------------------------------------------------------------------------------------------------

    def pick(self, ids: IntArray, scores: FloatArray) -> int | None:
        """The best class among ``ids`` (highest score, then the smallest tie key), or None when every score is
        -inf. ``scores[k]`` belongs to ``ids[k]``."""
        if not len(ids):
            return None
        top = scores.max()
        if top == -np.inf:
            return None
        tied = np.flatnonzero(scores == top)
        if len(tied) == 1:
            return int(ids[tied[0]])
        cand = ids[tied]
        return int(cand[np.argmin(self.min_tie[cand])])
