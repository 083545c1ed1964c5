"""Node classes: moves keep each class's members and tie-break winner right; picks follow score then tie key."""

from __future__ import annotations

import numpy as np
import pytest

from gpufleet.sched.engine.classes import NodeClasses


def brute_first(classes: NodeClasses, cls: int) -> int:
    return min(classes.members(cls), key=lambda n: int(classes.tie[n]))


def test_random_moves_keep_members_and_winners_exact() -> None:
    rng = np.random.default_rng(7)
    n = 60
    classes = NodeClasses(rng.permutation(n))
    for node in range(n):
        classes.move(node, ("s", 0))
    for _ in range(3000):
        classes.move(int(rng.integers(n)), ("s", int(rng.integers(6))))
        active = set(classes.active().tolist())
        assert active == {c for c in range(len(classes)) if classes.size(c)}
        for c in active:
            assert classes.first(c) == brute_first(classes, c)
            assert all(classes.node_class[m] == c for m in classes.members(c))
    assert sum(classes.size(c) for c in range(len(classes))) == n


def test_a_node_can_return_to_a_class_it_left() -> None:
    classes = NodeClasses([2, 1, 0])
    for node in range(3):
        classes.move(node, "a")
    assert classes.first(0) == 2  # tie key 0
    classes.move(2, "b")
    assert classes.first(0) == 1
    classes.move(2, "a")
    assert classes.first(0) == 2
    classes.move(1, "b")
    classes.move(2, "b")
    assert classes.first(0) == 0 and classes.size(0) == 1
    assert classes.first(1) == 2


def test_pick_takes_the_highest_score_then_the_smallest_tie_key() -> None:
    classes = NodeClasses([5, 3, 9, 1])
    for node, key in enumerate(["a", "b", "c", "c"]):
        classes.move(node, key)
    ids = classes.active()
    scores = np.array([7.0 if k in ("b", "c") else 1.0 for k in (classes.keys[i] for i in ids)])
    best = classes.pick(ids, scores)
    assert best is not None and classes.first(best) == 3  # "b" and "c" tie at 7: node 3 has tie key 1
    assert classes.pick(ids, np.full(len(ids), -np.inf)) is None
    assert classes.pick(ids[:0], scores[:0]) is None


def test_tie_keys_must_be_distinct() -> None:
    with pytest.raises(ValueError, match="distinct"):
        NodeClasses([1, 1])


def test_ordered_lists_members_by_tie_key_after_random_moves() -> None:
    rng = np.random.default_rng(11)
    n = 50
    classes = NodeClasses(rng.permutation(n))
    for node in range(n):
        classes.move(node, 0)
    for _ in range(2000):
        classes.move(int(rng.integers(n)), int(rng.integers(4)))
        for c in classes.active().tolist():
            want = sorted(classes.members(c), key=lambda m: int(classes.tie[m]))
            assert list(classes.ordered(c)) == want
