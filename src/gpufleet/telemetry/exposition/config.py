"""How /metrics looks: the exposition's settings (label spellings, pod attribution as info series or as
dcgm-exporter's labels, which workloads get per-workload series and within what budget), below every renderer that
reads them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gpufleet.errors import UserError
from gpufleet.model.attribution import Sharing

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
SHARING_MODES = tuple(s.value for s in Sharing)
ALL = "all"  # workload_series_sharing: every device's workloads
ALL_NAMESPACES = "*"
DEFAULT_SHARING = (Sharing.time_slicing.value, Sharing.mps.value, Sharing.mig_shared.value)
DEFAULT_BUDGET = 2000


def check_sharing_modes(modes: Sequence[str]) -> tuple[str, ...]:
    """workload_series_sharing's values: sharing modes (model.attribution.Sharing) or "all"."""
    unknown = [m for m in modes if m not in (*SHARING_MODES, ALL)]
    if unknown:
        raise ValueError(f"unknown sharing mode(s) {', '.join(unknown)}: use {', '.join(SHARING_MODES)} or {ALL}")
    return tuple(dict.fromkeys(modes))


def workload_series_settings(selectors: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """The exposition config's workload_series_sharing and workload_series_namespaces for the agent's
    --workload-series selectors: sharing:<mode>, namespace:<ns>, all, none."""
    sharing: list[str] = []
    namespaces: list[str] = []
    nothing = False
    fix = f"use sharing:<mode> (one of {', '.join(SHARING_MODES)}), namespace:<name>, all or none"
    for raw in selectors:
        text = raw.strip()
        kind, sep, value = text.partition(":")
        value = value.strip()
        if text == "none":
            nothing = True
        elif text == ALL:
            sharing.append(ALL)
        elif sep and kind == "sharing" and value in (*SHARING_MODES, ALL):
            sharing.append(value)
        elif sep and kind == "namespace" and value:
            namespaces.append(value)
        else:
            raise UserError(f"--workload-series {raw!r} is not a selector", fix=fix)
    if nothing and (sharing or namespaces):
        raise UserError("--workload-series none cannot be combined with other selectors", fix="give none alone")
    return {
        "workload_series_sharing": tuple(dict.fromkeys(sharing)),
        "workload_series_namespaces": tuple(dict.fromkeys(namespaces)),
    }


class ExpositionConfig(BaseModel):
    """How /metrics looks. The defaults follow dcgm-exporter 4.x with cardinality-safe pod attribution."""

    model_config = ConfigDict(extra="forbid")

    hostname_label: Literal["hostname", "Hostname"] = "hostname"
    uuid_label: Literal["UUID", "uuid"] = "UUID"
    attribution: Literal["info", "labels"] = "info"  # labels = dcgm-exporter compat: pod labels on GPU series
    old_namespace: bool = False  # --use-old-namespace: pod_name, pod_namespace, container_name
    fleet_series: bool = True  # the vendor-neutral gpufleet_accelerator_* series for every accelerator
    # which workloads get gpufleet_workload_gpu_* series: those on devices shared in these modes (Sharing values, or
    # "all"), those in these namespaces ("*": every one), and at most this many series per render (workload.py)
    workload_series_sharing: tuple[str, ...] = DEFAULT_SHARING
    workload_series_namespaces: tuple[str, ...] = ()
    workload_series_budget: int = Field(DEFAULT_BUDGET, ge=0)

    @field_validator("workload_series_sharing")
    @classmethod
    def _known_modes(cls, modes: tuple[str, ...]) -> tuple[str, ...]:
        return check_sharing_modes(modes)
