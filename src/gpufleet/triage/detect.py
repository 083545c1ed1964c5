"""Which tool printed a text, told by its content (never by a file name): each format has lines only it prints,
scored over the first lines of the cleaned input; the best score wins, and nothing recognisable is `None`."""

from __future__ import annotations

import re
from collections.abc import Iterable
from itertools import islice

from gpufleet.triage.formats import REGISTRY
from gpufleet.triage.formats.registry import Sign

SAMPLE_LINES = 400
SIGN_CHARS = 1024  # a sign is in a line's first characters; a longer line is not scanned whole by every pattern

# format -> (pattern, weight); a pattern scores once however often it matches. The signs are each format's own, in
# its descriptor (triage/formats/); a format without signs (a syslog's link events) is told as the format it is
# judged as. In the registry's order: a tie goes to the first listed.
SIGNS: dict[str, tuple[Sign, ...]] = {fmt.name: fmt.signs for fmt in REGISTRY.detected()}
_COMPILED = {fmt: tuple((re.compile(p), w) for p, w in signs) for fmt, signs in SIGNS.items()}
MIN_SCORE = 6  # below this, nothing is sure enough to name

FORMATS = tuple(SIGNS)  # the formats told by their own signs, in tie-break order


class Detector:
    """Scores lines as they come, each line looked at once: a sign counts the first time any line shows it."""

    def __init__(self) -> None:
        self._unseen = [(fmt, pattern, w) for fmt, signs in _COMPILED.items() for pattern, w in signs]
        self.scores: dict[str, int] = {}

    def feed(self, line: str) -> None:
        line = line[:SIGN_CHARS]
        hits = [sign for sign in self._unseen if sign[1].search(line)]
        for fmt, _, w in hits:
            self.scores[fmt] = self.scores.get(fmt, 0) + w
        if hits:
            self._unseen = [sign for sign in self._unseen if sign not in hits]

    def best(self) -> str | None:
        """The format scoring highest, or None when none is sure enough."""
        if not self.scores:
            return None
        fmt = max((f for f in FORMATS if f in self.scores), key=self.scores.__getitem__)  # a tie: the first listed
        return fmt if self.scores[fmt] >= MIN_SCORE else None


def detect(lines: Iterable[str]) -> str | None:
    """The format of a text from its first SAMPLE_LINES lines, or None when no format is sure enough."""
    detector = Detector()
    for line in islice(lines, SAMPLE_LINES):
        detector.feed(line)
    return detector.best()
