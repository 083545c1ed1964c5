"""InfiniBand PMA port counters (ib_counters.csv): widths, sysfs file names, metric names, what each one means, the
names older infiniband-diags printed for it, and what a count over its threshold calls for."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from functools import cache
from typing import Literal

from gpufleet.catalog._files import read_text

OverThreshold = Literal["critical", "warning", "info", ""]


@dataclass(frozen=True, slots=True)
class IbCounter:
    name: str  # PMA attribute field, as perfquery prints it
    bits: int  # width in PortCounters (saturates, does not wrap)
    extended_bits: int
    sysfs: str  # file under /sys/class/infiniband/<hca>/ports/<n>/counters
    metric: str  # Prometheus name, base units
    kind: str  # error, congestion or traffic
    cause: str  # physical, physical-remote, routing, config, congestion, management, traffic
    threshold: int | None  # infiniband-diags' sample error_thresholds value
    description: str
    over_threshold: OverThreshold = ""  # what a count over the threshold is; "" for traffic counters
    aliases: tuple[str, ...] = ()  # names infiniband-diags printed before the PMA names (libibmad before 2010-08)
    fix: str = ""
    source: str = ""

    @property
    def octets_div4(self) -> bool:
        """PortXmitData/PortRcvData count octets divided by 4."""
        return self.name in ("PortXmitData", "PortRcvData")

    @property
    def saturation(self) -> int:
        return (1 << self.bits) - 1


def _over_threshold(value: str) -> OverThreshold:
    if value not in ("critical", "warning", "info", ""):
        raise ValueError(f"ib_counters.csv: over_threshold {value!r} is not critical, warning, info or empty")
    return value  # type: ignore[return-value]


SYMBOL_COUNTER = "SymbolErrorCounter"  # the counter judged against a bit error rate (health.symbol_errors)


@cache
def load_ib_counters() -> dict[str, IbCounter]:
    out: dict[str, IbCounter] = {}
    for row in csv.DictReader(io.StringIO(read_text("ib_counters.csv"))):
        out[row["name"]] = IbCounter(
            name=row["name"],
            bits=int(row["bits"]),
            extended_bits=int(row["extended_bits"]),
            sysfs=row["sysfs"],
            metric=row["metric"],
            kind=row["kind"],
            cause=row["cause"],
            threshold=int(row["threshold"]) if row["threshold"] else None,
            description=row["description"],
            over_threshold=_over_threshold(row.get("over_threshold") or ""),
            aliases=tuple(a for a in (row.get("aliases") or "").split("|") if a),
            fix=row.get("fix") or "",
            source=row.get("source") or "",
        )
    return out


@cache
def _names() -> dict[str, str]:
    names: dict[str, str] = {}
    for counter in load_ib_counters().values():
        names[counter.name] = counter.name
        for alias in counter.aliases:
            names[alias] = counter.name
    return names


@cache
def _folded() -> dict[str, str]:
    return {name.lower(): pma for name, pma in _names().items()}


def ib_counter_name(name: str) -> str | None:
    """The catalog's PMA name for a counter name any infiniband-diags version printed (`SymbolErrors`,
    `XmtDiscards`, `SymbolErrorCounter`), or None for a counter the catalog does not describe."""
    return _names().get(name) or _folded().get(name.lower())
