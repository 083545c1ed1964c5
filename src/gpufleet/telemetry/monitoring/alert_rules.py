"""Alert rules generated from data: a Prometheus rule file, a PrometheusRule manifest, a ServiceMonitor for the
agent, and a `promtool test rules` file with a firing and a quiet case for every rule.

Rules and their tests live in data/alert_rules.yaml; thresholds come from RulesConfig, which Xid pages at which
severity from the Xid policy's ratings (XidRatings, made by health/xid_policy.py `xid_ratings`: the policy lives
above telemetry, so its verdicts come in as data), IB thresholds from the IB counter catalog, and idle-cost prices
(US$ per GPU-hour) are the cost report's: the catalog's list prices, or the operator's cost config's
(gpufleet.cost.prices.alert_prices), so an idle-cost alert quotes what `gpufleet cost report` charges.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpufleet import yaml_input
from gpufleet.catalog import load_ib_counters
from gpufleet.catalog.gpu_prices import DEFAULT_PROVIDER, ON_DEMAND, list_prices_by_product_name
from gpufleet.catalog.ib_counters import SYMBOL_COUNTER
from gpufleet.errors import ManifestError
from gpufleet.telemetry.fields import read_data

RULE_FILE = "gpufleet-rules.yml"
_PLACEHOLDER = re.compile(r"<<([a-z_]+)>>")
_RE2_SPECIAL = re.compile(r"([\\.+*?()|\[\]{}^$])")


@dataclass(frozen=True, slots=True)
class XidRatings:
    """The Xid policy's ratings, as the Xid rules page on them: for each code the catalog lists, every severity
    (FATAL, NONFATAL) a report of it can get, and the severity of a code the catalog does not list. The series
    (DCGM_EXP_XID_ERRORS_COUNT) carries only the code, so a code the rest of its line can rate either way (an
    NVLink5 Xid by its decoded status, an Xid 64 by its text, an Xid 154 by the state it announces) is its own class."""

    severities: Mapping[int, frozenset[str]]
    unknown: str

    def _only(self, severity: str) -> list[int]:
        return sorted(code for code, rated in self.severities.items() if rated == {severity})

    @property
    def fatal(self) -> list[int]:
        return self._only("FATAL")

    @property
    def nonfatal(self) -> list[int]:
        return self._only("NONFATAL")

    @property
    def by_line(self) -> list[int]:
        return sorted(code for code, rated in self.severities.items() if len(rated) > 1)


@dataclass(frozen=True, slots=True)
class PortLimit:
    """An IB port counter judged per window: over `limit` within the window is a fault of the counter's class."""

    counter: str  # the PMA name (PortRcvErrors)
    limit: float
    cause: str  # the root cause the detectors file a count over the limit as (ib-symbol-errors, ib-congestion)


# The runbook the remediation engine picks for each root cause an IB counter rule names (pinned against the engine
# by tests/test_consistency.py)
IB_RUNBOOKS = {"ib-symbol-errors": "bad-cable", "ib-congestion": "ib-congestion"}


@dataclass(frozen=True, slots=True)
class DetectionLimits:
    """The detection thresholds the rules judge by, so a rule fires where the agent's detectors file a finding:
    health/data/thresholds.yaml (with a site's overrides), made into this by health.thresholds `detection_limits`.
    The thresholds live above telemetry, so they come in as data, as the Xid policy's ratings do."""

    thermal_clock_ratio: float  # thermal slowdown counts with the SM clock below this share of its peak ...
    thermal_hold_s: float  # ... held this long, or this much thermal-violation time ...
    thermal_window_s: float  # ... within this window
    cooling_excess_c: float  # an idle GPU this much hotter than the idle GPUs beside it ...
    cooling_hold_s: float  # ... for this long has lost its cooling
    idle_util_percent: float  # a held GPU under this utilization ...
    idle_hold_s: float  # ... for this long is idle
    ber_windows: tuple[tuple[float, float], ...]  # symbol errors: (window_s, bit error rate), shortest (critical) first
    link_down_hold_s: float  # a link that went down (and came back) stays a link-down incident this long
    flap_window_s: float  # this many link downs within the window is a flapping link
    flap_downs: int
    port_window_s: float  # the window the per-window port counters are counted over
    port_limits: tuple[PortLimit, ...]


CATALOG_PRICES = f"{DEFAULT_PROVIDER} {ON_DEMAND} list price from the catalog"
PRICE_FIELDS = frozenset({"usd_per_gpu_hour", "default_usd_per_gpu_hour", "price_source"})
# Fields the rules config once had, now the detection thresholds' (one value for the rules and the detectors)
DETECTION_FIELDS = {
    "gpu_temp_c": "thermal (the rules page on thermal slowdown, as the detector judges it)",
    "clock_drop_ratio": "thermal.clock_ratio",
    "clock_drop_temp_c": "thermal (the rules page on thermal slowdown, as the detector judges it)",
    "idle_util_percent": "idle.util_percent",
    "idle_deep_util_percent": "idle.util_percent",
    "ib_counters": "infiniband and fabric (the per-window port counters) and symbol_errors",
}


class RulesConfig(BaseModel):
    """Thresholds and prices the rules are generated with."""

    model_config = ConfigDict(extra="forbid")

    hostname_label: Literal["hostname", "Hostname"] = "hostname"
    uuid_label: Literal["UUID", "uuid"] = "UUID"  # as the agent's ExpositionConfig names it
    vram_ratio: float = Field(0.95, gt=0, le=1)
    stall_seconds: int = 600
    # the fleet over-temperature rule fires this far below an accelerator's slowdown temperature (0: at it)
    temp_limit_margin_c: float = Field(0, ge=0)
    # Training runs: each judged against its own history.
    throughput_drop_ratio: float = Field(0.2, gt=0, lt=1)  # samples/s this far below the job's own baseline
    loss_plateau_ratio: float = Field(0.01, ge=0, lt=1)  # the least relative gain of an hour's best loss
    grad_norm_max: float = Field(100, gt=0)
    grad_norm_min: float = Field(1e-7, ge=0)
    validation_rise_ratio: float = Field(0.1, gt=0)  # validation loss this far above its best of 6 hours
    # What an idle GPU-hour costs, by the model name NVML reports: the cost report's prices, never set here. By
    # default the catalog's list prices (what `gpufleet cost report` charges without a cost config); `gpufleet
    # telemetry rules --price-file` takes them from the operator's cost config (gpufleet.cost.prices.alert_prices).
    usd_per_gpu_hour: dict[str, float] = Field(default_factory=lambda: dict(list_prices_by_product_name()))
    default_usd_per_gpu_hour: float | None = Field(None, ge=0)  # any other GPU: the cost config's default rate
    price_source: str = CATALOG_PRICES
    namespace: str = "monitoring"
    agent_port_name: str = "metrics"
    agent_selector: dict[str, str] = Field(default_factory=lambda: {"app.kubernetes.io/name": "gpufleet-agent"})
    # The Prometheus Operator picks ServiceMonitors and PrometheusRules by label; kube-prometheus-stack's selector is
    # release: <the name it was installed under>, and objects without it are ignored without a word.
    monitor_labels: dict[str, str] = Field(default_factory=lambda: {"release": "kube-prometheus-stack"})

    @classmethod
    def from_file(cls, path: Path) -> RulesConfig:
        raw = yaml_input.load_file(path) or {}
        prices = sorted(PRICE_FIELDS & set(raw)) if isinstance(raw, dict) else []
        moved = sorted(set(DETECTION_FIELDS) & set(raw)) if isinstance(raw, dict) else []
        if moved:
            where = "; ".join(f"{name}: {DETECTION_FIELDS[name]}" for name in moved)
            raise ManifestError(
                str(path),
                f"{', '.join(moved)}: the rules judge by the detection thresholds, as the agent's detectors do",
                fix=f"set them in a thresholds file ({where}) and pass it with `gpufleet telemetry rules "
                "--thresholds`; GPUFLEET_THRESHOLDS names the same file to the agent and the server",
            )
        if prices:
            raise ManifestError(
                str(path),
                f"{', '.join(prices)}: the idle-cost rules take the cost report's prices, not their own",
                fix="put your prices in a cost config (prices:, default_usd_per_gpu_hour:) and pass it with "
                "`gpufleet telemetry rules --price-file`, as `gpufleet cost report --price-file` reads it",
            )
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:
            raise config_error(str(path), cls, exc, fix="see `gpufleet telemetry rules -h`") from None


def config_error(source: str, model: type[BaseModel], exc: ValidationError, fix: str) -> ManifestError:
    """One line naming the first bad field of a config file (and, for a misspelt one, the field meant)."""
    errors = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")  # a typo explains a missing field
    first = errors[0]
    loc = first["loc"]
    where = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc).lstrip(".")
    if first["type"] == "extra_forbidden":
        close = difflib.get_close_matches(str(loc[-1]), _fields_at(model, loc[:-1]), n=1)
        message = f"unknown field {where!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
    elif first["type"] == "model_type" and not loc:
        message = f"expected a mapping of settings, got {type(first['input']).__name__}"
    else:
        message = f"{where or '(document)'}: {first['msg']}"
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more)"
    return ManifestError(source, message, fix=fix)


def _fields_at(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The field names of the (nested) model at `loc`; list indices are skipped."""
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        fields = getattr(current, "model_fields", {})
        field = fields.get(part) if isinstance(fields, dict) else None
        if field is None:
            return []
        candidates = [field.annotation, *getattr(field.annotation, "__args__", ())]
        current = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)
    return list(current.model_fields) if isinstance(current, type) and issubclass(current, BaseModel) else []


def re2_escape(text: str) -> str:
    return _RE2_SPECIAL.sub(r"\\\1", text)


def fill(template: str, values: Mapping[str, str]) -> str:
    def sub(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in values:
            raise KeyError(f"alert_rules.yaml uses <<{key}>> which the generator does not define")
        return values[key]

    return _PLACEHOLDER.sub(sub, template)


def _fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _camel(metric: str) -> str:
    core = metric.removeprefix("infiniband_port_").removesuffix("_total")
    return "".join(part.capitalize() for part in core.split("_"))


def _alternation(codes: Iterable[int]) -> str:
    return "|".join(str(c) for c in sorted(codes))


def _spans(codes: list[int]) -> str:
    """`64, 144-150, 154`: the codes with runs written as ranges."""
    runs: list[list[int]] = []
    for code in sorted(codes):
        if runs and code == runs[-1][-1] + 1:
            runs[-1].append(code)
        else:
            runs.append([code])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 2 else ", ".join(map(str, r)) for r in runs)


def _example(codes: list[int], preferred: int) -> str:
    return str(preferred if preferred in codes else codes[0]) if codes else ""


def xid_values(xids: XidRatings) -> dict[str, str]:
    """The Xid rules' placeholders: one label matcher per class, so every `xid` value matches exactly one rule (a
    code the catalog does not list goes with the policy's rating of unknown codes); an empty matcher leaves its rule
    out. The examples are what each rule's promtool test reports."""
    fatal, nonfatal, by_line = xids.fatal, xids.nonfatal, xids.by_line
    unlisted = str(max(xids.severities, default=0) + 1)  # a code the catalog does not list
    if xids.unknown == "FATAL":
        fatal_matcher = f'xid!~"{_alternation(nonfatal + by_line)}"'
        nonfatal_matcher = f'xid=~"{_alternation(nonfatal)}"' if nonfatal else ""
        fatal_example, nonfatal_example = _example(fatal, 79) or unlisted, _example(nonfatal, 13)
    else:
        fatal_matcher = f'xid=~"{_alternation(fatal)}"' if fatal else ""
        nonfatal_matcher = f'xid!~"{_alternation(fatal + by_line)}"'
        fatal_example, nonfatal_example = _example(fatal, 79), _example(nonfatal, 13) or unlisted
    return {
        "xid_fatal_matcher": fatal_matcher,
        "xid_nonfatal_matcher": nonfatal_matcher,
        "xid_line_matcher": f'xid=~"{_alternation(by_line)}"' if by_line else "",
        "xid_fatal_example": fatal_example,
        "xid_nonfatal_example": nonfatal_example,
        "xid_line_example": _example(by_line, 145),
        "xid_line_codes": _spans(by_line),
    }


def _duration(seconds: float) -> str:
    """A Prometheus duration: `10s`, `5m`, `2h`, `125m`."""
    whole = round(seconds)
    if whole % 3600 == 0 and whole:
        return f"{whole // 3600}h"
    return f"{whole // 60}m" if whole % 60 == 0 and whole else f"{whole}s"


def _spoken(seconds: float) -> str:
    """`10 s`, `5 minutes`, `an hour`, `125 minutes`."""
    if seconds == 3600:
        return "an hour"
    return f"{seconds / 60:g} minutes" if seconds >= 120 else f"{seconds:g} s"


def limit_values(limits: DetectionLimits) -> dict[str, str]:
    """The placeholders the detection thresholds fill."""
    return {
        "thermal_clock_ratio": _fmt(limits.thermal_clock_ratio),
        "thermal_clock_percent": _fmt(round(limits.thermal_clock_ratio * 100, 2)),
        "thermal_hold": _duration(limits.thermal_hold_s),
        "thermal_hold_spoken": _spoken(limits.thermal_hold_s),
        "thermal_duty": _fmt(round(limits.thermal_hold_s / limits.thermal_window_s, 6)),
        "thermal_window_spoken": _spoken(limits.thermal_window_s),
        "cooling_excess_c": _fmt(limits.cooling_excess_c),
        "cooling_hold": _duration(limits.cooling_hold_s),
        "cooling_hold_spoken": _spoken(limits.cooling_hold_s),
        "idle_util_percent": _fmt(limits.idle_util_percent),
        "idle_hold": _duration(limits.idle_hold_s),
        "idle_hold_spoken": _spoken(limits.idle_hold_s),
        "down_window": _duration(limits.link_down_hold_s),
        "down_window_spoken": _spoken(limits.link_down_hold_s),
        "flap_window": _duration(limits.flap_window_s),
        "flap_window_spoken": _spoken(limits.flap_window_s),
        "flap_downs": str(limits.flap_downs),
        "symbol_window": _duration(limits.ber_windows[0][0]),
        "symbol_threshold": str(load_ib_counters()[SYMBOL_COUNTER].threshold or 0),
    }


def _base_values(cfg: RulesConfig, xids: XidRatings, limits: DetectionLimits) -> dict[str, str]:
    return {
        "host": cfg.hostname_label,
        "uuid": cfg.uuid_label,
        "vram_ratio": _fmt(cfg.vram_ratio),
        "vram_percent": _fmt(round(cfg.vram_ratio * 100, 2)),
        "stall_seconds": str(cfg.stall_seconds),
        "temp_limit_margin_c": _fmt(cfg.temp_limit_margin_c),
        **limit_values(limits),
        **xid_values(xids),
        "throughput_keep_ratio": _fmt(round(1 - cfg.throughput_drop_ratio, 6)),
        "throughput_drop_percent": _fmt(round(cfg.throughput_drop_ratio * 100, 2)),
        "loss_plateau_ratio": _fmt(cfg.loss_plateau_ratio),
        "loss_plateau_percent": _fmt(round(cfg.loss_plateau_ratio * 100, 2)),
        "grad_norm_max": _fmt(cfg.grad_norm_max),
        "grad_norm_min": _fmt(cfg.grad_norm_min),
        "validation_rise_ratio": _fmt(cfg.validation_rise_ratio),
        "validation_rise_percent": _fmt(round(cfg.validation_rise_ratio * 100, 2)),
    }


def _variants(group: dict[str, Any], cfg: RulesConfig, limits: DetectionLimits) -> list[dict[str, str]]:
    """Placeholder sets a group expands into: one per priced model (plus the rest), one per IB counter judged per
    window, one per symbol-error window."""
    if group.get("per_model"):
        # One rule per distinct price (models sharing a price share a rule); the rest at the default rate, or
        # without a price where the cost config has none (as the report leaves them unpriced).
        default = cfg.default_usd_per_gpu_hour
        by_price: dict[float, list[str]] = {}
        for model, price in sorted(cfg.usd_per_gpu_hour.items()):
            if price != default:
                by_price.setdefault(price, []).append(model)
        source = f"{cfg.price_source}, as `gpufleet cost report` charges it"
        out = []
        for price, models in sorted(by_price.items()):
            alternation = "|".join(re2_escape(m) for m in models)
            out.append(_priced(f'modelName=~"{alternation}"', price, source, models[0]))
        priced = "|".join(re2_escape(m) for models in by_price.values() for m in models)
        rest = f'modelName!~"{priced}"' if priced else 'modelName=~".*"'
        if default is not None:
            out.append(_priced(rest, default, "the cost config's default rate per GPU-hour", _unpriced_model(cfg)))
        else:
            out.append(
                {
                    "model_matcher": rest,
                    "hourly_cost": "price unknown",
                    "costs": "has no price",
                    "price_source": "neither the catalog nor the cost config prices its model",
                    "test_model": _unpriced_model(cfg),
                }
            )
        return out
    if group.get("per_ib_counter"):
        catalog = load_ib_counters()
        out = []
        for judged in limits.port_limits:
            counter = catalog.get(judged.counter)
            if counter is None:
                raise ManifestError(
                    "thresholds", f"unknown IB counter {judged.counter!r}", fix=f"one of {list(catalog)}"
                )
            out.append(
                {
                    "ib_metric": counter.metric,
                    "ib_counter": counter.name,
                    "ib_camel": _camel(counter.metric),
                    "ib_threshold": _fmt(judged.limit),
                    "ib_test_step": _fmt(judged.limit + 1),  # one window's growth over the limit
                    "ib_window": _duration(limits.port_window_s),
                    "ib_window_spoken": _spoken(limits.port_window_s),
                    "ib_description": counter.description.lower(),
                    "ib_cause": counter.cause,
                    "ib_severity": counter.over_threshold or "warning",
                    "ib_root_cause": judged.cause,
                    "ib_runbook": IB_RUNBOOKS[judged.cause],
                }
            )
        return out
    if group.get("per_ber_window"):
        first_s, first_ber = limits.ber_windows[0]
        out = []
        for k, (window_s, ber) in enumerate(limits.ber_windows):
            # a longer window's warning stays quiet while the shortest one's critical fires: one verdict per port
            symbols = "infiniband_port_symbol_errors_total"
            shorter = (
                ""
                if k == 0
                else (
                    f" unless ({symbols} - min_over_time({symbols}[{_duration(first_s)}])"
                    f" > infiniband_port_rate_bytes_per_second * 8 * {_fmt(first_s)} * {first_ber:g})"
                )
            )
            out.append(
                {
                    "ber_name": "" if k == 0 else f"Over{_duration(window_s)}",
                    "ber_window": _duration(window_s),
                    "ber_window_s": _fmt(window_s),
                    "ber_window_spoken": _spoken(window_s),
                    "ber": f"{ber:g}",
                    "ber_severity": "critical" if k == 0 else "warning",
                    "ber_shorter": shorter,
                    # the test's burst pages in the shortest window at once, in a longer one after it left the shortest
                    "ber_fires_at": "6m" if k == 0 else _duration(60 * (6 + 1) + first_s),
                }
            )
        return out
    return [{}]


def _priced(matcher: str, price: float, source: str, test_model: str) -> dict[str, str]:
    return {
        "model_matcher": matcher,
        "price": f"{price:.2f}",
        "hourly_cost": f"about ${price:.2f}/hour",
        "costs": f"costs about ${price:.2f} per hour",
        "price_source": source,
        "test_model": test_model,
    }


def _unpriced_model(cfg: RulesConfig) -> str:
    for model in ("NVIDIA A10", "NVIDIA L40S", "Tesla T4"):
        if cfg.usd_per_gpu_hour.get(model, cfg.default_usd_per_gpu_hour) == cfg.default_usd_per_gpu_hour:
            return model
    return "Unpriced GPU"


def expanded(
    cfg: RulesConfig, xids: XidRatings, limits: DetectionLimits
) -> list[tuple[str, list[tuple[dict[str, Any], dict[str, str]]]]]:
    spec = yaml.safe_load(read_data("alert_rules.yaml"))
    base = _base_values(cfg, xids, limits)
    groups = []
    for group in spec["groups"]:
        rules = []
        for variant in _variants(group, cfg, limits):
            values = {**base, **variant}
            for rule in group["rules"]:
                if "requires" in rule and not values[rule["requires"]]:
                    continue  # a class with no member: its rule would never fire
                rules.append((rule, values))
        groups.append((group["name"], rules))
    return groups


def rule_groups(cfg: RulesConfig | None = None, *, xids: XidRatings, limits: DetectionLimits) -> dict[str, Any]:
    """The Prometheus rule file contents; the Xid rules page as `xids` (the Xid policy's ratings) say, the others
    judge by `limits` (the detection thresholds)."""
    cfg = cfg or RulesConfig()
    groups = []
    for name, rules in expanded(cfg, xids, limits):
        out = []
        for rule, values in rules:
            out.append(
                {
                    "alert": fill(rule["alert"], values),
                    "expr": fill(rule["expr"], values),
                    "for": fill(str(rule["for"]), values),
                    "labels": rule_labels(rule, values),
                    "annotations": {
                        "summary": fill(rule["summary"], values),
                        "description": fill(rule["description"], values),
                    },
                }
            )
        groups.append({"name": name, "rules": out})
    return {"groups": groups}


def rule_labels(rule: Mapping[str, Any], values: Mapping[str, str]) -> dict[str, str]:
    labels = {"severity": fill(str(rule["severity"]), values)}
    if "cause" in rule:  # the root cause gpufleet's detectors file the same fault as (for routing and the matrix)
        labels["cause"] = fill(str(rule["cause"]), values)
    if "price" in values:
        labels["usd_per_gpu_hour"] = values["price"]
    return labels


def prometheus_rule(cfg: RulesConfig | None = None, *, xids: XidRatings, limits: DetectionLimits) -> dict[str, Any]:
    cfg = cfg or RulesConfig()
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "gpufleet-rules",
            "namespace": cfg.namespace,
            "labels": {
                "app.kubernetes.io/name": "gpufleet",
                "app.kubernetes.io/component": "alerting",
                **cfg.monitor_labels,
            },
        },
        "spec": rule_groups(cfg, xids=xids, limits=limits),
    }


def service_monitor(cfg: RulesConfig | None = None, interval: str = "15s") -> dict[str, Any]:
    cfg = cfg or RulesConfig()
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {
            "name": "gpufleet-agent",
            "namespace": cfg.namespace,
            "labels": {"app.kubernetes.io/name": "gpufleet-agent", **cfg.monitor_labels},
        },
        "spec": {
            "selector": {"matchLabels": dict(cfg.agent_selector)},
            "namespaceSelector": {"any": True},
            "endpoints": [
                {
                    "port": cfg.agent_port_name,
                    "path": "/metrics",
                    "interval": interval,
                    "scrapeTimeout": "5s",
                    "honorLabels": True,
                }
            ],
        },
    }


def dump(data: Mapping[str, Any]) -> str:
    return yaml.safe_dump(dict(data), sort_keys=False, allow_unicode=True, width=1000)
