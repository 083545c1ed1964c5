"""Slurm's hostlist syntax, written: ['gpu-01', 'gpu-02', 'gpu-03', 'gpu-07'] -> 'gpu-[01-03,07]'.

The reading side is `expand_hostlist` in the client. Slurm ranges only a name's trailing number ('node[01-03]-ib'
is refused), and a range prints its numbers at the width of its first ('[08-10]': node08 node09 node10, '[9-10]':
node9 node10), so a number joins the range before it only when it prints back the same at that width: 'node9,node10'
is 'node[9-10]', 'node08,node9' is 'node[08,9]'. The result is what `scontrol show hostnames` expands back to the
same names, in the order given by prefix then number (tests check it against the real scontrol).
"""

from __future__ import annotations

import re

_TRAILING_NUMBER = re.compile(r"^(?P<prefix>.*?)(?P<number>\d+)$")
_NOT_IN_A_NAME = re.compile(r"[\[\],\s#=]")


def compress_hostlist(names: list[str]) -> str:
    """The shortest Slurm hostlist this function knows for `names` (repeats dropped). A name holding a character
    the syntax uses ([ ] , whitespace # =) is a ValueError: it cannot be written in a hostlist."""
    by_prefix: dict[str, list[str]] = {}
    plain: list[str] = []
    for name in dict.fromkeys(names):
        if not name or _NOT_IN_A_NAME.search(name):
            raise ValueError(f"{name!r} cannot be written in a Slurm hostlist")
        match = _TRAILING_NUMBER.match(name)
        if match is None:
            plain.append(name)
        else:
            by_prefix.setdefault(match.group("prefix"), []).append(match.group("number"))
    parts: dict[str, str] = {name: name for name in plain}
    for prefix, numbers in by_prefix.items():
        numbers.sort(key=lambda text: (int(text), len(text)))
        ranges: list[tuple[str, str]] = []  # (first, last) as written
        for text in numbers:
            if ranges:
                first, last = ranges[-1]
                if int(text) == int(last) + 1 and f"{int(text):0{len(first)}d}" == text:
                    ranges[-1] = (first, text)
                    continue
            ranges.append((text, text))
        if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
            parts[prefix + ranges[0][0]] = prefix + ranges[0][0]
            continue
        body = ",".join(first if first == last else f"{first}-{last}" for first, last in ranges)
        parts[prefix + numbers[0]] = f"{prefix}[{body}]"
    return ",".join(parts[key] for key in sorted(parts, key=_natural))


def _natural(text: str) -> tuple[object, ...]:
    return tuple((0, int(part), part) if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", text))
