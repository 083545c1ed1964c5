"""Which source of a node fills each field of the catalog, and why a field no source fills stays empty.

A frame carries a row for every field the catalog switches on, but only what a node's sources write there has a
value, and only a value is exported (NaN is never rendered: telemetry/exposition/dcgm.py). So what a node exports,
and what `gpufleet deploy size` counts, is the switched-on fields one of its sources fills. Each source says what it
fills for every device of its kind (`fills`), what it fills for some devices only (`partly`: MIG instances, one
vendor's devices), and, for the fields one might expect of it, why it leaves them empty (`leaves`: DCGM's profiling
counters need DCGM, which the NVML agent does not run). The sources' own modules declare them (the NVML source, the
twin, the agent's other sources in agent/fields.py); this module only joins them with the catalog.

The vendor-neutral gpufleet_accelerator_* families are derived from the GPU fields (data/vendor_metrics.yaml): one
is filled when every field it is made of is (or the model catalog gives its value), by the sources of those fields.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpufleet.telemetry.exposition.dcgm import POD_INFO_METRIC
from gpufleet.telemetry.fields import FIELDS_ENV, FLEET, NVLINK, MetricField
from gpufleet.telemetry.vendor_metrics import load_vendor_metrics

POD_INFO = POD_INFO_METRIC  # not a catalog field: written from the attribution, which a source declares it fills
SOURCE_UP = "gpufleet_source_up"  # one series per source that reports its state (SourceFields.reports_up)


@dataclass(frozen=True, slots=True)
class SourceFields:
    """What one source of a node writes into its frame, by catalog field name."""

    source: str  # as gpufleet_source_up{source=...} names it
    fills: frozenset[str]  # for every device (or port) of its kind
    partly: tuple[tuple[str, str], ...] = ()  # (field, for which devices): filled for some only, not counted
    leaves: tuple[tuple[str, str], ...] = ()  # (field name or fnmatch pattern, why this source leaves it empty)
    reports_up: bool = True  # it has its own gpufleet_source_up series

    def why_not(self, name: str) -> str:
        return next((why for pattern, why in self.leaves if fnmatch.fnmatchcase(name, pattern)), "")

    def only_for(self, name: str) -> str:
        return next((which for field, which in self.partly if field == name), "")


@dataclass(frozen=True, slots=True)
class FieldFill:
    """One field of the catalog on a node with these sources: who fills it, or why it stays empty."""

    field: MetricField
    sources: tuple[str, ...]  # the sources that fill it for every device; empty: not exported (or only partly)
    partly: str = ""  # "twin: MIG instances only" where a source fills it for some devices
    why_empty: str = ""  # why no source fills it (or why it is switched off)

    @property
    def exported(self) -> bool:
        return self.field.enabled and bool(self.sources)

    def to_json(self) -> dict[str, object]:
        """The field as the catalog describes it, and who fills it."""
        return {
            **dataclasses.asdict(self.field),
            "exported": self.exported,
            "filled_by": list(self.sources),
            "partly": self.partly,
            "why_empty": self.why_empty,
        }


def _fleet_parts() -> dict[str, tuple[str, tuple[str, ...], bool]]:
    """Each fleet family: how it is derived, the GPU fields it needs, and whether the model catalog stands in."""
    return {
        s.name: (s.derive, tuple(f for f in (s.field, *s.fields) if f), bool(s.catalog))
        for s in load_vendor_metrics().fleet
    }


def field_fills(
    fields: Iterable[MetricField], sources: Sequence[SourceFields], known: Sequence[SourceFields] = ()
) -> list[FieldFill]:
    """Every field with the sources (of `sources`) that fill it, or why none does. `known` are all the sources
    there are, so a field this node leaves empty can name who would fill it elsewhere."""
    fields = list(fields)
    by_field: dict[str, list[str]] = {}
    for source in sources:
        for name in source.fills:
            by_field.setdefault(name, []).append(source.source)
    fleet = _fleet_parts()
    device_sources = sorted({s for _, parts, _ in fleet.values() for p in parts for s in by_field.get(p, ())})
    out = []
    for field in fields:
        if field.scope == FLEET and field.name in fleet:
            derive, parts, from_catalog = fleet[field.name]
            if derive == "up":  # a device that reports any of the readings the fleet families are made of
                filled = device_sources
            elif derive == "pod_info":
                filled = by_field.get(POD_INFO, [])
            elif all(p in by_field for p in parts):
                filled = sorted({s for p in parts for s in by_field[p]})
            else:  # a part no source fills: the model catalog's value stands in where there is one
                filled = ["model catalog"] if from_catalog else []
            why = "" if filled else f"derived from {', '.join(parts) or 'the attribution'}, which no source here fills"
            out.append(_switched(FieldFill(field, tuple(filled), why_empty=why)))
            continue
        filled = (
            [s.source for s in sources if s.reports_up] if field.name == SOURCE_UP else by_field.get(field.name, [])
        )
        partly = "; ".join(f"{s.source}: {s.only_for(field.name)}" for s in sources if s.only_for(field.name))
        why = "" if filled or partly else _why_empty(field.name, sources, known)
        out.append(_switched(FieldFill(field, tuple(filled), partly, why)))
    return out


def _switched(fill: FieldFill) -> FieldFill:
    if fill.field.enabled:
        return fill
    why = "switched off in the field catalog"
    if fill.field.scope == NVLINK and (fill.sources or fill.partly):  # read each collection all the same
        why += f" (read for the NVLink detector, which names the failing link; {FIELDS_ENV} exports it)"
    return FieldFill(fill.field, fill.sources, fill.partly, why)


def _why_empty(name: str, sources: Sequence[SourceFields], known: Sequence[SourceFields]) -> str:
    reasons = [f"{s.source}: {s.why_not(name)}" for s in sources if s.why_not(name)]
    if reasons:
        return "; ".join(reasons)
    here = {s.source for s in sources}
    elsewhere = [s.source for s in known if s.source not in here and name in s.fills]
    if len(elsewhere) == 1:
        return f"filled by {elsewhere[0]}, which this node does not run"
    if elsewhere:
        return f"filled by {', '.join(elsewhere)}; this node runs none of them"
    return "no source of this node fills it" if not known else "no source gpufleet has fills it"


def exported(fields: Iterable[MetricField], sources: Sequence[SourceFields]) -> frozenset[str]:
    """The names of the fields a node with these sources exports (switched on and filled), with the pod info series
    when a source writes it."""
    names = {f.field.name for f in field_fills(fields, sources) if f.exported}
    if any(POD_INFO in s.fills for s in sources):
        names.add(POD_INFO)
    return frozenset(names)
