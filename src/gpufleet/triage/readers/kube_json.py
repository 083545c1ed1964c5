"""Kubernetes objects as kubectl prints them in JSON (`kubectl get node|pod NAME -o json`), read even when the
paste is cut short: nesting checked before the recursive parser runs, and a cut document closed at its last
complete member with what it closes marked (CUT), so a missing field is not taken as absent."""

from __future__ import annotations

import json
import re
from typing import Any

from gpufleet.errors import ParseError
from gpufleet.triage.report import TriageReport

CUT = "\x00cut"  # marks an object or list the input ended inside
MAX_DEPTH = (
    64  # a Node or Pod is nested about 8 deep; deeper is not kubectl's output (and would exhaust a recursive parser)
)


def nesting(text: str) -> tuple[int, int]:
    """The deepest nesting of brackets outside strings (stopping past MAX_DEPTH), and how many stay open at the end:
    checked before a recursive parser runs, and to tell JSON cut short from JSON that is wrong."""
    depth = deepest = 0
    for m in re.finditer(r'"(?:[^"\\]|\\.)*"|[\[{]|[\]}]', text):
        token = m.group()
        if token in "[{":
            depth += 1
            deepest = max(deepest, depth)
            if depth > MAX_DEPTH:
                break
        elif token in "]}":
            depth = max(0, depth - 1)
    return deepest, depth


def repaired(text: str) -> Any:
    """JSON cut short, closed at its last complete member, each object and list it closes marked with CUT (so what
    is missing from them is not taken as absent): what it held up to there, or None."""
    closers = {"{": ', "\\u0000cut": true}', "[": ', "\\u0000cut"]'}
    stack: list[str] = []
    cut = None
    for m in re.finditer(r'"(?:[^"\\]|\\.)*"|[\[\]{},]', text):
        token = m.group()
        if token in "[{":
            stack.append(closers[token])
        elif token in "]}":
            if stack:
                stack.pop()
        elif token == "," and stack:
            cut = (m.start(), "".join(reversed(stack)))
    if cut is None:
        return None
    try:
        return json.loads(text[: cut[0]] + cut[1])
    except (ValueError, RecursionError):
        return None


def load_json(text: str, report: TriageReport, kind: str) -> Any:
    """The first JSON object in `text` (a `kind` as kubectl prints it); a document cut short is repaired, marked
    incomplete on `report` and said in its notes."""
    start = text.find("{")
    if start < 0:
        raise ParseError(
            "no JSON object in the input", fix=f"give the output of `kubectl get {kind.lower()} NAME -o json`"
        )
    body = text[start:]
    deepest, still_open = nesting(body)
    if deepest > MAX_DEPTH:
        raise ParseError(f"the JSON nests deeper than {MAX_DEPTH} levels: not a {kind} as kubectl prints it")
    try:
        value, _ = json.JSONDecoder().raw_decode(body)
        return value
    except RecursionError:
        raise ParseError("the JSON nests too deeply to read") from None
    except ValueError as exc:
        if not still_open:  # every bracket closed, yet not JSON
            raise ParseError(f"not valid JSON: {str(exc)[:200]}") from None
    report.complete = False  # the text ends inside the JSON
    report.notes.append("the JSON ends before its last closing bracket: input ends mid-record")
    partial = repaired(body)
    if partial is None:
        raise ParseError("the JSON is cut short before a single complete field")
    return partial
