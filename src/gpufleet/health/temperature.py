"""One reading of a GPU's temperature against its limits: the one judgement of a GPU at or over its shutdown,
slowdown or maximum operating temperature, for every door that reads one: `gpufleet triage` of a dcgm-exporter
scrape (triage/readers/dcgm_exporter.py) and of amd-smi, rocm-smi and hl-smi (triage/readers/vendor_smi.py).

The limits are the device's own where the reading carries them (DCGM's SLOWDOWN_TEMP / SHUTDOWN_TEMP fields, the
LIMIT section `amd-smi static` prints: SLOWDOWN_/SHUTDOWN_HOTSPOT_TEMPERATURE, amdsmi's CRITICAL and EMERGENCY
metrics), else the catalog's for its model (catalog/data/gpu_models.yaml, each with its source). On AMD GPUs the
limits are the hotspot (junction) sensor's, so the hotspot reading is the one judged.

- At or over the shutdown (AMD: emergency) temperature: critical; the GPU is about to be, or was, cut off.
- At or over the slowdown (AMD: critical) temperature, or NVIDIA's maximum operating temperature: a warning; the
  hardware holds the clocks down until it cools.
Only the most severe limit reached is said.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.catalog.gpus import GpuModelSpec
from gpufleet.model import Severity

COOLING_FIX = "check the GPU's cooling (fans, airflow, inlet temperature) and its clocks"


@dataclass(frozen=True, slots=True)
class TemperatureLimits:
    """A sensor's limits in C; None where neither the reading nor the catalog gives one."""

    shutdown: float | None = None
    slowdown: float | None = None
    max_operating: float | None = None

    def known(self) -> bool:
        return any(v is not None for v in (self.shutdown, self.slowdown, self.max_operating))

    def over(self, fallback: TemperatureLimits) -> TemperatureLimits:
        """These limits, each missing one taken from `fallback` (the device's own first, then the catalog's)."""
        return TemperatureLimits(
            self.shutdown if self.shutdown is not None else fallback.shutdown,
            self.slowdown if self.slowdown is not None else fallback.slowdown,
            self.max_operating if self.max_operating is not None else fallback.max_operating,
        )


@dataclass(frozen=True, slots=True)
class TemperatureIssue:
    check: str  # "temperature"
    code: str  # "GPU temperature over shutdown"
    severity: Severity
    limit_name: str  # shutdown, slowdown, max operating
    limit: float
    message: str
    fix: str


def catalog_limits(spec: GpuModelSpec | None) -> TemperatureLimits:
    """The catalog's limits for a model (its GPU, or on AMD its hotspot, sensor); none for an unknown model."""
    if spec is None:
        return TemperatureLimits()
    return TemperatureLimits(spec.shutdown_temp_c, spec.slowdown_temp_c, spec.max_operating_temp_c)


def valid_limit(value: float | None) -> float | None:
    """A limit as a tool printed it, or None where it is no limit (0, a sentinel, not a number)."""
    if value is None or not 0 < value < 200:
        return None
    return value


def judge_temperature(temp_c: float, limits: TemperatureLimits, what: str = "GPU") -> TemperatureIssue | None:
    """The most severe limit `temp_c` is at or over, or None (below every limit, or no limit known)."""
    for name, limit in (("shutdown", limits.shutdown), ("slowdown", limits.slowdown),
                        ("max operating", limits.max_operating)):  # fmt: skip
        if limit is not None and temp_c >= limit:
            severity = Severity.critical if name == "shutdown" else Severity.warning
            return TemperatureIssue(
                "temperature", f"{what} temperature over {name}", severity, name, limit,
                f"{temp_c:g} C, at or over its {name} temperature {limit:g} C", COOLING_FIX,
            )  # fmt: skip
    return None
