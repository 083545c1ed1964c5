"""InfiniBand PMA port counters (ib_counters.csv): widths, sysfs file names, metric names and what each one means."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from functools import cache

from gpufleet.catalog._files import read_text


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

    @property
    def octets_div4(self) -> bool:
        """PortXmitData/PortRcvData count octets divided by 4."""
        return self.name in ("PortXmitData", "PortRcvData")

    @property
    def saturation(self) -> int:
        return (1 << self.bits) - 1


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
        )
    return out
