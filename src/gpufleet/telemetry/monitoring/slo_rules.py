"""Prometheus rules for the service-level objectives of inference services (monitoring/objectives.py): recording
rules for the share of bad requests of every objective over 5m, 30m, 1h and 6h, and the SRE workbook's
multi-window, multi-burn-rate alerts on them (chapter 5 of "The Site Reliability Workbook", "Alerting on SLOs").

Every objective is a ratio of bad requests to requests with its own error budget (1 - objective): failed
requests (error ratio), requests that did not succeed (availability), and for a latency percentile the requests
slower than its threshold: p99 <= 2 s means at most 1 % of requests slower than 2 s, counted exactly as
`_count - _bucket{le="2.0"}` since every threshold is a bucket bound. A page when the budget burns 14.4 times too
fast over both the last hour and 5 minutes, a ticket at 6 times over 6 hours and 30 minutes: the burn windows of
monitoring/objectives.py (`BURN_WINDOWS`, the workbook's Table 5-8), which the SLO detector reads too. Plain threshold
alerts say the objectives' own words (p99 above 2 s over 5 minutes). Under `min_requests_per_s` a service has too
little traffic to judge: its alerts are held and an info alert says so.

Each service listed in the config has its own group of rules; a default group judges every other model, one
alert per `model` label.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from gpufleet import yaml_input
from gpufleet.errors import ManifestError, UserError
from gpufleet.instrument import names
from gpufleet.telemetry.monitoring.alert_rules import RulesConfig, config_error, re2_escape
from gpufleet.telemetry.monitoring.objectives import (
    BURN_WINDOWS,
    PAGE_WINDOW,
    TICKET_WINDOW,
    BurnWindow,
    Objectives,
    SloConfig,
)

SLO_RULE_FILE = "gpufleet-slo-rules.yml"
REQUESTS_RATE = "model:gpufleet_inference_requests:rate{}"
BAD_RATIO = "model:gpufleet_inference_slo_bad:ratio_rate{}"
TRAFFIC_WINDOW = "30m"
EXAMPLE_MODEL = "example-model"  # for example series (tests)
EXAMPLE_VERSION = "example-version"


@dataclass(frozen=True, slots=True)
class BurnAlert:
    """The alert on one row of the burn windows: its name, severity and `for`."""

    alert: str
    severity: str
    window: BurnWindow
    wait: str  # `for`

    @property
    def long(self) -> str:
        return _duration(self.window.long_s)

    @property
    def short(self) -> str:
        return _duration(self.window.short_s)

    @property
    def budget_share(self) -> float:  # the share of the whole budget spent over `long` at the threshold burn rate
        return self.window.budget_share

    def factor(self, budget_days: float) -> float:
        return self.window.threshold(budget_days)


# 2 % of a 30-day budget in an hour pages (burn rate 14.4), 5 % in six hours opens a ticket (burn rate 6); the rates
# scale with budget_window_days. The short window makes an alert stop soon after the burn does. `for` as Pyrra
# sets it.
PAGE = BurnAlert("InferenceSloBurnRateFast", "critical", PAGE_WINDOW, "2m")
TICKET = BurnAlert("InferenceSloBurnRateSlow", "warning", TICKET_WINDOW, "15m")
QUANTILE_ALERTS = {"latency-p99": "InferenceLatencyP99High", "latency-p95": "InferenceLatencyP95High"}
TTFT_ALERT = "InferenceTtftHigh"
ERROR_ALERT = "InferenceErrorRateHigh"
AVAILABILITY_ALERT = "InferenceAvailabilityLow"
TRAFFIC_ALERT = "InferenceTrafficTooLowForSlo"


@dataclass(frozen=True, slots=True)
class Scope:
    """The series one set of objectives judges: a union of matcher sets over the raw series, aggregated `by`."""

    group: str
    source: tuple[tuple[str, ...], ...]
    by: tuple[str, ...]
    recorded: tuple[str, ...]  # matchers that pick this scope's recorded series out of every scope's
    objectives: Objectives
    where: str  # where its objectives are set, for errors: "defaults" or "services[2]"
    set_fields: frozenset[str]
    example_labels: dict[str, str]  # labels of a series this scope judges and no other does (for tests)

    def field_path(self, name: str) -> str:
        return f"{self.where}.{name}" if name in self.set_fields else f"defaults.{name}"


@dataclass(frozen=True, slots=True)
class Sli:
    """One objective as a ratio of bad requests: its `slo` label, budget, and the PromQL of the ratio."""

    slo: str
    title: str
    objective: str  # the objective in words
    budget: float
    ratio: Callable[[Scope, str], str]  # (scope, window) -> PromQL
    threshold: float | None = None  # latency objectives: the bucket bound
    quantile: float | None = None
    histogram: str | None = None


# --- PromQL -----------------------------------------------------------------------------------------------------
def _str(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _fmt(value: float) -> str:
    value = round(float(value), 12)
    return str(int(value)) if value.is_integer() else repr(value)


def _pct(ratio: float) -> str:
    return f"{round(ratio * 100, 6):g}%"


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


# every window a burn alert reads, recorded for every objective: 5m, 30m, 1h, 6h
WINDOWS = tuple(_duration(s) for s in sorted({w.short_s for w in BURN_WINDOWS} | {w.long_s for w in BURN_WINDOWS}))


def _le(bound: float) -> str:
    """`le` as prometheus_client writes a bound (2.0) and as Go clients do (2); Prometheus 3 stores the former."""
    forms = sorted({repr(float(bound)), _fmt(bound)}, reverse=True)
    return f"le={_str(forms[0])}" if len(forms) == 1 else f"le=~{_str('|'.join(re2_escape(f) for f in forms))}"


def _sum_rate(metric: str, scope: Scope, window: str, *extra: str, by: tuple[str, ...] = ()) -> str:
    parts = []
    for matchers in scope.source:
        body = ", ".join((*matchers, *extra))
        parts.append(f"rate({metric}{{{body}}}[{window}])" if body else f"rate({metric}[{window}])")
    return f"sum by ({', '.join((*scope.by, *by))}) ({' or '.join(parts)})"


def _total(scope: Scope, window: str) -> str:
    return _sum_rate(names.INFERENCE_REQUESTS, scope, window)


def _errors(scope: Scope, window: str) -> str:
    # The outcome label where the server sets it, its own error counter otherwise.
    outcome = _sum_rate(names.INFERENCE_REQUESTS, scope, window, 'outcome="error"')
    return f"({outcome} or {_sum_rate(names.INFERENCE_ERRORS, scope, window)})"


def _error_ratio(scope: Scope, window: str) -> str:
    return f"{_errors(scope, window)} / {_total(scope, window)}"


def _available_ratio(scope: Scope, window: str) -> str:
    # Successful requests by outcome; without the label, those that did not fail; without errors, all of them.
    total = _total(scope, window)
    ok = _sum_rate(names.INFERENCE_REQUESTS, scope, window, 'outcome="ok"')
    return f"({ok} or ({total} - {_errors(scope, window)}) or {total}) / {total}"


def _unavailable_ratio(scope: Scope, window: str) -> str:
    return f"1 - {_available_ratio(scope, window)}"


def _slower_ratio(histogram: str, bound: float) -> Callable[[Scope, str], str]:
    def ratio(scope: Scope, window: str) -> str:
        count = _sum_rate(f"{histogram}_count", scope, window)
        return f"({count} - {_sum_rate(f'{histogram}_bucket', scope, window, _le(bound))}) / {count}"

    return ratio


def _check_bound(scope: Scope, field: str, value: float, buckets: tuple[float, ...], metric: str) -> None:
    if not any(math.isclose(value, b) for b in buckets):
        raise UserError(
            f"{scope.field_path(field)} = {value:g} s is not a bucket bound of {metric}, so no bucket counts the "
            "requests slower than it",
            fix=f"use one of {', '.join(f'{b:g}' for b in buckets)}",
        )


def slis(scope: Scope) -> list[Sli]:
    """The scope's objectives that are set, as ratios of bad requests."""
    obj = scope.objectives
    out = []
    if obj.error_ratio is not None:
        words = f"at most {_pct(obj.error_ratio)} of requests fail"
        out.append(Sli("error-ratio", "error ratio", words, obj.error_ratio, _error_ratio))
    if obj.availability is not None:
        words = f"at least {_pct(obj.availability)} of requests succeed"
        out.append(Sli("availability", "availability", words, round(1 - obj.availability, 12), _unavailable_ratio))
    latencies = [
        ("latency-p99", "p99_s", obj.p99_s, 0.99, names.INFERENCE_REQUEST_DURATION, names.REQUEST_DURATION_BUCKETS),
        ("latency-p95", "p95_s", obj.p95_s, 0.95, names.INFERENCE_REQUEST_DURATION, names.REQUEST_DURATION_BUCKETS),
        ("ttft", "ttft_s", obj.ttft_s, obj.ttft_quantile, names.INFERENCE_TIME_TO_FIRST_TOKEN,
         names.TIME_TO_FIRST_TOKEN_BUCKETS),
    ]  # fmt: skip
    for slo, field, bound, q, histogram, buckets in latencies:
        if bound is None:
            continue
        _check_bound(scope, field, bound, buckets, histogram)
        what = "time to first token" if slo == "ttft" else "request duration"
        title = "time to first token" if slo == "ttft" else f"p{_fmt(q * 100)} latency"
        words = f"q{_fmt(q)} of {what} at most {_fmt(bound)} s (at most {_pct(1 - q)} of requests slower)"
        budget = round(1 - q, 12)
        out.append(Sli(slo, title, words, budget, _slower_ratio(histogram, bound), bound, q, histogram))
    return out


# --- scopes -----------------------------------------------------------------------------------------------------
def _alternation(values: list[str]) -> str:
    return _str("|".join(re2_escape(v) for v in sorted(values)))


def scopes(cfg: SloConfig) -> list[Scope]:
    """One scope per listed service and the default one for every other model; refuses entries that repeat or
    that an earlier entry shadows (the control plane's SloConfig.for_service takes the first match)."""
    seen: dict[tuple[str, str | None], int] = {}
    for i, svc in enumerate(cfg.services):
        label = svc.model + (f" {svc.version}" if svc.version is not None else "")
        if (svc.model, svc.version) in seen:
            first = seen[svc.model, svc.version]
            raise UserError(
                f"services[{i}] ({label}) repeats services[{first}]", fix="list each model (and version) once"
            )
        if svc.version is not None and (svc.model, None) in seen:
            raise UserError(
                f"services[{i}] ({label}) is never used: services[{seen[svc.model, None]}] covers every version of "
                f"{svc.model} and comes first",
                fix="list a model's versions before its entry without a version",
            )
        seen[svc.model, svc.version] = i
    versions: dict[str, list[str]] = {}
    for svc in cfg.services:
        if svc.version is not None:
            versions.setdefault(svc.model, []).append(svc.version)
    whole = [svc.model for svc in cfg.services if svc.version is None]
    out = []
    groups = {"gpufleet-slo"}
    source: tuple[tuple[str, ...], ...]
    by: tuple[str, ...]
    recorded: tuple[str, ...]
    for i, svc in enumerate(cfg.services):
        model = f"model={_str(svc.model)}"
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", svc.model + (f"-{svc.version}" if svc.version else ""))
        group = f"gpufleet-slo-{slug}" if f"gpufleet-slo-{slug}" not in groups else f"gpufleet-slo-{slug}-{i}"
        groups.add(group)
        if svc.version is not None:
            version = f"version={_str(svc.version)}"
            source, by, recorded = ((model, version),), ("model", "version"), (model, version)
            test = {"model": svc.model, "version": svc.version}
        else:
            others = versions.get(svc.model, [])
            source = ((model, f"version!~{_alternation(others)}") if others else (model,),)
            by, recorded = ("model",), (model, 'version=""')
            test = {"model": svc.model, "version": EXAMPLE_VERSION}
        objectives = cfg.for_service(svc.model, svc.version or "")
        own = frozenset(svc.model_fields_set)
        out.append(Scope(group, source, by, recorded, objectives, f"services[{i}]", own, test))
    listed = sorted({svc.model for svc in cfg.services})
    rest: list[tuple[str, ...]] = [(f"model!~{_alternation(listed)}",) if listed else ()]
    rest += [(f"model={_str(m)}", f"version!~{_alternation(v)}") for m, v in sorted(versions.items()) if m not in whole]
    recorded = ((f"model!~{_alternation(whole)}",) if whole else ()) + ('version=""',)
    # An example series of the default scope: an unlisted version of a model whose versions are listed, if any.
    partial = [m for m in sorted(versions) if m not in whole]
    example = partial[0] if partial else (EXAMPLE_MODEL if EXAMPLE_MODEL not in listed else f"{EXAMPLE_MODEL}-other")
    test = {"model": example, "version": EXAMPLE_VERSION}
    fields = frozenset(cfg.defaults.model_fields_set)
    out.append(Scope("gpufleet-slo", tuple(rest), ("model",), recorded, cfg.defaults, "defaults", fields, test))
    return out


# --- rules ------------------------------------------------------------------------------------------------------
def _sel(metric: str, *matchers: str) -> str:
    return f"{metric}{{{', '.join(matchers)}}}"


def _guard(scope: Scope, rate: str) -> str:
    floor = scope.objectives.min_requests_per_s
    return f" and on(model, version) {rate} >= {_fmt(floor)}" if floor > 0 else ""


def _burn_rule(scope: Scope, sli: Sli, burn: BurnAlert) -> dict[str, Any]:
    days = scope.objectives.budget_window_days
    factor = burn.factor(days)
    long = _sel(BAD_RATIO.format(burn.long), f'slo="{sli.slo}"', *scope.recorded)
    short = _sel(BAD_RATIO.format(burn.short), f'slo="{sli.slo}"', *scope.recorded)
    guard = _guard(scope, _sel(REQUESTS_RATE.format(burn.short), *scope.recorded))
    budget = _fmt(sli.budget)
    expr = f"({long} / {budget} > {_fmt(factor)} and {short} / {budget} > {_fmt(factor)}){guard}"
    action = "page" if burn is PAGE else "ticket"
    return {
        "alert": burn.alert,
        "expr": expr,
        "for": burn.wait,
        "labels": {"severity": burn.severity, "slo": sli.slo},
        "annotations": {
            "summary": f"{{{{ $labels.model }}}}: {sli.title} is burning its error budget "
            '{{ $value | printf "%.1f" }} times too fast',
            "description": f"Objective: {sli.objective}. Over the last {burn.long} and the last {burn.short} the "
            f"service has spent its {_fmt(days)}-day error budget ({_pct(sli.budget)} of requests) "
            f'{{{{ $value | printf "%.1f" }}}} times faster than it lasts; a {action} above {_fmt(factor)} '
            f"({_pct(burn.budget_share)} of the budget in {burn.long}).",
        },
    }


def _threshold_rules(scope: Scope, sli: Sli) -> list[dict[str, Any]]:
    obj = scope.objectives
    window = _duration(obj.latency_window_s)
    guard = _guard(scope, _total(scope, window))
    if sli.threshold is not None and sli.quantile is not None and sli.histogram is not None:
        buckets = _sum_rate(f"{sli.histogram}_bucket", scope, window, by=("le",))
        q = _fmt(sli.quantile)
        what = "time to first token" if sli.slo == "ttft" else "request duration"
        return [
            {
                "alert": QUANTILE_ALERTS.get(sli.slo, TTFT_ALERT),
                "expr": f"histogram_quantile({q}, {buckets}) > {_fmt(sli.threshold)}{guard}",
                "for": "2m",
                "labels": {"severity": "warning", "slo": sli.slo},
                "annotations": {
                    "summary": f"{{{{ $labels.model }}}}: q{q} of {what} is "
                    f'{{{{ $value | printf "%.2f" }}}} s (objective {_fmt(sli.threshold)} s)',
                    "description": f"The {q} quantile of {what} over the last {window} has been above "
                    f"{_fmt(sli.threshold)} s for 2 minutes.",
                },
            }
        ]
    if sli.slo == "error-ratio":
        return [
            {
                "alert": ERROR_ALERT,
                "expr": f"{_error_ratio(scope, window)} > {_fmt(sli.budget)}{guard}",
                "for": "2m",
                "labels": {"severity": "warning", "slo": sli.slo},
                "annotations": {
                    "summary": "{{ $labels.model }}: {{ $value | humanizePercentage }} of requests fail "
                    f"(objective at most {_pct(sli.budget)})",
                    "description": f"Over the last {window} more than {_pct(sli.budget)} of requests have failed, "
                    "for 2 minutes.",
                },
            }
        ]
    span = _duration(obj.availability_window_s)
    target = 1 - sli.budget
    return [
        {
            "alert": AVAILABILITY_ALERT,
            "expr": f"{_available_ratio(scope, span)} < {_fmt(target)}{_guard(scope, _total(scope, span))}",
            "for": "5m",
            "labels": {"severity": "warning", "slo": sli.slo},
            "annotations": {
                "summary": "{{ $labels.model }}: {{ $value | humanizePercentage }} of requests succeeded over the "
                f"last {span} (objective {_pct(target)})",
                "description": f"Availability over the last {span} has been below {_pct(target)} for 5 minutes.",
            },
        }
    ]


def _traffic_rule(scope: Scope) -> dict[str, Any]:
    floor = _fmt(scope.objectives.min_requests_per_s)
    return {
        "alert": TRAFFIC_ALERT,
        "expr": f"{_sel(REQUESTS_RATE.format(TRAFFIC_WINDOW), *scope.recorded)} < {floor}",
        "for": "15m",
        "labels": {"severity": "info"},
        "annotations": {
            "summary": "{{ $labels.model }}: too little traffic to judge its SLOs "
            '({{ $value | printf "%.3f" }} requests/s)',
            "description": f"Fewer than {floor} requests per second over the last {TRAFFIC_WINDOW}: a percentile "
            "or a ratio of so few requests is noise, so this service's SLO alerts are held until traffic "
            "returns. Nothing is wrong unless the service should be busy.",
        },
    }


def rule_groups(cfg: SloConfig | None = None) -> dict[str, Any]:
    """The Prometheus rule file: per scope, its recording rules, then its alerts."""
    groups = []
    for scope in scopes(cfg or SloConfig()):
        objectives = slis(scope)
        rules: list[dict[str, Any]] = []
        for window in WINDOWS:
            rules.append({"record": REQUESTS_RATE.format(window), "expr": _total(scope, window)})
            for sli in objectives:
                ratio = {"record": BAD_RATIO.format(window), "expr": sli.ratio(scope, window)}
                rules.append({**ratio, "labels": {"slo": sli.slo}})
        for sli in objectives:
            rules += [_burn_rule(scope, sli, PAGE), _burn_rule(scope, sli, TICKET), *_threshold_rules(scope, sli)]
        if scope.objectives.min_requests_per_s > 0:
            rules.append(_traffic_rule(scope))
        groups.append({"name": scope.group, "rules": rules})
    return {"groups": groups}


def prometheus_rule(cfg: SloConfig | None = None, rules_cfg: RulesConfig | None = None) -> dict[str, Any]:
    """The same rules as a PrometheusRule, labelled for the Prometheus Operator's selector like gpufleet-rules."""
    rules_cfg = rules_cfg or RulesConfig()
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "gpufleet-slo-rules",
            "namespace": rules_cfg.namespace,
            "labels": {
                "app.kubernetes.io/name": "gpufleet",
                "app.kubernetes.io/component": "slo",
                **rules_cfg.monitor_labels,
            },
        },
        "spec": rule_groups(cfg),
    }


def load_config(text: str, source: str) -> SloConfig:
    """An SloConfig from YAML text; a bad field is one error that names it."""
    raw = yaml_input.load(text, source)
    try:
        cfg = SloConfig.model_validate({} if raw is None else raw)
    except ValidationError as exc:
        raise config_error(source, SloConfig, exc, fix="see deploy/monitoring/slo-config.yaml") from None
    try:
        for scope in scopes(cfg):
            slis(scope)
    except UserError as exc:
        raise ManifestError(source, exc.message, fix=exc.fix) from None
    return cfg
