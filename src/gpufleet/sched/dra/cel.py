"""CEL device selectors, evaluated with cel-python plus the Kubernetes CEL libraries DRA expressions use.

Kubernetes adds to CEL a `quantity` type (k8s.io/apiserver/pkg/cel/library/quantity.go: `quantity()`,
`isQuantity()`, `compareTo`, `isGreaterThan`, `isLessThan`, `add`, `sub`, `isInteger`, `asInteger`,
`asApproximateFloat`, `sign`), a `semver` type for version attributes, and the cel-go string extensions
(`lowerAscii`, `upperAscii`, `trim`, `replace`, `split`, `join`, `indexOf`, `lastIndexOf`, `substring`). They are
registered here as CEL extension functions; the expression sees `device.driver`, `device.attributes[domain].name`,
`device.capacity[domain].name` (a quantity) and `device.allowMultipleAllocations`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from functools import cache, total_ordering
from typing import Any

import celpy
from celpy import celtypes
from celpy.evaluation import CELEvalError

from gpufleet.errors import UserError

_QUANTITY = re.compile(r"^([+-]?)(\d+\.?\d*|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?\d+)?$")
_SUFFIX: dict[str, int | Fraction] = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": 1,
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
}  # fmt: skip


@total_ordering
class Quantity:
    """A Kubernetes resource quantity, exact (a rational number), comparable across suffixes: 1Gi > 1G."""

    __slots__ = ("text", "value")

    def __init__(self, text: str) -> None:
        match = _QUANTITY.match(text.strip())
        if not match:
            raise ValueError(f"quantities must match the regular expression '{_QUANTITY.pattern}': {text!r}")
        sign, number, suffix = match.group(1), match.group(2), match.group(3) or ""
        scale = Fraction(10) ** int(suffix[1:]) if suffix[:1] in ("e", "E") else Fraction(_SUFFIX[suffix])
        value = Fraction(number) * scale
        self.value = -value if sign == "-" else value
        self.text = text.strip()

    @classmethod
    def of(cls, value: Fraction | int) -> Quantity:
        q = cls("0")
        q.value = Fraction(value)
        q.text = str(q.value) if q.value.denominator == 1 else f"{float(q.value)}"
        return q

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quantity) and self.value == other.value

    def __lt__(self, other: Quantity) -> bool:
        return self.value < other.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return f"quantity({self.text!r})"


@total_ordering
class Semver:
    """A semantic version as DRA version attributes carry it (major.minor.patch[-pre])."""

    __slots__ = ("major", "minor", "patch", "pre", "text")
    _RE = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$")

    def __init__(self, text: str) -> None:
        match = self._RE.match(text)
        if not match:
            raise ValueError(f"{text!r} is not a semantic version (major.minor.patch)")
        self.major, self.minor, self.patch = (int(match.group(i)) for i in (1, 2, 3))
        self.pre = match.group(4) or ""
        self.text = text

    def _key(self) -> tuple[int, int, int, int, str]:
        return (self.major, self.minor, self.patch, 0 if self.pre else 1, self.pre)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Semver) and self._key() == other._key()

    def __lt__(self, other: Semver) -> bool:
        return self._key() < other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"semver({self.text!r})"


def _err(message: str) -> CELEvalError:
    return CELEvalError(message, ValueError, None)


def _quantity(text: Any) -> Any:
    try:
        return Quantity(str(text))
    except ValueError as exc:
        return _err(str(exc))


def _is_quantity(text: Any) -> celtypes.BoolType:
    return celtypes.BoolType(_QUANTITY.match(str(text).strip()) is not None)


def _semver(text: Any) -> Any:
    try:
        return Semver(str(text))
    except ValueError as exc:
        return _err(str(exc))


def _is_semver(text: Any) -> celtypes.BoolType:
    return celtypes.BoolType(Semver._RE.match(str(text)) is not None)


def _ordered(a: Any, b: Any) -> tuple[Any, Any] | None:
    if isinstance(a, Quantity) and isinstance(b, Quantity):
        return a, b
    if isinstance(a, Semver) and isinstance(b, Semver):
        return a, b
    return None


def _compare_to(a: Any, b: Any) -> Any:
    pair = _ordered(a, b)
    if pair is None:
        return _err(f"compareTo: no such overload for {type(a).__name__} and {type(b).__name__}")
    return celtypes.IntType((pair[0] > pair[1]) - (pair[0] < pair[1]))


def _greater(a: Any, b: Any) -> Any:
    pair = _ordered(a, b)
    return _err("isGreaterThan: no such overload") if pair is None else celtypes.BoolType(pair[0] > pair[1])


def _less(a: Any, b: Any) -> Any:
    pair = _ordered(a, b)
    return _err("isLessThan: no such overload") if pair is None else celtypes.BoolType(pair[0] < pair[1])


def _as_quantity(v: Any) -> Quantity | None:
    if isinstance(v, Quantity):
        return v
    if isinstance(v, int) and not isinstance(v, bool):
        return Quantity.of(int(v))
    return None


def _add(a: Any, b: Any) -> Any:
    qa, qb = _as_quantity(a), _as_quantity(b)
    return _err("add: no such overload") if qa is None or qb is None else Quantity.of(qa.value + qb.value)


def _sub(a: Any, b: Any) -> Any:
    qa, qb = _as_quantity(a), _as_quantity(b)
    return _err("sub: no such overload") if qa is None or qb is None else Quantity.of(qa.value - qb.value)


def _is_integer(q: Any) -> Any:
    if not isinstance(q, Quantity):
        return _err("isInteger: no such overload")
    return celtypes.BoolType(q.value.denominator == 1 and -(2**63) <= q.value < 2**63)


def _as_integer(q: Any) -> Any:
    if not isinstance(q, Quantity) or q.value.denominator != 1:
        return _err("cannot convert value to integer")
    return celtypes.IntType(int(q.value))


def _as_float(q: Any) -> Any:
    return _err("asApproximateFloat: no such overload") if not isinstance(q, Quantity) else celtypes.DoubleType(q.value)


def _sign(q: Any) -> Any:
    if not isinstance(q, Quantity):
        return _err("sign: no such overload")
    return celtypes.IntType((q.value > 0) - (q.value < 0))


def _version_part(name: str) -> Any:
    def part(v: Any) -> Any:
        return celtypes.IntType(getattr(v, name)) if isinstance(v, Semver) else _err(f"{name}: no such overload")

    return part


def _substring(s: Any, start: Any, end: Any = None) -> Any:
    stop = len(s) if end is None else int(end)
    if not 0 <= int(start) <= stop <= len(s):
        return _err(f"substring: index out of range [{start}, {stop}) for length {len(s)}")
    return celtypes.StringType(str(s)[int(start) : stop])


def _index_of(s: Any, sub: Any, start: Any = 0) -> celtypes.IntType:
    return celtypes.IntType(str(s).find(str(sub), int(start)))


def _split(s: Any, sep: Any, limit: Any = -1) -> celtypes.ListType:
    n = int(limit)
    if n == 0:
        return celtypes.ListType([])
    parts = str(s).split(str(sep), n - 1 if n > 0 else -1)
    return celtypes.ListType([celtypes.StringType(p) for p in parts])


def _join(items: Any, sep: Any = "") -> celtypes.StringType:
    return celtypes.StringType(str(sep).join(str(i) for i in items))


FUNCTIONS: dict[str, Any] = {
    "quantity": _quantity,
    "isQuantity": _is_quantity,
    "semver": _semver,
    "isSemver": _is_semver,
    "compareTo": _compare_to,
    "isGreaterThan": _greater,
    "isLessThan": _less,
    "add": _add,
    "sub": _sub,
    "isInteger": _is_integer,
    "asInteger": _as_integer,
    "asApproximateFloat": _as_float,
    "sign": _sign,
    "major": _version_part("major"),
    "minor": _version_part("minor"),
    "patch": _version_part("patch"),
    "lowerAscii": lambda s: celtypes.StringType(str(s).lower()),
    "upperAscii": lambda s: celtypes.StringType(str(s).upper()),
    "trim": lambda s: celtypes.StringType(str(s).strip()),
    "replace": lambda s, old, new, n=-1: celtypes.StringType(str(s).replace(str(old), str(new), int(n))),
    "split": _split,
    "join": _join,
    "indexOf": _index_of,
    "lastIndexOf": lambda s, sub: celtypes.IntType(str(s).rfind(str(sub))),
    "substring": _substring,
}


@dataclass(frozen=True)
class Selector:
    """A compiled CEL selector; `matches(device)` is True, False, or raises a UserError on a runtime error."""

    expression: str
    program: Any

    def matches(self, device: celtypes.MapType, device_name: str) -> bool:
        try:
            result = self.program.evaluate({"device": device})
        except CELEvalError as exc:
            raise _runtime_error(self.expression, device_name, exc) from None
        if isinstance(result, CELEvalError):
            raise _runtime_error(self.expression, device_name, result)
        if not isinstance(result, celtypes.BoolType):
            raise UserError(
                f"CEL selector {self.expression!r} returned {type(result).__name__}, not bool",
                fix="a selector must evaluate to true or false",
            )
        return bool(result)


def _runtime_error(expression: str, device: str, exc: Exception) -> UserError:
    detail = exc.args[0] if exc.args else str(exc)
    return UserError(
        f"CEL runtime error while evaluating {expression!r} for device {device}: {detail}",
        fix="guard optional attributes with `'name' in device.attributes[\"domain\"]`",
    )


@cache
def _environment() -> celpy.Environment:
    return celpy.Environment()


@cache
def compile_selector(expression: str) -> Selector:
    """Parse a CEL expression once; a syntax error is a UserError naming the expression and the parse error."""
    env = _environment()
    try:
        ast = env.compile(expression)
    except celpy.CELParseError as exc:
        detail = _parse_detail(expression, exc)
        raise UserError(
            f"CEL selector {expression!r} does not parse: {detail}",
            fix='check the expression syntax (e.g. device.attributes["gpu.nvidia.com"].productName == "...")',
        ) from None
    return Selector(expression, env.program(ast, functions=FUNCTIONS))


def _parse_detail(expression: str, exc: celpy.CELParseError) -> str:
    if not exc.line or not exc.column:
        return "syntax error: " + " ".join(str(exc).split())
    lines = expression.splitlines() or [""]
    near = lines[exc.line - 1][exc.column - 1 :][:24].strip() if exc.line <= len(lines) else ""
    where = f"near {near!r}" if near else "at the end of the expression"
    return f"syntax error at line {exc.line}, column {exc.column}, {where}"


def attribute_value(kind: str, value: Any) -> Any:
    """A ResourceSlice attribute (int/bool/string/version) as the CEL value DRA exposes."""
    if kind == "int":
        return celtypes.IntType(value)
    if kind == "bool":
        return celtypes.BoolType(value)
    if kind == "version":
        return Semver(value)
    return celtypes.StringType(value)


class _DomainMap(celtypes.MapType):
    """`device.attributes[domain]` for a domain the device lacks is an empty map, as in Kubernetes."""

    def __getitem__(self, key: Any) -> Any:
        if key not in self:
            return celtypes.MapType({})
        return super().__getitem__(key)


def device_input(
    driver: str,
    attributes: dict[str, dict[str, Any]],
    capacity: dict[str, dict[str, Quantity]],
    allow_multiple_allocations: bool = False,
) -> celtypes.MapType:
    """The `device` variable: attributes and capacity grouped by domain (qualified names split at '/')."""
    attrs = _DomainMap({celtypes.StringType(d): celtypes.MapType(dict(v)) for d, v in attributes.items()})
    caps = _DomainMap({celtypes.StringType(d): celtypes.MapType(dict(v)) for d, v in capacity.items()})
    return celtypes.MapType(
        {
            celtypes.StringType("driver"): celtypes.StringType(driver),
            celtypes.StringType("attributes"): attrs,
            celtypes.StringType("capacity"): caps,
            celtypes.StringType("allowMultipleAllocations"): celtypes.BoolType(allow_multiple_allocations),
        }
    )
