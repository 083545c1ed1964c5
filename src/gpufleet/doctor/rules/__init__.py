"""The doctor's rules. Each module registers its rules on import; `registered()` imports them all."""

from __future__ import annotations

from gpufleet.doctor.rules.base import REGISTRY, Registered


def registered() -> dict[str, Registered]:
    from gpufleet.doctor.rules import (  # noqa: F401  (they register)
        admission,
        amd,
        drivers,
        fabric_settings,
        gaudi,
        kubelet,
        monitoring,
        operands,
        runtime,
        sharing,
        stack,
        vendors,
        workloads,
    )

    return dict(sorted(REGISTRY.items()))
