"""NCCL_ALGO / NCCL_PROTO: NCCL's ``parseList`` syntax (tuning.cc), e.g. ``"^LL128;allreduce:tree,ring"``.

The first entry may omit the function prefix and applies to every function; later entries must name one.
A leading ``^`` disables the listed elements and enables the rest. Names are case-insensitive.
"""

from __future__ import annotations

from gpufleet.errors import UserError
from gpufleet.nccl.constants import ALGOS, PROTOS

FUNCS = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")
COLL_TO_FUNC = {f.lower(): f for f in FUNCS}


def parse_list(text: str, elems: tuple[str, ...], var: str) -> dict[str, dict[str, bool]]:
    """Enablement per function and element after ``text``; a UserError where NCCL's init would fail."""
    table = {f: dict.fromkeys(elems, True) for f in FUNCS}
    lower = {e.lower(): e for e in elems}
    funcs = {f.lower(): f for f in FUNCS}
    for i, token in enumerate(t for t in text.split(";") if t):
        prefix, sep, elem_list = token.partition(":")
        if not sep:
            if i != 0:
                raise UserError(
                    f"{var}={text!r}: every entry but the first needs a function prefix",
                    fix="write e.g. ^LL128;allreduce:tree,ring",
                )
            prefix, elem_list = "", token
        disable = elem_list.startswith("^")
        names = [n.strip() for n in elem_list.lstrip("^").split(",") if n.strip()]
        if prefix.strip():
            func = funcs.get(prefix.strip().lower())
            if func is None:
                raise UserError(f"{var}={text!r}: unknown function {prefix!r}", fix=f"use one of {', '.join(FUNCS)}")
            targets: tuple[str, ...] = (func,)
        else:
            targets = FUNCS
        for f in targets:
            for e in elems:
                table[f][e] = disable
            for name in names:
                key = lower.get(name.lower())
                if key is None:
                    raise UserError(
                        f"{var}={text!r}: unknown element {name!r} (NCCL fails init with invalid usage)",
                        fix=f"use {', '.join(elems)}",
                    )
                table[f][key] = not disable
    return table


def algo_enabled(text: str | None, coll: str, algo: str) -> bool:
    if not text:
        return True
    return parse_list(text, ALGOS, "NCCL_ALGO")[COLL_TO_FUNC[coll]][algo]


def proto_setting(text: str | None, coll: str, proto: str) -> int:
    """1 on, 0 off, 2 = NCCL's default (LL128 then follows its path rules)."""
    if not text:
        return 2 if proto == "LL128" else 1
    return int(parse_list(text, PROTOS, "NCCL_PROTO")[COLL_TO_FUNC[coll]][proto])
