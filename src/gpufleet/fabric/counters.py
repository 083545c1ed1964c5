"""Port counters into deltas, poll after poll, for every port of a fabric at once.

`CounterTracker` keeps each port's and counter's last value, the width it was read at and when. Each poll's
`Readings` (from perfquery, ibqueryerrors, sysfs, or a fabric report) become `Deltas`: what each counter counted
since the port's last reading, and over how long.

- A value lower than the last one is a reset: someone cleared the counters (`perfquery -R`, `ibqueryerrors -k`,
  OpenSM's PerfMgr at about 3/4 full), and the delta is the new value, counted since the clear. A 64-bit counter
  whose last value was in the top of its range has wrapped instead: the delta is taken modulo 2^64.
- A 4/8/16/32-bit PortCounters value at its maximum is saturated: those counters stop, they do not wrap, so the
  delta is only a lower bound and is flagged. The fix is to clear the counters or read the 64-bit ones.
- A value read at another width than the last one (PortCounters one poll, PortCountersExtended the next) is
  another register: it starts a new baseline, with no delta.
- A port a full poll left out keeps its history and has no delta (not a zero one); after `silent_after` polls in
  a row it is reported silent. ibqueryerrors lists only ports with errors: a port it leaves out answered, with its
  error counters where they were (carried, delta 0).

Everything is held in numpy arrays indexed by a port table: a poll of 100,000 ports of 15 counters takes about a
tenth of a second.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from typing import TYPE_CHECKING, Literal

import numpy as np

from gpufleet.catalog.ib_counters import ib_counter_name, load_ib_counters
from gpufleet.errors import UserError
from gpufleet.fabric.graph import End, FabricGraph, hca_name
from gpufleet.model.fabric import normalise_guid

if TYPE_CHECKING:  # the readers' types only: the control plane uses this module and never reads a node
    from gpufleet.parsers.infiniband.diags import PortCounters, QueryErrorsReport

LeftOut = Literal["silent", "unchanged", "unknown"]

INFERRED = 0x80  # in `Readings.bits`: the width is the PortCounters one by default, 64 once the counter showed it
_WIDTH = 0x7F
_WRAP_ZONE = 1 << 60  # a 64-bit counter this close to its top that reads lower has wrapped, not been cleared
_WRAP_FROM = np.uint64((1 << 64) - _WRAP_ZONE)
_WIDTHS = (4, 8, 16, 32, 64)
_MAX_BY_BITS = np.array([(1 << b) - 1 if b in _WIDTHS else 0 for b in range(128)], dtype=np.uint64)  # by width
_VALID_BITS = np.array([0, *_WIDTHS, *(b | INFERRED for b in _WIDTHS[:-1])], dtype=np.uint8)
CLEAR_COUNTERS_FIX = (
    "clear the port's counters (`perfquery -R <lid> <port>`, or let OpenSM's PerfMgr reset them) or read the 64-bit "
    "ones (`perfquery -x`)"
)


# --- counter names and widths -------------------------------------------------------------------------------------


@cache
def counter_columns() -> tuple[str, ...]:
    """The counters the tracker keeps: the catalog's PMA counters, in its order."""
    return tuple(load_ib_counters())


@cache
def _sysfs_names() -> dict[str, str]:
    return {c.sysfs: c.name for c in load_ib_counters().values()}


@cache
def _traffic() -> frozenset[str]:
    return frozenset(c.name for c in load_ib_counters().values() if c.kind == "traffic")


def resolve_counter(name: str) -> tuple[str, bool] | None:
    """(PMA name, whether the name itself says 64 bits) for a counter name any source prints: perfquery's and
    ibqueryerrors' old and new names (`XmtDiscards`, `PortXmitDiscards`), sysfs file names (`port_xmit_discards`)
    and UFM's extended names (`PortRcvPktsExtended`, `LinkDownedCounterExt`); None for one the catalog lacks."""
    pma = ib_counter_name(name) or _sysfs_names().get(name)
    if pma is not None:
        return pma, False
    for suffix in ("Extended", "Ext"):
        if name.endswith(suffix) and len(name) > len(suffix):
            pma = ib_counter_name(name[: -len(suffix)])
            if pma is not None:
                return pma, True
    return None


def _basic_bits(pma: str) -> int:
    return load_ib_counters()[pma].bits


# --- one poll's values ----------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Readings:
    """One poll's counter values, a row per port and a column per counter.

    `bits` is the width each value was read at (4, 8, 16, 32 or 64; 0: not read; with INFERRED set: the
    PortCounters width unless the tracker has seen the counter at 64 bits). `left_out` says what a port tracked
    before and absent here means: "silent" (a full poll: it did not answer), "unchanged" (the source lists only
    ports with errors: its counters in `covers` kept their values) or "unknown" (a partial poll: it was not asked).
    `start_at_zero`: with "unchanged", a port listed for the first time counted from zero since the last poll
    (ibqueryerrors with no thresholds lists every port whose error counters are not all zero)."""

    ports: list[End]
    counters: tuple[str, ...]
    values: np.ndarray  # uint64, ports x counters
    bits: np.ndarray  # uint8, ports x counters
    left_out: LeftOut = "silent"
    covers: frozenset[str] | None = None  # for "unchanged": the counters the source checks (None: the error ones)
    start_at_zero: bool = False
    skipped: list[str] = field(default_factory=list)  # what could not be placed (a LID no port has), to show

    def __post_init__(self) -> None:
        shape = (len(self.ports), len(self.counters))
        if self.values.shape != shape or self.bits.shape != shape:
            raise UserError(
                f"counter readings of {shape[0]} ports and {shape[1]} counters hold values shaped "
                f"{self.values.shape} and widths shaped {self.bits.shape}",
                fix="give one value and one width per port and counter",
            )
        if self.left_out not in ("silent", "unchanged", "unknown"):
            raise UserError(f"left_out {self.left_out!r} is not silent, unchanged or unknown")
        unknown = [n for n in self.counters if n not in load_ib_counters()]
        if unknown:
            raise UserError(
                f"counter {unknown[0]!r} is not a PMA counter name", fix="use the catalog's names (resolve_counter)"
            )
        if len(set(self.counters)) != len(self.counters):
            raise UserError("a counter is listed twice in one poll's readings")
        if self.values.dtype.kind in "if" and self.values.size:
            whole = self.values >= 0
            if self.values.dtype.kind == "f":
                whole &= np.isfinite(self.values) & (self.values == np.floor(self.values))
            if not whole.all():
                r, c = (int(i[0]) for i in np.nonzero(~whole))
                raise UserError(
                    f"counter {self.counters[c]} of {self.ports[r]} is {self.values[r, c]}: counter values are whole "
                    "numbers from 0 to 2^64-1"
                )
        self.values = self.values.astype(np.uint64, copy=False)
        self.bits = self.bits.astype(np.uint8, copy=False)
        bad = ~np.isin(self.bits, _VALID_BITS)
        if bad.any():
            r, c = (int(i[0]) for i in np.nonzero(bad))
            raise UserError(
                f"counter {self.counters[c]} of {self.ports[r]}: width {int(self.bits[r, c])} is not 4, 8, 16, 32 "
                "or 64 bits"
            )

    def __len__(self) -> int:
        return len(self.ports)

    @classmethod
    def from_rows(
        cls,
        ports: Sequence[End],
        names: Sequence[str],
        rows: Sequence[Sequence[int | None]],
        *,
        widths: Mapping[str, int] | None = None,
        left_out: LeftOut = "silent",
    ) -> Readings:
        """A row of values per port, aligned with `names` (None: not read), as a fabric report carries them.
        Names are resolved to PMA names (old and sysfs names too); ones the catalog lacks are left out. A value's
        width is `widths[name]` when given, 64 for a name that says so (`...Extended`), else the PortCounters width
        (64 once the value shows more)."""
        if len(rows) != len(ports):
            raise UserError(f"{len(rows)} rows of counter values for {len(ports)} ports")
        width = len(names)
        resolved: list[tuple[int, str, int]] = []  # (column in rows, PMA name, bits with INFERRED)
        for i, name in enumerate(names):
            found = resolve_counter(name)
            if found is None:
                continue
            pma, says_64 = found
            given = (widths or {}).get(name)
            if given is not None and given not in (4, 8, 16, 32, 64):
                raise UserError(f"counter {name}: width {given} is not 4, 8, 16, 32 or 64 bits")
            resolved.append((i, pma, given if given else 64 if says_64 else _basic_bits(pma) | INFERRED))
        dense: list[Sequence[int | None]] = []
        present: np.ndarray | None = None
        holes: list[int] = []
        for r, row in enumerate(rows):
            if len(row) != width:
                raise UserError(f"counters of {ports[r]} hold {len(row)} values for {width} names")
            if None in row:
                holes.append(r)
                dense.append([0 if v is None else v for v in row])
            else:
                dense.append(row)
        raw = _as_uint64(dense, ports, names, (len(rows), width))
        if holes:
            present = np.ones(raw.shape, dtype=bool)
            for r in holes:
                present[r] = [v is not None for v in rows[r]]
        return _collapse(list(ports), raw, present, resolved, left_out)

    @classmethod
    def from_mapping(
        cls,
        ports: Mapping[End, Mapping[str, int]],
        *,
        widths: Mapping[str, int] | None = None,
        left_out: LeftOut = "silent",
    ) -> Readings:
        """Each port's counters by name (any name `resolve_counter` knows); see `from_rows` for the widths."""
        # most ports list the same counters in the same order: their values are a row as they are
        first = tuple(next(iter(ports.values()), {}))
        names = dict.fromkeys(first)
        rows: list[list[int | None]] = []
        odd: list[int] = []
        for i, values in enumerate(ports.values()):
            if tuple(values) == first:
                rows.append(list(values.values()))
            else:
                names.update(dict.fromkeys(values))
                odd.append(i)
                rows.append([])
        order = tuple(names)
        if odd:
            padding: list[int | None] = [None] * (len(order) - len(first))
            listed = list(ports.values())
            for row in rows:
                row += padding
            for i in odd:
                rows[i] = [listed[i].get(n) for n in order]
        return cls.from_rows(list(ports), order, rows, widths=widths, left_out=left_out)

    @classmethod
    def combine(cls, parts: Iterable[Readings], *, left_out: LeftOut = "silent") -> Readings:
        """Batches of one poll as one (a perfquery sweep run switch by switch). A port in several batches keeps,
        per counter, the widest reading: a 64-bit value wins over a PortCounters one."""
        merged: dict[End, dict[str, tuple[int, int]]] = {}
        skipped: list[str] = []
        for part in parts:
            skipped += part.skipped
            for r, end in enumerate(part.ports):
                mine = merged.setdefault(end, {})
                for c, name in enumerate(part.counters):
                    bits = int(part.bits[r, c])
                    if bits and (name not in mine or (bits & _WIDTH) >= (mine[name][1] & _WIDTH)):
                        mine[name] = (int(part.values[r, c]), bits)
        out = _from_cells(merged, left_out=left_out)
        out.skipped = skipped
        return out

    def with_left_out(self, left_out: LeftOut, *, start_at_zero: bool | None = None) -> Readings:
        return replace(
            self,
            left_out=left_out,
            start_at_zero=(left_out == "unchanged") if start_at_zero is None else start_at_zero,
        )

    def as_mapping(self) -> dict[End, dict[str, int]]:
        """Each port's values by PMA name (what was read)."""
        out: dict[End, dict[str, int]] = {}
        for r, end in enumerate(self.ports):
            read = self.bits[r] != 0
            out[end] = {name: int(self.values[r, c]) for c, name in enumerate(self.counters) if read[c]}
        return out


def _as_uint64(
    rows: Sequence[Sequence[int | None]], ports: Sequence[End], names: Sequence[str], shape: tuple[int, int]
) -> np.ndarray:
    if not rows:
        return np.zeros(shape, dtype=np.uint64)
    try:
        return np.array(rows, dtype=np.uint64).reshape(shape)
    except (OverflowError, ValueError, TypeError):
        pass
    for r, row in enumerate(rows):  # find the bad value, to name it
        for c, value in enumerate(row):
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 1 << 64:
                raise UserError(
                    f"counter {names[c]} of {ports[r]} is {value!r}: counter values are whole numbers from 0 to 2^64-1",
                    fix="pass the values as the tools print them",
                ) from None
    raise UserError("counter values are not all whole numbers")


def _collapse(
    ports: list[End],
    raw: np.ndarray,
    present: np.ndarray | None,
    resolved: list[tuple[int, str, int]],
    left_out: LeftOut,
) -> Readings:
    """Raw columns into one column per PMA counter: a name printed twice (old and new spelling) counts once, with
    the widest reading, then the larger value."""
    order: dict[str, list[tuple[int, int]]] = {}
    for column, pma, bits in resolved:
        order.setdefault(pma, []).append((column, bits))
    counters = tuple(order)
    values = np.zeros((len(ports), len(counters)), dtype=np.uint64)
    widths = np.zeros((len(ports), len(counters)), dtype=np.uint8)
    for k, pma in enumerate(counters):
        for column, bits in order[pma]:
            v = raw[:, column]
            b = np.full(len(ports), bits, dtype=np.uint8)
            b[v > _MAX_BY_BITS[bits & _WIDTH]] = 64  # a value its register cannot hold was read at 64 bits
            if present is not None:
                b[~present[:, column]] = 0
            better = (b != 0) & (
                ((b & _WIDTH) > (widths[:, k] & _WIDTH))
                | (((b & _WIDTH) == (widths[:, k] & _WIDTH)) & (v > values[:, k]))
            )
            values[better, k] = v[better]
            widths[better, k] = b[better]
    return Readings(ports, counters, values, widths, left_out=left_out, start_at_zero=left_out == "unchanged")


def _from_cells(cells: Mapping[End, Mapping[str, tuple[int, int]]], *, left_out: LeftOut) -> Readings:
    """Readings from (value, bits) per port and PMA name."""
    counters = tuple(n for n in counter_columns() if any(n in c for c in cells.values()))
    column = {n: i for i, n in enumerate(counters)}
    ports = list(cells)
    values = np.zeros((len(ports), len(counters)), dtype=np.uint64)
    bits = np.zeros((len(ports), len(counters)), dtype=np.uint8)
    for r, end in enumerate(ports):
        for name, (value, width) in cells[end].items():
            if not 0 <= value < 1 << 64:
                raise UserError(f"counter {name} of {end} is {value}: not a value a port counter can hold")
            values[r, column[name]] = value
            bits[r, column[name]] = width
    return Readings(ports, counters, values, bits, left_out=left_out, start_at_zero=left_out == "unchanged")


def _put(cells: dict[str, tuple[int, int]], name: str, value: int, bits: int) -> None:
    """A counter into a port's cells: the widest reading wins, then the larger value."""
    found = resolve_counter(name)
    if found is None:
        return
    if not isinstance(value, int) or not 0 <= value < 1 << 64:
        raise UserError(f"counter {name} is {value!r}: counter values are whole numbers from 0 to 2^64-1")
    pma, says_64 = found
    if says_64 or value > int(_MAX_BY_BITS[bits & _WIDTH]):  # a value its register cannot hold was read at 64 bits
        bits = 64
    earlier = cells.get(pma)
    if earlier is None or (bits & _WIDTH, value) > (earlier[1] & _WIDTH, earlier[0]):
        cells[pma] = (value, bits)


# --- readers' outputs into readings -------------------------------------------------------------------------------


def ends_by_lid(graph: FabricGraph) -> dict[tuple[int, int], End]:
    """(LID, port) -> End, for the tools that address ports by LID (perfquery): a switch's ports share its LID, an
    HCA port has its own."""
    out: dict[tuple[int, int], End] = {}
    for node in graph.switches():
        if node.lid is not None:
            for port in range(node.ports + 1):
                out[(node.lid, port)] = End(node.name, port)
    for link in graph.links:
        for end, lid in ((link.a, link.a_lid), (link.b, link.b_lid)):
            if lid is not None:
                out.setdefault((lid, end.port), end)
    for end in graph.idle_ports:
        idle = graph.nodes.get(end.node)
        if idle is not None and idle.is_switch and idle.lid is not None:
            out.setdefault((idle.lid, end.port), end)
    return out


def readings_from_perfquery(
    blocks: Iterable[PortCounters],
    where: End | Mapping[tuple[int, int], End],
    *,
    left_out: LeftOut = "silent",
) -> Readings:
    """perfquery records (`parse_perfquery`), plain and `-x`, as one poll's readings. `where` is the port they
    are about, or (LID, port) -> End (`ends_by_lid`). PortCounters values have their PMA widths, PortCountersExtended
    ones 64 bits; the 64-bit value of a counter wins over the PortCounters one. Records of the detail attributes
    (`-E`, `-D`) and `-a` sums are not counters of one port and are left out."""
    cells: dict[End, dict[str, tuple[int, int]]] = {}
    skipped: list[str] = []
    for block in blocks:
        if block.attribute not in ("PortCounters", "PortCountersExtended") or block.port == 255:
            continue
        if isinstance(where, End):
            end = where
        else:
            found = where.get((block.lid, block.port)) if block.lid is not None and block.port is not None else None
            if found is None:
                skipped.append(f"{block.where or 'a port'} port {block.port}: not a port of the fabric")
                continue
            end = found
        mine = cells.setdefault(end, {})
        for name, value in block.counters.items():
            pma = resolve_counter(name)
            if pma is None:
                continue
            _put(mine, name, value, 64 if block.extended else _basic_bits(pma[0]))
    out = _from_cells(cells, left_out=left_out)
    out.skipped = skipped
    return out


def _error_counters() -> frozenset[str]:
    return frozenset(c.name for c in load_ib_counters().values() if c.kind != "traffic")


def readings_from_ibqueryerrors(report: QueryErrorsReport, graph: FabricGraph | None = None) -> Readings:
    """ibqueryerrors' ports (`parse_ibqueryerrors`) as one poll's readings. It lists only ports whose error
    counters pass its thresholds, so the others answered with their counters where they were: `left_out` is
    "unchanged" for the counters it checks. Without thresholds (its default is 0) a port listed for the first
    time counted from zero. A port is named through `graph` by its GUID or description, else by its description
    ("dgx-017 mlx5_3" -> "dgx-017/mlx5_3"); `port ALL` sums are left out."""
    names = _guid_names(graph) if graph is not None else {}
    by_description = _description_names(graph) if graph is not None else {}
    cells: dict[End, dict[str, tuple[int, int]]] = {}
    for found in report.ports:
        if found.port is None:
            continue
        node = (
            names.get(normalise_guid(found.guid))
            or names.get(normalise_guid(found.node_guid))
            or by_description.get(found.node)
            or _name_from_description(found.node)
        )
        if not node:
            continue
        mine = cells.setdefault(End(node, found.port), {})
        for name, value in found.counters.items():
            pma = resolve_counter(name)
            if pma is None:
                continue
            _put(mine, name, value, 64 if name in found.wide else _basic_bits(pma[0]) | INFERRED)
    checked = _error_counters() - frozenset(report.suppressed)
    thresholds = any(value > 0 for value in report.thresholds.values())
    out = _from_cells(cells, left_out="unchanged")
    out.covers = checked
    out.start_at_zero = not thresholds
    return out


def _guid_names(graph: FabricGraph) -> dict[str, str]:
    out = {node.guid: node.name for node in graph.nodes.values() if node.guid}
    for link in graph.links:
        for end, guid in ((link.a, link.a_guid), (link.b, link.b_guid)):
            if guid:
                out.setdefault(guid, end.node)
    return out


def _description_names(graph: FabricGraph) -> dict[str, str]:
    seen: dict[str, list[str]] = {}
    for node in graph.nodes.values():
        if node.description:
            seen.setdefault(node.description, []).append(node.name)
    return {description: names[0] for description, names in seen.items() if len(names) == 1}


def _name_from_description(description: str) -> str:
    split = hca_name(description)
    return f"{split[0]}/{split[1]}" if split else description.strip()


def readings_from_sysfs(
    ports: Mapping[End, Mapping[str, int]], *, extended_traffic: bool = True, left_out: LeftOut = "silent"
) -> Readings:
    """Counters as the sysfs reader gives them (PMA names, or the kernel's file names), per port. The kernel reads the
    error counters and PortXmitWait from PortCounters (their PMA widths) and, on an HCA with PortCountersExtended
    (every ConnectX), the data and packet counters at 64 bits."""
    cells: dict[End, dict[str, tuple[int, int]]] = {}
    traffic = _traffic()
    for end, values in ports.items():
        mine = cells.setdefault(end, {})
        for name, value in values.items():
            found = resolve_counter(name)
            if found is None:
                continue
            bits = 64 if extended_traffic and found[0] in traffic else _basic_bits(found[0]) | INFERRED
            _put(mine, name, value, bits)
    return _from_cells(cells, left_out=left_out)


# --- the tracker ----------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Deltas:
    """What one poll counted, for every port the tracker knows (a row each, in `ports` order) and counter.

    `delta` is NaN where there is none: not read this poll, a first reading, a new width, a silent port. Where
    `saturated`, the delta is at least that much. `interval_s` is the time the delta covers."""

    time: float
    ports: tuple[End, ...]
    counters: tuple[str, ...]
    delta: np.ndarray  # float64, ports x counters
    interval_s: np.ndarray  # float64, ports x counters
    saturated: np.ndarray  # bool: the value read is at its width's maximum
    reset: np.ndarray  # bool: the value went down (cleared): the delta counts since the clear
    wrapped: np.ndarray  # bool: a 64-bit counter went past 2^64
    answered: np.ndarray  # bool per port: read this poll, or left out by a source that lists only errors
    missed: np.ndarray  # int per port: full polls in a row that left it out
    silent: np.ndarray  # bool per port: missed at least `silent_after` polls
    _rows: dict[End, int] = field(default_factory=dict, repr=False)

    def column(self, name: str) -> int:
        pma = resolve_counter(name)
        if pma is None or pma[0] not in self.counters:
            raise UserError(f"{name!r} is not a counter the tracker keeps")
        return self.counters.index(pma[0])

    def of(self, name: str) -> np.ndarray:
        """One counter's deltas, a value per port (NaN: none)."""
        return self.delta[:, self.column(name)]

    def rate(self, name: str) -> np.ndarray:
        """One counter's deltas per second (NaN: none, or no time passed)."""
        c = self.column(name)
        interval = self.interval_s[:, c]
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(interval > 0, self.delta[:, c] / interval, np.nan)

    def row(self, end: End) -> int | None:
        if not self._rows:
            self._rows = {e: i for i, e in enumerate(self.ports)}
        return self._rows.get(end)

    def get(self, end: End, name: str) -> float | None:
        """A port's delta of one counter, or None when there is none."""
        r = self.row(end)
        if r is None:
            return None
        value = float(self.delta[r, self.column(name)])
        return None if math.isnan(value) else value

    def for_port(self, end: End) -> dict[str, float]:
        """A port's deltas by counter (those it has)."""
        r = self.row(end)
        if r is None:
            return {}
        return {n: float(v) for n, v in zip(self.counters, self.delta[r], strict=True) if not math.isnan(v)}

    def rates(self, *, include_zero: bool = False) -> dict[End, dict[str, float]]:
        """Per second, per port and counter, over the last poll; zero rates only when asked for."""
        with np.errstate(divide="ignore", invalid="ignore"):
            per_s = np.where(self.interval_s > 0, self.delta / self.interval_s, np.nan)
        keep = np.isfinite(per_s) if include_zero else np.isfinite(per_s) & (per_s != 0)
        out: dict[End, dict[str, float]] = {}
        for r, c in zip(*np.nonzero(keep), strict=True):
            out.setdefault(self.ports[r], {})[self.counters[c]] = float(per_s[r, c])
        return out

    def silent_ports(self) -> list[End]:
        return [self.ports[i] for i in np.flatnonzero(self.silent)]

    def saturated_counters(self, end: End) -> list[str]:
        r = self.row(end)
        return [] if r is None else [n for n, s in zip(self.counters, self.saturated[r], strict=True) if s]


class CounterTracker:
    """Each port's and counter's last reading; `update` once per poll turns the next one into `Deltas`."""

    def __init__(self, *, silent_after: int = 3) -> None:
        if silent_after < 1:
            raise UserError(f"silent_after must be at least 1 poll, not {silent_after}")
        self.silent_after = silent_after
        self.counters = counter_columns()
        self._column = {name: i for i, name in enumerate(self.counters)}
        self._covers_default = np.array([name not in _traffic() for name in self.counters])
        self._ports: list[End] = []
        self._index: dict[End, int] = {}
        width = len(self.counters)
        self._value = np.zeros((0, width), dtype=np.uint64)
        self._bits = np.zeros((0, width), dtype=np.uint8)  # 0: never read
        self._time = np.full((0, width), np.nan)
        self._missed = np.zeros(0, dtype=np.int64)
        self.last_poll: float | None = None

    @property
    def ports(self) -> tuple[End, ...]:
        return tuple(self._ports)

    def __len__(self) -> int:
        return len(self._ports)

    def last(self, end: End) -> dict[str, tuple[int, float]]:
        """A port's last value and the time it was read, per counter."""
        r = self._index.get(end)
        if r is None:
            return {}
        return {
            name: (int(self._value[r, c]), float(self._time[r, c]))
            for c, name in enumerate(self.counters)
            if self._bits[r, c]
        }

    def forget(self, ends: Iterable[End]) -> None:
        """Drop ports that left the fabric (recabled, removed), with their history."""
        gone = {self._index[e] for e in ends if e in self._index}
        if not gone:
            return
        keep = np.array([i not in gone for i in range(len(self._ports))])
        self._ports = [e for i, e in enumerate(self._ports) if i not in gone]
        self._index = {e: i for i, e in enumerate(self._ports)}
        self._value, self._bits = self._value[: len(keep)][keep], self._bits[: len(keep)][keep]
        self._time, self._missed = self._time[: len(keep)][keep], self._missed[: len(keep)][keep]

    def _rows_of(self, ports: Sequence[End]) -> np.ndarray:
        """Each port's row, new ports added at the end (only once the ports are known to be listed once each)."""
        index = self._index
        rows = np.empty(len(ports), dtype=np.int64)
        added: dict[End, int] = {}
        n = len(self._ports)
        for i, end in enumerate(ports):
            r = index.get(end)
            if r is None:
                r = added.get(end)
                if r is None:
                    if not isinstance(end, End):
                        raise UserError(f"{end!r} is not a port (End)")
                    r = added[end] = n + len(added)
            rows[i] = r
        if len(np.unique(rows)) != len(rows):
            twice = next(e for e, k in zip(ports, np.bincount(rows)[rows], strict=True) if k > 1)
            raise UserError(
                f"port {twice} is listed twice in one poll's readings", fix="merge its values first (Readings.combine)"
            )
        if added:
            index.update(added)
            self._ports += added
            self._grow(len(self._ports))
        return rows

    def _grow(self, size: int) -> None:
        have = self._value.shape[0]
        if size <= have:
            return
        extra = max(size, have * 2) - have
        width = len(self.counters)
        self._value = np.vstack([self._value, np.zeros((extra, width), dtype=np.uint64)])
        self._bits = np.vstack([self._bits, np.zeros((extra, width), dtype=np.uint8)])
        self._time = np.vstack([self._time, np.full((extra, width), np.nan)])
        self._missed = np.concatenate([self._missed, np.zeros(extra, dtype=np.int64)])

    def update(
        self,
        time: float,
        readings: Readings | Mapping[End, Mapping[str, int]],
        *,
        complete: bool | None = None,
    ) -> Deltas:
        """This poll's deltas. `complete` says what ports left out of `readings` mean, over its own `left_out`:
        True, a full poll (they did not answer); False, a source that lists only ports with errors (their error
        counters did not move)."""
        if not isinstance(readings, Readings):
            readings = Readings.from_mapping(readings)
        if complete is not None:
            readings = readings.with_left_out("silent" if complete else "unchanged")
        if not isinstance(time, (int, float)) or not math.isfinite(time):
            raise UserError(f"poll time {time!r} is not a number of seconds")
        if self.last_poll is not None and time < self.last_poll:
            raise UserError(
                f"poll at {time:.3f} is earlier than the last one ({self.last_poll:.3f})",
                fix="give the polls in the order they were taken, with the time of each",
            )
        rows = self._rows_of(readings.ports)
        count, width = len(self._ports), len(self.counters)
        delta = np.full((count, width), np.nan)
        interval = np.full((count, width), np.nan)
        saturated = np.zeros((count, width), dtype=bool)
        reset = np.zeros((count, width), dtype=bool)
        wrapped = np.zeros((count, width), dtype=bool)
        read_any = np.zeros((count, width), dtype=bool)
        if len(rows) and readings.counters:
            self._take(time, readings, rows, delta, interval, saturated, reset, wrapped, read_any)
        listed = np.zeros(count, dtype=bool)
        listed[rows] = True
        missed = self._missed[:count]
        answered = listed
        if readings.left_out == "silent":
            missed[~listed] += 1
            missed[listed] = 0
        elif readings.left_out == "unknown":
            missed[listed] = 0
        else:
            missed[:] = 0
            answered = np.ones(count, dtype=bool)
            self._carry(time, readings, delta, interval, read_any)
        self.last_poll = float(time)
        return Deltas(
            float(time),
            tuple(self._ports),
            self.counters,
            delta,
            interval,
            saturated,
            reset,
            wrapped,
            answered,
            missed.copy(),
            missed >= self.silent_after,
        )

    def _take(
        self,
        time: float,
        readings: Readings,
        rows: np.ndarray,
        delta: np.ndarray,
        interval: np.ndarray,
        saturated: np.ndarray,
        reset: np.ndarray,
        wrapped: np.ndarray,
        read_any: np.ndarray,
    ) -> None:
        n, width = len(rows), len(self.counters)
        columns = np.array([self._column[name] for name in readings.counters], dtype=np.int64)
        new_v = np.zeros((n, width), dtype=np.uint64)
        raw_b = np.zeros((n, width), dtype=np.uint8)
        new_v[:, columns] = readings.values
        raw_b[:, columns] = readings.bits
        old_v, old_b, old_t = self._value[rows], self._bits[rows], self._time[rows]
        read = raw_b != 0
        new_b = raw_b & _WIDTH
        # a counter seen at 64 bits stays 64-bit for a source that cannot tell its width
        new_b = np.where(((raw_b & INFERRED) != 0) & (old_b == 64), np.uint8(64), new_b)
        prev_v, prev_b, prev_t = old_v, old_b, old_t
        if readings.left_out == "unchanged" and readings.start_at_zero and self.last_poll is not None:
            fresh = read & (old_b == 0) & self._covered(readings)[None, :]
            prev_v = np.where(fresh, np.uint64(0), old_v)
            prev_b = np.where(fresh, new_b, old_b)
            prev_t = np.where(fresh, self.last_poll, old_t)
        comparable = read & (prev_b == new_b) & (prev_b != 0)
        lower = new_v < prev_v
        wrap = comparable & lower & (new_b == 64) & (prev_v >= _WRAP_FROM) & (new_v < np.uint64(_WRAP_ZONE))
        cleared = comparable & lower & ~wrap
        counted = np.where(cleared, new_v, new_v - prev_v).astype(np.float64)  # uint64 subtraction is mod 2^64
        counted[~comparable] = np.nan
        spans = np.where(comparable, time - prev_t, np.nan)
        full = read & (new_b < 64) & (new_v >= _MAX_BY_BITS[new_b])
        delta[rows], interval[rows] = counted, spans
        saturated[rows], reset[rows], wrapped[rows], read_any[rows] = full, cleared, wrap, read
        self._value[rows] = np.where(read, new_v, old_v)
        self._bits[rows] = np.where(read, new_b, old_b)
        self._time[rows] = np.where(read, time, old_t)

    def _covered(self, readings: Readings) -> np.ndarray:
        if readings.covers is None:
            return self._covers_default
        return np.array([name in readings.covers for name in self.counters])

    def _carry(
        self, time: float, readings: Readings, delta: np.ndarray, interval: np.ndarray, read_any: np.ndarray
    ) -> None:
        """A source that lists only ports with errors: the checked counters it did not list kept their values."""
        count = delta.shape[0]
        carry = (self._bits[:count] != 0) & self._covered(readings)[None, :] & ~read_any
        if not carry.any():
            return
        times = self._time[:count]
        delta[carry] = 0.0
        interval[carry] = time - times[carry]
        times[carry] = time
