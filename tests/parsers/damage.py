"""Damaged copies of a capture, for the parsers' fuzz tests: cuts, inserted separators and junk, truncation."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence

JUNK = ("|", ":", ",", " ", "\n", "\t", "#", "0x", "-", "x", "\x00", "N/A", "[", "]")


def damaged(text: str, seed: str, copies: int, junk: Sequence[str] = JUNK) -> Iterator[str]:
    """`copies` damaged versions of `text`, the same ones every run for the same seed."""
    rng = random.Random(seed)
    for _ in range(copies):
        chars = list(text)
        for _ in range(rng.randint(1, 8)):
            if not chars:
                break
            at = rng.randrange(len(chars))
            action = rng.random()
            if action < 0.4:
                del chars[at : at + rng.randint(1, 20)]
            elif action < 0.8:
                chars.insert(at, rng.choice(junk))
            else:
                chars = chars[:at]  # cut short
        yield "".join(chars)
