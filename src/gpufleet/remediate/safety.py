"""The safety checks every changing action passes: circuit breaker, unavailability budget, rate limits.

Each check returns None when the action may go ahead, or the reason it may not (that reason goes to the audit log).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpufleet.remediate.backends.base import NodeLocation
from gpufleet.remediate.config import BreakerSpec, BudgetSpec, RateLimitSpec, resolve_limit
from gpufleet.spec.base import format_duration


@dataclass(frozen=True, slots=True)
class BreakerVerdict:
    trip: bool
    failing: int  # distinct nodes that failed inside the window
    threshold: int
    reason: str
    wave: tuple[int, ...] = ()  # distinct failing nodes in each of the wave's windows, the latest first
    wave_threshold: int = 0  # what each must reach (0: no wave rule)


def breaker_lookback(spec: BreakerSpec) -> float:
    """How far back the failures the breaker judges reach: the window, or all the wave's windows."""
    return spec.window * (spec.wave_windows if spec.wave_threshold is not None else 1)


def breaker_verdict(
    spec: BreakerSpec, failures: Iterable[tuple[str, float]], total_nodes: int, now: float
) -> BreakerVerdict:
    """Whether the failures (node, time; at least `breaker_lookback` back from `now`) trip the breaker: the distinct
    nodes failing inside the window reach the threshold, or those of each of the wave's windows (the latest ending
    now, each the window long) reach the wave threshold (BreakerSpec says why)."""
    seen = list(failures)
    failing = len({node for node, t in seen if t >= now - spec.window})
    threshold = resolve_limit(spec.threshold, total_nodes, at_least=spec.min_failures)
    trip = spec.enabled and failing >= threshold
    reason = (
        f"{failing} of {total_nodes} nodes failed within {format_duration(spec.window)} "
        f"(threshold {threshold} = {spec.threshold}, at least {spec.min_failures})"
    )
    if spec.wave_threshold is None:
        return BreakerVerdict(trip, failing, threshold, reason)
    wave_threshold = resolve_limit(spec.wave_threshold, total_nodes, at_least=spec.min_failures)
    w = spec.window
    wave = tuple(
        len({node for node, t in seen if now - (k + 1) * w <= t and (k == 0 or t < now - k * w)})
        for k in range(spec.wave_windows)
    )
    if spec.enabled and not trip and min(wave) >= wave_threshold:
        trip = True
        counts = ", ".join(str(n) for n in reversed(wave))
        reason = (
            f"a wave: {counts} of {total_nodes} nodes failed in each of the last {spec.wave_windows} windows of "
            f"{format_duration(w)} (wave threshold {wave_threshold} = {spec.wave_threshold} a window, at least "
            f"{spec.min_failures})"
        )
    return BreakerVerdict(trip, failing, threshold, reason, wave, wave_threshold)


def budget_refusal(
    spec: BudgetSpec,
    node: str,
    unavailable: set[str],
    all_nodes: list[str],
    placement: dict[str, NodeLocation],
) -> str | None:
    """Why taking `node` out of service would exceed the budget, or None if it fits."""
    if node in unavailable:
        return None  # already out: no further capacity is lost
    after = unavailable | {node}
    if spec.cluster is not None:
        limit = resolve_limit(spec.cluster, len(all_nodes), at_least=1)
        if len(after) > limit:
            return (
                f"cluster budget: {len(after)} of {len(all_nodes)} nodes would be unavailable "
                f"(limit {limit} = {spec.cluster})"
            )
    here = placement.get(node, NodeLocation())
    for label, limit_spec, key in (("rack", spec.per_rack, "rack"), ("leaf", spec.per_leaf, "leaf")):
        group_name = getattr(here, key)
        if limit_spec is None or not group_name:
            continue
        group = {n for n in all_nodes if getattr(placement.get(n, NodeLocation()), key) == group_name}
        limit = resolve_limit(limit_spec, len(group), at_least=1)
        out = len(after & group)
        if out > limit:
            return (
                f"{label} budget: {out} of {len(group)} nodes under {label} {group_name} would be unavailable "
                f"(limit {limit} = {limit_spec})"
            )
    return None


def rate_limit_lookback(spec: RateLimitSpec | None) -> float:
    """How far back the actions a rate limit judges reach: the hour of `max_per_hour`, or the spacing when it is
    longer (a 2 h spacing needs the last action of the past 2 h)."""
    return max(3600.0, spec.min_interval if spec is not None else 0.0)


def rate_limit_deferral(action: str, spec: RateLimitSpec | None, recent: list[float], now: float) -> str | None:
    """Why an action of this kind must wait, given when the last ones ran (`recent`: the past hour, or as far back as
    the spacing reaches, oldest first)."""
    if spec is None:
        return None
    if spec.min_interval and recent and now - recent[-1] < spec.min_interval:
        return (
            f"rate limit: last {action} {now - recent[-1]:.0f}s ago, spacing is {format_duration(spec.min_interval)}; "
            f"next allowed at t={recent[-1] + spec.min_interval:.0f}"
        )
    if spec.max_per_hour is not None:
        in_hour = [t for t in recent if t > now - 3600.0]
        if len(in_hour) >= spec.max_per_hour:
            return f"rate limit: {len(in_hour)} {action} actions in the past hour (limit {spec.max_per_hour})"
    return None
