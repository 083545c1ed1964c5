"""DCGM's blank sentinels: values that mean "no data" and must never reach /metrics."""

from __future__ import annotations

import csv
import io
from functools import cache

import numpy as np

from gpufleet.telemetry.fields import read_data

# int64 sentinels (0x7ffffffffffffff0 + 0..3) all round to 2**63 as float64; anything this large is one of
# them.
_INT64_SENTINEL_FLOOR = float(2**63 - 4096)


@cache
def blank_values() -> dict[str, float]:
    rows = csv.DictReader(io.StringIO(read_data("dcgm_blank_values.csv")))
    return {r["name"]: float(r["value"]) for r in rows}


@cache
def _exact_sentinels() -> np.ndarray:
    return np.array([v for v in blank_values().values() if v < _INT64_SENTINEL_FLOOR], dtype=np.float64)


@cache
def _smallest_sentinel() -> float:
    return float(_exact_sentinels().min())


def valid_mask(values: np.ndarray) -> np.ndarray:
    """True where a value is real: not NaN, not a DCGM int32/int64/fp64 blank, not +-inf."""
    ok = np.isfinite(values)
    ok &= values < _INT64_SENTINEL_FLOOR
    large = values >= _smallest_sentinel()  # real values this large are rare: test only those against the list
    if large.any():
        ok[large] &= ~np.isin(values[large], _exact_sentinels())
    return ok


def is_blank(value: float) -> bool:
    return not bool(valid_mask(np.array([value], dtype=np.float64))[0])
